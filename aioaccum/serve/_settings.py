"""The gateway's command line, derived from the rows of its settings.

The rows and :class:`ServeSettings` live with every other setting, in
:mod:`aioaccum.config.serve_settings`; here they become ``serve``'s options and help.
"""

from __future__ import annotations

import argparse

from aioaccum.config.serve_settings import SETTINGS, ServeSettings

__all__ = ["HELP_EPILOG", "SETTINGS", "ServeSettings", "add_arguments"]

HELP_EPILOG = """\
--config FILE holds the server's settings by the keys in brackets above, e.g.
    listen=0.0.0.0:8082
    workers=4
    tls.cert=/etc/aioaccum/cert.pem
    tls.key=/etc/aioaccum/key.pem
    auth.file=/etc/aioaccum/credentials
    schema.registry.url=https://registry:8081
    schema.registry.basic.auth.user.info=USER:PASSWORD

--auth-file FILE has one credential per line, NAME:SECRET:TOPICS, e.g.
    web-front:long-random-secret:clicks,pageviews
    etl:sha256:<hex SHA-256 of the secret>:orders.*
    admin:another-secret:*
TOPICS lists topic names, prefix* patterns, or * for all. Callers authenticate with HTTP
basic auth (NAME and SECRET) or an API key (X-API-Key: SECRET, or Authorization: Bearer
SECRET). With an auth file, every request but /healthz and /readyz must authenticate (401),
and may write only its topics (403).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``serve`` subcommand's options."""
    parser.add_argument(
        "--bootstrap-server", metavar="HOST:PORT[,...]",
        help="the Kafka cluster (overrides bootstrap.servers of --producer.config)",
    )
    parser.add_argument(
        "--producer.config", dest="producer_config", metavar="FILE",
        help="a Java .properties file of producer settings (name=value lines); put "
        "credentials such as sasl.jaas.config here, not on the command line",
    )
    parser.add_argument(
        "--producer-props", nargs="*", metavar="KEY=VALUE",
        help="producer settings, Java (linger.ms) or Python (linger_ms) names; these override "
        "--producer.config",
    )
    parser.add_argument(
        "--config", metavar="FILE",
        help="a .properties file of the server's own settings, by the keys in brackets below "
        "(e.g. 'workers=4'); flags override it",
    )
    for row in SETTINGS:
        default = "" if row.default is None else f"; default {row.default}"
        parser.add_argument(
            row.flag, metavar=row.kind.metavar, default=None,
            help=f"{row.doc} [{row.key}{default}]",
        )
