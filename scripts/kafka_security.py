"""The test cluster's SASL listeners: certificates, users and listener settings (stdlib only).

scripts/kafka imports it. Each node gets a SASL_SSL listener that accepts SCRAM-SHA-512 and
PLAIN over TLS, and an OAUTHBEARER listener (SASL_PLAINTEXT) whose tokens Kafka's unsecured
validator checks; brokers still talk to each other over PLAINTEXT. At `up` a throwaway CA and one
broker certificate (SAN: IP 127.0.0.1 and DNS localhost, shared by every node since they all
listen on loopback) are made with the `openssl` command line into <state>/tls. The broker reads
them as PEM, so no keystore tool (and no second JVM start) is needed. Every node also runs
Kafka's StandardAuthorizer, open to all until a test adds an ACL (authorizer_settings).

The users and passwords below are test-only secrets: they are printed by `scripts/kafka
security` so that tests can connect, and they guard nothing but a loopback cluster.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

LISTENER = "SASL_SSL"
MECHANISMS = ("SCRAM-SHA-512", "PLAIN")
# Passwords contain a token no other text in a log would, so leak checks can search for it.
SCRAM_USER = ("aioaccum-scram", "scram-pw-Q7vK2x")
PLAIN_USER = ("aioaccum-plain", "plain-pw-M3nR8z")
CERT_DAYS = 365
CA_SUBJECT = "/CN=aioaccum test CA"
BROKER_SUBJECT = "/CN=localhost"
BROKER_SAN = "IP:127.0.0.1,DNS:localhost"


# SASL_PLAINTEXT with OAUTHBEARER. No sasl.server.callback.handler.class is set, so Kafka's
# default validator (OAuthBearerUnsecuredValidatorCallbackHandler) takes unsigned JWTs:
# {"alg":"none"}, claims sub (the principal), iat and exp (aioaccum.oauth.unsecured_token).
OAUTH_LISTENER = "OAUTHBEARER"
# KIP-368: a session lasts at most this long (less if the token expires sooner), after which the
# broker closes a connection on its next request unless the client re-authenticated it. Small,
# so that a test sees several re-authentications; on this listener only.
OAUTH_REAUTH_MS = 10_000
OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# The broker's own token (a login module is required per mechanism), never used: brokers talk
# to each other over PLAINTEXT.
OAUTH_BROKER_SUB = "aioaccum-broker"


class SecurityError(Exception):
    """The TLS material could not be made; the message says what to install or fix."""


def ca_file(tls_dir: Path) -> Path:
    return tls_dir / "ca.pem"


def keystore_file(tls_dir: Path) -> Path:
    """The broker's private key followed by its certificate chain: Kafka's PEM keystore."""
    return tls_dir / "broker-keystore.pem"


def _openssl(cwd: Path, *args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise SecurityError(
            "the openssl command is needed for the SASL_SSL listener: apt-get install openssl"
        )
    result = subprocess.run(
        [binary, *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SecurityError(f"openssl {args[0]} failed:\n{result.stdout}{result.stderr}")


def make_certificates(tls_dir: Path) -> None:
    """A fresh CA and a broker certificate signed by it, in `tls_dir` (emptied first)."""
    shutil.rmtree(tls_dir, ignore_errors=True)
    tls_dir.mkdir(parents=True)
    # EC P-256 keys take milliseconds to make, where RSA-2048 takes a noticeable fraction of a
    # second on a busy machine. The extensions keep Python 3.13's strict X.509 checks happy.
    ec_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl(
        tls_dir,
        *("req", "-x509", *ec_key, "-keyout", "ca.key", "-out", "ca.pem"),
        *("-days", str(CERT_DAYS), "-subj", CA_SUBJECT),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )
    _openssl(
        tls_dir,
        *("req", "-new", *ec_key, "-keyout", "broker.key", "-out", "broker.csr"),
        *("-subj", BROKER_SUBJECT),
    )
    (tls_dir / "broker.ext").write_text(
        f"subjectAltName={BROKER_SAN}\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid:always\n"
    )
    _openssl(
        tls_dir,
        *("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key"),
        *("-set_serial", "2", "-days", str(CERT_DAYS), "-extfile", "broker.ext"),
        *("-out", "broker.pem"),
    )
    keystore_file(tls_dir).write_text(
        "".join((tls_dir / name).read_text() for name in ("broker.key", "broker.pem", "ca.pem"))
    )
    for name in ("ca.key", "broker.key", "broker.csr", "broker.ext"):
        (tls_dir / name).unlink()
    keystore_file(tls_dir).chmod(0o600)


def _jaas(module: str, options: dict[str, str]) -> str:
    rendered = "".join(f' {key}="{value}"' for key, value in options.items())
    return f"{module} required{rendered};"


def listener_settings(tls_dir: Path) -> dict[str, str]:
    """server.properties entries of the SASL_SSL listener, all scoped to that listener."""
    prefix = f"listener.name.{LISTENER.lower()}."
    plain_user, plain_password = PLAIN_USER
    return {
        f"{prefix}sasl.enabled.mechanisms": ",".join(MECHANISMS),
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(keystore_file(tls_dir)),
        f"{prefix}scram-sha-512.sasl.jaas.config": _jaas(
            "org.apache.kafka.common.security.scram.ScramLoginModule", {}
        ),
        # PLAIN's server side checks passwords against user_<name> options.
        f"{prefix}plain.sasl.jaas.config": _jaas(
            "org.apache.kafka.common.security.plain.PlainLoginModule",
            {f"user_{plain_user}": plain_password},
        ),
    }


def oauth_listener_settings() -> dict[str, str]:
    """server.properties entries of the OAUTHBEARER listener, all scoped to that listener."""
    prefix = f"listener.name.{OAUTH_LISTENER.lower()}."
    return {
        f"{prefix}sasl.enabled.mechanisms": "OAUTHBEARER",
        f"{prefix}oauthbearer.sasl.jaas.config": _jaas(
            OAUTH_LOGIN_MODULE, {"unsecuredLoginStringClaim_sub": OAUTH_BROKER_SUB}
        ),
        f"{prefix}oauthbearer.connections.max.reauth.ms": str(OAUTH_REAUTH_MS),
    }


def authorizer_settings() -> dict[str, str]:
    """server.properties entries that turn ACLs on while taking nothing away.

    A test denies one SASL user one topic with an ACL. Every resource without an ACL stays
    open to everyone (allow.everyone.if.no.acl.found), so the tests that set no ACL see no
    change; a resource with one is closed to every principal no ACL allows, except super
    users. The unauthenticated listeners (PLAINTEXT, PROXIED, CONTROLLER) all connect as
    User:ANONYMOUS: brokers, controllers and the fixtures that create topics and ACLs. No
    SASL user is a super user, since a super user's ACLs would never be checked.
    """
    return {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "true",
    }


def format_arguments() -> list[str]:
    """kafka-storage format arguments that store the SCRAM user in the initial metadata."""
    user, password = SCRAM_USER
    return ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]"]


def describe(tls_dir: Path, addresses: list[str]) -> dict[str, object]:
    """What a client needs to use the listener: the `scripts/kafka security` JSON."""
    return {
        "listener": LISTENER,
        "ca_file": str(ca_file(tls_dir)),
        "bootstrap": ",".join(addresses),
        "nodes": {str(node): address for node, address in enumerate(addresses, start=1)},
        "mechanisms": list(MECHANISMS),
        "users": {
            "SCRAM-SHA-512": {"username": SCRAM_USER[0], "password": SCRAM_USER[1]},
            "PLAIN": {"username": PLAIN_USER[0], "password": PLAIN_USER[1]},
        },
    }


def describe_oauth(addresses: list[str]) -> dict[str, object]:
    """The OAUTHBEARER listener: the "oauthbearer" part of the `scripts/kafka security` JSON."""
    return {
        "listener": OAUTH_LISTENER,
        "security_protocol": "SASL_PLAINTEXT",
        "mechanism": "OAUTHBEARER",
        "bootstrap": ",".join(addresses),
        "nodes": {str(node): address for node, address in enumerate(addresses, start=1)},
        "connections_max_reauth_ms": OAUTH_REAUTH_MS,
        "tokens": 'unsigned JWTs: {"alg":"none"}, claims sub, iat, exp (unsecured validator)',
    }
