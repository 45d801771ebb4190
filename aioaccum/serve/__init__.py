"""``aioaccum serve``: the producer as an HTTP service speaking Confluent REST Proxy's produce API.

Any language and any front end can then produce over HTTP with aioaccum's batching, memory
bound and delivery guarantees; existing REST Proxy clients work unchanged::

    aioaccum serve --bootstrap-server kafka:9092 --producer.config producer.properties

    curl -X POST -H "Content-Type: application/vnd.kafka.json.v2+json" \\
         --data '{"records":[{"value":{"foo":"bar"}}]}' http://127.0.0.1:8082/topics/jsontest

Endpoints (``pip install aioaccum[serve]``):

* REST Proxy v2: ``POST /topics/{topic}``, ``POST /topics/{topic}/partitions/{p}`` (binary and
  JSON embedded formats), ``GET /topics``, ``GET /topics/{topic}``; see ``_v2``.
* REST Proxy v3: ``GET /v3/clusters``, ``GET /v3/clusters/{id}``,
  ``POST /v3/clusters/{id}/topics/{topic}/records`` with BINARY, JSON and STRING data, headers,
  partition and timestamp, one record or a stream of them on one connection; see ``_v3``.
* ``/healthz`` (the process is up), ``/readyz`` (a broker answers; 503 otherwise, and while
  shutting down), ``/metrics`` (the producer's metrics in Prometheus' text format).

Errors are REST Proxy's ``{"error_code": N, "message": "..."}``; ``_errors`` has the table. In
short: a full producer buffer is 429 with ``Retry-After`` after ``buffer.wait.ms``, a record or
body over the limits 413, malformed input 400 or 422, an unknown topic 404 (the gateway never
creates topics), brokers out of reach 503 after ``max.block.ms`` or ``delivery.timeout.ms``.
Memory stays bounded: the producer's ``buffer.memory`` bounds records, ``body.budget.bytes`` the
request bodies being read, and ``max.body.bytes`` any one of them.

Security: TLS with ``--tls-cert``/``--tls-key``; credentials and per-credential topic lists
with ``--auth-file`` (format in ``_auth``); the server binds 127.0.0.1 unless ``--listen`` says
otherwise. Secrets are never logged.

Each worker process (``--workers N``, sharing one listening socket) has its own producer. On
SIGTERM the server drains and exits 0 (see ``_run``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._auth import AuthFile, Principal
from ._errors import ErrorCode, RestError
from ._settings import HELP_EPILOG, SETTINGS, ServeSettings, add_arguments

if TYPE_CHECKING:
    from ._app import create_app
    from ._run import serve


def __getattr__(name: str) -> Any:
    # The web stack (starlette, uvicorn) is imported only to serve, not to build the command
    # line's help, so `aioaccum perf` works without the serve extra.
    if name == "create_app":
        from ._app import create_app

        return create_app
    if name == "serve":
        from ._run import serve

        return serve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "HELP_EPILOG",
    "SETTINGS",
    "AuthFile",
    "ErrorCode",
    "Principal",
    "RestError",
    "ServeSettings",
    "add_arguments",
    "create_app",
    "serve",
]
