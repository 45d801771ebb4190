"""The one module that talks to aiokafka: connections, metadata and the produce protocol.

Everything above this module sees the small :class:`KafkaAdapter` protocol and aioaccum's own
error tree; aiokafka's classes and exceptions stop here. Tests of the sender drive a fake that
implements the same protocol.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import ssl
import struct
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import aiokafka.errors as kerr
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import create_conn
from aiokafka.protocol.produce import (
    ProduceRequest,
    ProduceRequest_v3,
    ProduceRequest_v4,
    ProduceRequest_v5,
    ProduceRequest_v6,
    ProduceRequest_v7,
)
from aiokafka.protocol.transaction import InitProducerIdRequest
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from aioaccum._core import kafka_errors
from aioaccum._core.cluster import TopicPartition
from aioaccum._kafka.logs import Throttle, demote_aiokafka_noise
from aioaccum._kafka.metadata import MetadataClient
from aioaccum._kafka.oauth import MECHANISM as OAUTHBEARER
from aioaccum._kafka.oauth import OAuthBearerFailed, OAuthClient, TokenCache
from aioaccum._kafka.wire import I32, NO_TAGS, Call, Reader, compact_str, uvarint
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import (
    AioAccumError,
    AuthenticationError,
    BrokerError,
    ProducerTimeoutError,
    TopicAuthorizationError,
)

__all__ = [
    "AioKafkaAdapter",
    "KafkaAdapter",
    "PartitionResponse",
    "broker_error_for_code",
    "map_errors",
]


class PartitionResponse(NamedTuple):
    """One partition's answer in a produce response (one per batch: a tuple, the cheapest
    object to make)."""

    error: BrokerError | None
    base_offset: int
    log_append_time: int


class ProduceAnswers(dict):  # type: ignore[type-arg]  # dict[TopicPartition, PartitionResponse]
    """The partitions' answers to one produce request, and how long the broker throttled it
    (``throttle_time_ms``, for the ``produce-throttle-time`` metrics)."""

    throttle_time_ms = 0


class KafkaAdapter(Protocol):
    """What the sender and producer need from the network layer."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def leader_for(self, tp: TopicPartition) -> int | None: ...

    def partitions_for_node(self, node: int) -> Sequence[TopicPartition]: ...

    @property
    def metadata_version(self) -> int: ...

    def partitions_for_topic(self, topic: str) -> Sequence[int] | None: ...

    def available_partitions_for_topic(self, topic: str) -> Sequence[int]: ...

    def request_metadata_update(self, topics: Sequence[str] = ()) -> None: ...

    async def wait_for_topic(self, topic: str, timeout: float) -> Sequence[int]: ...

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]: ...

    async def init_producer_id(self) -> tuple[int, int]: ...


def broker_error_for_code(
    code: int,
    message: str | None = None,
    *,
    topic: str | None = None,
    batch_bytes: int | None = None,
) -> BrokerError:
    """A typed error for a Kafka error code.

    A code named in :class:`~aioaccum._core.kafka_errors.Errors` is called by Kafka's name and
    takes its flags from the sender's table (:data:`~aioaccum._core.kafka_errors.RULES`), so the
    error a user reads and what the sender did about it agree; any other code takes aiokafka's
    name and flags. TOPIC_AUTHORIZATION_FAILED is a :class:`TopicAuthorizationError`. The
    message ends with what to change when a retry cannot help (``topic`` and ``batch_bytes``
    make that advice concrete).
    """
    retriable = kafka_errors.retriable(code)
    cls = kerr.for_code(code)
    # aiokafka has no class for some codes a Kafka 4 broker sends (INVALID_RECORD is its
    # "UnknownError"), and older names for others: Kafka's names are what its docs use.
    name = cls.__name__ if retriable is None else kafka_errors.Errors(code).name
    text = f"{name} (error code {code})"
    if message:
        text = f"{text}: {message}"
    advice = kafka_errors.advice(code, topic=topic, batch_bytes=batch_bytes)
    if advice:
        text = f"{text}; {advice}" if message else f"{text}: {advice}"
    if retriable is None:
        return BrokerError(
            text,
            errno=code,
            retriable=bool(cls.retriable),
            invalid_metadata=bool(getattr(cls, "invalid_metadata", False)),
        )
    rule = kafka_errors.RULES[kafka_errors.Errors(code)]
    error_class = (
        TopicAuthorizationError
        if code == kafka_errors.Errors.TOPIC_AUTHORIZATION_FAILED
        else BrokerError
    )
    return error_class(
        text, errno=code, retriable=retriable, invalid_metadata=rule.refresh_metadata
    )


_AUTH_ERRORS = (
    kerr.SaslAuthenticationFailed,
    kerr.UnsupportedSaslMechanismError,
    kerr.IllegalSaslStateError,
    kerr.AuthenticationFailedError,
    kerr.AuthenticationMethodNotSupported,
)
_DIAGNOSIS_TIMEOUT_MS = 5000
# The connection went away mid-handshake: a broker restarting looks the same, so these say
# nothing about certificates or protocols.
_SSL_TRANSPORT_ERRORS = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)
# A TLS record starts with its content type (21 is an alert) and the major version 3; a
# plaintext client reads those bytes as the length of a Kafka response.
_TLS_ALERT_PREFIX = (21, 3)


def _tls_alert_answer(exc: BaseException) -> bool:
    """Whether a plaintext connection was answered with a TLS alert (the port speaks TLS)."""
    cause = exc.__cause__
    if not isinstance(cause, asyncio.IncompleteReadError) or cause.expected is None:
        return False
    size = cause.expected
    return (size >> 24, (size >> 16) & 0xFF) == _TLS_ALERT_PREFIX


def _authentication_error(
    exc: BaseException, where: str, login: str = "SASL authentication"
) -> AuthenticationError | None:
    """The typed error for a failure to secure or authenticate a connection, else None.

    ``login`` says who tried to log in how, e.g. "SASL PLAIN authentication as 'app'".
    """
    if isinstance(exc, OAuthBearerFailed):
        return AuthenticationError(str(exc))  # says what failed where; never holds the token
    if isinstance(exc, _AUTH_ERRORS):
        # aiokafka's text is the broker's, which never repeats the password.
        return AuthenticationError(
            f"{login} with {where} failed: {exc}; check sasl_mechanism, "
            "sasl_plain_username and sasl_plain_password"
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return AuthenticationError(
            f"TLS certificate of {where} not accepted: {exc.verify_message} (verify code "
            f"{exc.verify_code}); trust the cluster's CA with "
            "ssl_context=ssl.create_default_context(cafile=...), and connect by a host name "
            "or IP address that the certificate lists"
        )
    if isinstance(exc, ssl.SSLError) and not isinstance(exc, _SSL_TRANSPORT_ERRORS):
        return AuthenticationError(
            f"TLS handshake with {where} failed: {exc.reason or exc}; is that port a TLS "
            "listener, and does security_protocol match it?"
        )
    if isinstance(exc, kerr.KafkaConnectionError) and _tls_alert_answer(exc):
        return AuthenticationError(
            f"{where} answered with a TLS alert: it is a TLS listener, so set "
            "security_protocol='SSL' or 'SASL_SSL' (with an ssl_context trusting its CA)"
        )
    return None


def _translate(exc: kerr.KafkaError | asyncio.TimeoutError | OSError) -> AioAccumError:
    auth = _authentication_error(exc, "the broker")
    if auth is not None:
        return auth
    if isinstance(exc, kerr.KafkaError):
        errno = int(getattr(exc, "errno", -1))
        return BrokerError(
            str(exc),
            errno=errno,
            retriable=bool(exc.retriable),
            invalid_metadata=bool(getattr(exc, "invalid_metadata", False)),
        )
    if isinstance(exc, TimeoutError):
        return ProducerTimeoutError(f"request timed out: {exc}")
    return BrokerError(f"connection error: {exc}", retriable=True, invalid_metadata=True)


@contextlib.contextmanager
def map_errors() -> Iterator[None]:
    """Turn aiokafka and socket errors into aioaccum's tree, keeping the cause."""
    try:
        yield
    except (kerr.KafkaError, OSError) as exc:
        raise _translate(exc) from exc


class _RedactSaslAuthentication(logging.Filter):
    """Hides SASL authentication payloads from aiokafka's DEBUG request log.

    aiokafka logs every request it sends, and a PLAIN SaslAuthenticate request carries the
    password in clear text (SCRAM's carries a proof derived from it, OAUTHBEARER's the token).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(map(self._is_sasl, record.args)):
            record.args = tuple(
                "SaslAuthenticateRequest(<redacted>)" if self._is_sasl(arg) else arg
                for arg in record.args
            )
        return True

    @staticmethod
    def _is_sasl(arg: object) -> bool:
        return type(arg).__name__.startswith("SaslAuthenticateRequest")


_SASL_REDACTION = _RedactSaslAuthentication()


def _redact_sasl_logs() -> None:
    conn_logger = logging.getLogger("aiokafka.conn")
    if _SASL_REDACTION not in conn_logger.filters:
        conn_logger.addFilter(_SASL_REDACTION)


# One message per missing topic a minute, however many sends wait for it.
_MISSING_TOPIC_LOG = Throttle()


log = logging.getLogger(__name__)


def _socket_buffers(config: ProducerConfig) -> list[tuple[int, int]]:
    """(option, bytes) for Java's send.buffer.bytes and receive.buffer.bytes; None: OS default."""
    sizes = (
        (socket.SO_SNDBUF, config.send_buffer_bytes),
        (socket.SO_RCVBUF, config.receive_buffer_bytes),
    )
    return [(option, size) for option, size in sizes if size is not None]


class _SocketBufferClient(MetadataClient):
    """The metadata client, with the socket buffer sizes set on every broker connection.

    aiokafka opens its sockets itself and has no such settings, so the sizes are set when a
    connection is first handed out, after its handshake; Java sets them before connect(). The
    send buffer then works as in Java; the receive buffer bounds what the socket holds, but
    the largest TCP window it may offer was settled at connect time (tcp(7)).
    """

    def __init__(self, buffers: Sequence[tuple[int, int]], **settings: Any) -> None:
        super().__init__(**settings)
        self._buffers = buffers
        self._sized: weakref.WeakSet[Any] = weakref.WeakSet()

    # Every connection aiokafka sends on after its first bootstrap request comes from here,
    # new or cached, whether for metadata or for produce requests.
    async def _get_conn(self, node_id: Any, **kwargs: Any) -> Any:
        conn = await super()._get_conn(node_id, **kwargs)
        if conn is not None and conn not in self._sized:
            self._sized.add(conn)
            self._set_buffers(conn)
        return conn

    def _set_buffers(self, conn: Any) -> None:
        writer = getattr(conn, "_writer", None)
        sock = writer.get_extra_info("socket") if writer is not None else None
        if sock is None:
            return
        try:
            for option, size in self._buffers:
                sock.setsockopt(socket.SOL_SOCKET, option, size)
        except OSError as exc:
            # Raising here would end aiokafka's metadata task, which calls this too; the
            # connection still works with the OS's sizes.
            log.warning("could not set the socket buffer sizes of %s: %s", conn, exc)


class _OAuthSocketBufferClient(_SocketBufferClient, OAuthClient):
    """Both steps: connections authenticated with OAUTHBEARER, then their buffers sized."""


class AioKafkaAdapter:
    """:class:`KafkaAdapter` on top of aiokafka's ``AIOKafkaClient``."""

    def __init__(
        self, config: ProducerConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._config = config
        self._clock = clock
        self._client: AIOKafkaClient | None = None
        self._node_partitions: dict[int, list[TopicPartition]] = {}
        self._metadata_version = 0
        self._node_partitions_version = -1
        # Partitions per topic looked up since the last metadata update, which empties it.
        self._topic_partitions: dict[str, list[int]] = {}
        # Topic -> when it was last seen in use (Java's ProducerMetadata keeps the same map),
        # for forgetting topics idle for metadata_max_idle_ms.
        self._tracked_topics: dict[str, float] = {}
        # Available partitions, asked on every sticky switch: answered from a dict until the
        # next metadata update. (Leaders need no such cache: the accumulator's ready index
        # asks once per partition and metadata version.)
        self._available: dict[str, list[int]] = {}
        self._available_version = -1
        # Partition count per topic as last handed out, and who wants to know when it changes.
        self._partition_counts: dict[str, int] = {}
        self._count_listeners: list[Callable[[str], None]] = []
        # Set by a transactional producer (aioaccum._runtime.transactions): every produce request
        # names the transaction, and under KIP-890 (transaction.version 2) goes out as v12, which
        # adds its partitions to the transaction by itself.
        self.transactional_id: str | None = None
        self.produce_v12 = False

    @property
    def client(self) -> AIOKafkaClient:
        if self._client is None:
            raise RuntimeError("the Kafka adapter is not started")
        return self._client

    async def start(self) -> None:
        cfg = self._config
        ssl_context = cfg.ssl_context
        if ssl_context is None and "SSL" in cfg.security_protocol:
            # Verified by default, as Java does: the system's CAs and the host name.
            ssl_context = ssl.create_default_context()
        demote_aiokafka_noise()
        security: dict[str, Any] = {
            "security_protocol": cfg.security_protocol,
            "ssl_context": ssl_context,
        }
        tokens: TokenCache | None = None
        if cfg.sasl_mechanism == OAUTHBEARER:
            # aiokafka opens the connections (PLAINTEXT or SSL); _oauth.OAuthClient runs SASL.
            _redact_sasl_logs()
            assert cfg.sasl_oauth_token_provider is not None  # the config's rules see to it
            tokens = TokenCache(
                cfg.sasl_oauth_token_provider, timeout=cfg.request_timeout_ms / 1000
            )
            security["security_protocol"] = cfg.security_protocol.removeprefix("SASL_")
        elif cfg.sasl_mechanism is not None:
            _redact_sasl_logs()
            security["sasl_mechanism"] = cfg.sasl_mechanism
            security["sasl_plain_username"] = cfg.sasl_plain_username
            security["sasl_plain_password"] = cfg.sasl_plain_password
        settings: dict[str, Any] = {
            "bootstrap_servers": cfg.bootstrap_servers,
            "client_id": cfg.client_id,
            "metadata_max_age_ms": cfg.metadata_max_age_ms,
            "request_timeout_ms": cfg.request_timeout_ms,
            "retry_backoff_ms": cfg.retry_backoff_ms,
            "connections_max_idle_ms": cfg.connections_max_idle_ms,
            **security,
        }
        buffers = _socket_buffers(cfg)
        client: MetadataClient
        # Only then: the subclasses add a step to every request's connection lookup.
        if tokens is not None:
            client = (
                _OAuthSocketBufferClient(buffers, tokens=tokens, **settings)
                if buffers
                else OAuthClient(tokens=tokens, **settings)
            )
        elif buffers:
            client = _SocketBufferClient(buffers, **settings)
        else:
            client = MetadataClient(**settings)
        client.cluster.add_listener(self._on_metadata_update)
        try:
            try:
                await client.bootstrap()
            except kerr.KafkaConnectionError as exc:
                await self._explain_bootstrap_failure(client, security, exc)
                raise
        except (kerr.KafkaError, OSError) as exc:
            await client.close()
            raise _translate(exc) from exc
        except BaseException:
            await client.close()
            raise
        self._client = client

    async def _explain_bootstrap_failure(
        self, client: AIOKafkaClient, security: dict[str, Any], failure: Exception
    ) -> None:
        """Raises why no bootstrap server could be used; returns if that has passed.

        aiokafka logs each server's error but raises one generic error, and a refused
        password or certificate must not look like a broker that is merely down (which is
        retriable). One more connection to one server tells which it is: an
        :class:`AuthenticationError`, or a retriable :class:`BrokerError` naming the cause.
        """
        host, port, _ = client.hosts[0]
        where = f"{host}:{port}"
        # Refused credentials and certificates are answered within milliseconds: a server
        # silent for longer has some other problem, and the user has waited enough.
        timeout_ms = min(self._config.request_timeout_ms, _DIAGNOSIS_TIMEOUT_MS)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                conn = await create_conn(
                    host,
                    port,
                    client_id=self._config.client_id,
                    request_timeout_ms=timeout_ms,
                    **security,
                )
        except (TimeoutError, kerr.KafkaError, OSError) as exc:
            cfg = self._config
            login = f"SASL {cfg.sasl_mechanism} authentication as {cfg.sasl_plain_username!r}"
            auth = _authentication_error(exc, where, login)
            if auth is not None:
                raise auth from exc
            detail = f"{where}: {exc!r}"
            if "SSL" in self._config.security_protocol and isinstance(exc, ConnectionError):
                detail += " during the TLS handshake (is that port a TLS listener?)"
            raise BrokerError(
                f"{failure}; {detail}", retriable=True, invalid_metadata=True
            ) from exc
        conn.close()

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def _on_metadata_update(self, _cluster: object) -> None:
        self._metadata_version += 1
        used, self._topic_partitions = self._topic_partitions, {}
        self._forget_idle_topics(used)

    def _forget_idle_topics(self, used: Iterable[str]) -> None:
        """Java's ProducerMetadata.retainTopic: a topic not produced to for metadata_max_idle_ms
        leaves the metadata requests (partitions_for_topic or wait_for_topic bring it back).

        ``used``: the topics partitions_for_topic answered since the last update; that cache
        doubles as the record of use, so the per-record path reads no clock.
        """
        tracked = self._tracked_topics
        if not tracked:
            return
        now = self._clock()
        # Copies before iterating: sends on other threads may add topics meanwhile.
        for topic in list(used):
            if topic in tracked:
                tracked[topic] = now
        max_idle_ms = self._config.metadata_max_idle_ms
        # Every new topic's metadata is an update: a glance at the oldest use before sorting.
        if (now - min(tracked.values())) * 1000 < max_idle_ms:
            return
        by_last_use = sorted(tracked.items(), key=lambda item: item[1])
        # The topic used last stays even when idle: aiokafka asks for every topic of the
        # cluster when it tracks none, where Java asks for none.
        idle = [t for t, seen in by_last_use[:-1] if (now - seen) * 1000 >= max_idle_ms]
        if not idle:
            return
        for topic in idle:
            del tracked[topic]
            self._partition_counts.pop(topic, None)
        self.client.set_topics(list(tracked))
        log.debug("metadata: forgot topics %s, not produced to for %d ms", idle, max_idle_ms)

    # --- cluster view

    def leader_for(self, tp: TopicPartition) -> int | None:
        found = self.client.cluster.leader_for_partition(KafkaTopicPartition(tp[0], tp[1]))
        return None if found is None or found < 0 else int(found)

    def partitions_for_node(self, node: int) -> Sequence[TopicPartition]:
        if self._node_partitions_version != self._metadata_version:
            self._node_partitions = {}
            self._node_partitions_version = self._metadata_version
        parts = self._node_partitions.get(node)
        if parts is None:
            found = self.client.cluster.partitions_for_broker(node) or ()
            # A stable order makes the drain's rotating start index meaningful.
            parts = sorted(TopicPartition(tp.topic, tp.partition) for tp in found)
            self._node_partitions[node] = parts
        return parts

    @property
    def metadata_version(self) -> int:
        return self._metadata_version

    def partitions_for_topic(self, topic: str) -> Sequence[int] | None:
        # Called once per record: answer from a cache that lives until the next metadata update.
        cached = self._topic_partitions.get(topic)
        if cached is not None:
            return cached
        parts = self.client.cluster.partitions_for_topic(topic)
        if parts is None:
            # Not tracked yet: wait_for_topic does that once the producer checked the name, so
            # an invalid name never goes into the metadata requests.
            return None
        self._track(topic)
        result = self._topic_partitions[topic] = sorted(parts)
        self._note_partition_count(topic, len(result))
        return result

    def on_partition_count_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(topic)`` when a topic's partitions are handed out in a different
        number than the last time (partitions added, or the topic deleted and created again
        with another count), before anything is appended with the new count.

        The producer resets the topic's sticky partition then: after a shrink it may name a
        partition that no longer exists, where keyless records would wait out
        ``delivery_timeout_ms`` and fail.
        """
        self._count_listeners.append(listener)

    def _note_partition_count(self, topic: str, count: int) -> None:
        # Once per topic and metadata version (partitions_for_topic's cache), or per wait.
        known = self._partition_counts.get(topic)
        if known == count:
            return
        self._partition_counts[topic] = count
        if known is None:
            return
        log.info("topic %r now has %d partitions (had %d)", topic, count, known)
        for listener in self._count_listeners:
            listener(topic)

    def _partitions_found(self, topic: str, parts: Iterable[int]) -> list[int]:
        found = sorted(parts)
        self._note_partition_count(topic, len(found))
        return found

    def _track(self, topic: str) -> None:
        # aiokafka refreshes only the topics it was told about once any was added, so every
        # topic this producer writes to must be added, or a refresh would drop it.
        if topic not in self._tracked_topics:
            self.client.add_topic(topic)
        self._tracked_topics[topic] = self._clock()

    def available_partitions_for_topic(self, topic: str) -> Sequence[int]:
        if self._available_version != self._metadata_version:
            self._available = {}
            self._available_version = self._metadata_version
        cached = self._available.get(topic)
        if cached is None:
            parts = self.client.cluster.available_partitions_for_topic(topic)
            cached = self._available[topic] = sorted(parts) if parts else []
        return cached

    def request_metadata_update(self, topics: Sequence[str] = ()) -> None:
        # As in Java's sender: a topic whose batches wait for a leader is in use.
        for topic in topics:
            self._track(topic)
        self.client.force_metadata_update()

    async def wait_for_topic(self, topic: str, timeout: float) -> Sequence[int]:
        """Partitions of ``topic``, fetching metadata until it is known or ``timeout`` passes."""
        client = self.client
        parts = client.cluster.partitions_for_topic(topic)
        if parts:
            return self._partitions_found(topic, parts)
        # In use from now on (Java's ProducerMetadata.add), so full refreshes name it too.
        self._tracked_topics[topic] = self._clock()
        deadline = asyncio.get_running_loop().time() + timeout
        misses = 0
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    version = self._metadata_version
                    await self._fetch_topic(client, topic)
                    parts = client.cluster.partitions_for_topic(topic)
                    if parts:
                        return self._partitions_found(topic, parts)
                    if self._metadata_version != version:  # an answer, without the topic
                        misses += 1
                        if misses == 2:  # a first miss may be a fetch racing the creation
                            self._say_topic_missing(topic, timeout)
                    if topic in client.cluster.unauthorized_topics:
                        # The answer refused the topic: no later round will differ until an
                        # ACL changes, so waiting out max_block_ms would only hide why.
                        raise broker_error_for_code(
                            kafka_errors.Errors.TOPIC_AUTHORIZATION_FAILED, topic=topic
                        )
                    await asyncio.sleep(self._config.retry_backoff_ms / 1000)
        except TimeoutError:
            parts = client.cluster.partitions_for_topic(topic)
            if parts:
                return self._partitions_found(topic, parts)
        raise ProducerTimeoutError(
            f"topic {topic!r} not present in metadata after {timeout * 1000:.0f} ms; "
            "create the topic (auto-creation may be off) or raise max_block_ms"
        )

    @staticmethod
    def _say_topic_missing(topic: str, timeout: float) -> None:
        held = _MISSING_TOPIC_LOG.allow(topic)
        if held is None:
            return
        log.warning(
            "topic %r is not in the cluster's metadata; send() waits up to max_block_ms "
            "(%.0f ms) for it: create the topic (auto-creation is often off) or check its "
            "name%s",
            topic, timeout * 1000,
            f" ({held} more wait(s) for it since the last message)" if held else "",
        )

    @staticmethod
    def _fetch_topic(client: AIOKafkaClient, topic: str) -> Awaitable[object]:
        """One metadata round naming ``topic``.

        Asked again on every round, even if tracked already: a send on another thread may have
        tracked it again just as it was forgotten, after which no refresh would name it.
        """
        if isinstance(client, MetadataClient):
            # Java's KIP-526: new topics alone, with every other new topic waiting now. The
            # round is shared with other waiters, so a wait that times out must not cancel it.
            return asyncio.shield(client.request_update_for_new_topic(topic))
        # aiokafka's own client (as tests plug in): a refresh of every tracked topic.
        client.add_topic(topic)
        return client.force_metadata_update()  # type: ignore[no-any-return]

    # --- requests

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        by_topic: dict[str, list[tuple[int, memoryview]]] = collections.defaultdict(list)
        for tp, records in batches:
            by_topic[tp[0]].append((tp[1], records))
        request: Any
        if self.produce_v12:
            request = _produce_v12(self.transactional_id, acks, timeout_ms, by_topic)
        else:
            request = _FastProduceRequest(
                transactional_id=self.transactional_id,
                required_acks=acks,
                timeout=timeout_ms,
                topics=list(by_topic.items()),
            )
        try:
            with map_errors():
                response = await self.client.send(node, request)
        except AioAccumError as exc:
            # Only a node that was never connected saw nothing; after the request was written,
            # a lost connection or a timeout leaves its batches possibly in the log.
            # Nor did one whose OAUTHBEARER (re-)authentication failed before the request.
            exc.possibly_written = not isinstance(
                exc.__cause__, (kerr.NodeNotReadyError, OAuthBearerFailed)
            )
            raise
        if acks == 0:
            return {tp: PartitionResponse(None, -1, -1) for tp, _ in batches}
        out = ProduceAnswers()
        out.throttle_time_ms = int(getattr(response, "throttle_time_ms", 0) or 0)
        for topic, partitions in response.topics:
            for info in partitions:
                partition, code, offset, timestamp = info[0], info[1], info[2], info[3]
                message = info[6] if len(info) > 6 else None
                error = (
                    broker_error_for_code(
                        code, message, topic=topic, batch_bytes=_size_of(batches, topic, partition)
                    )
                    if code
                    else None
                )
                out[TopicPartition(topic, partition)] = PartitionResponse(
                    error, int(offset), int(timestamp)
                )
        return out

    async def init_producer_id(self) -> tuple[int, int]:
        client = self.client
        node = client.get_random_node()
        request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
        with map_errors():
            response = await client.send(node, request)
        if response.error_code:
            raise broker_error_for_code(response.error_code, "InitProducerId failed")
        return int(response.producer_id), int(response.producer_epoch)


def _size_of(
    batches: Sequence[tuple[TopicPartition, memoryview]], topic: str, partition: int
) -> int | None:
    """Bytes of the batch sent to one partition, for an error's message (errors are rare: a
    search, not a map built for every request)."""
    for tp, records in batches:
        if tp[1] == partition and tp[0] == topic:
            return len(records)
    return None


# --- the produce request, encoded in one pass

_PRODUCE = 0
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_AND_TIMEOUT = struct.Struct(">hi")
_PARTITION_AND_SIZE = struct.Struct(">ii")


def _encode_produce(request: Any) -> bytes:
    """Produce request v3 to v7 (one layout): aiokafka's generic field-by-field encoder costs
    about 18 us a request, most of it walking the schema; this joins the pieces once."""
    transactional_id = request.transactional_id
    if transactional_id is None:
        parts = [b"\xff\xff"]  # a null string
    else:
        raw = transactional_id.encode()
        parts = [_INT16.pack(len(raw)), raw]
    parts.append(_ACKS_AND_TIMEOUT.pack(request.required_acks, request.timeout))
    parts.append(_INT32.pack(len(request.topics)))
    for topic, partitions in request.topics:
        raw = topic.encode()
        parts += (_INT16.pack(len(raw)), raw, _INT32.pack(len(partitions)))
        for partition, records in partitions:
            parts += (_PARTITION_AND_SIZE.pack(partition, len(records)), records)
    return b"".join(parts)


_TOPIC_PARTITION_HEADER = struct.Struct(">ihqq")  # partition, error code, offset, timestamp


class _ProduceResponse:
    """A produce response v3 to v7, read in one pass (aiokafka's generic reader: about 13 us).

    ``topics`` has aiokafka's shape: ``[(topic, [(partition, error_code, offset, timestamp,
    ...)])]``; v5 and later add the log start offset, which is skipped.
    """

    __slots__ = ("throttle_time_ms", "topics")

    def __init__(self, topics: list[tuple[str, list[tuple[int, ...]]]], throttle: int) -> None:
        self.topics = topics
        self.throttle_time_ms = throttle

    @classmethod
    def reader(cls, version: int) -> Callable[[Any], _ProduceResponse]:
        skip = 8 if version >= 5 else 0  # log_start_offset

        def decode(stream: Any) -> _ProduceResponse:
            data = stream.read() if hasattr(stream, "read") else bytes(stream)
            pos = 4
            topics = []
            for _ in range(_INT32.unpack_from(data, 0)[0]):
                size = _INT16.unpack_from(data, pos)[0]
                topic = data[pos + 2 : pos + 2 + size].decode()
                pos += 2 + size
                count = _INT32.unpack_from(data, pos)[0]
                pos += 4
                partitions = []
                for _ in range(count):
                    partitions.append(_TOPIC_PARTITION_HEADER.unpack_from(data, pos))
                    pos += _TOPIC_PARTITION_HEADER.size + skip
                topics.append((topic, partitions))
            return cls(topics, _INT32.unpack_from(data, pos)[0])

        return decode


def _fast_struct(cls: type[Any]) -> type[Any]:
    response = type(
        f"Fast{cls.RESPONSE_TYPE.__name__}",
        (),
        {"decode": staticmethod(_ProduceResponse.reader(cls.API_VERSION))},
    )
    return type(
        f"Fast{cls.__name__}", (cls,), {"encode": _encode_produce, "RESPONSE_TYPE": response}
    )


# The request classes aiokafka negotiates, with the one-pass encoder and reader; other versions
# (none a Kafka 4 broker accepts) keep aiokafka's.
_FAST_STRUCTS: dict[type[Any], type[Any]] = {
    cls: _fast_struct(cls)
    for cls in (
        ProduceRequest_v3,
        ProduceRequest_v4,
        ProduceRequest_v5,
        ProduceRequest_v6,
        ProduceRequest_v7,
    )
}


class _FastProduceRequest(ProduceRequest):  # type: ignore[misc]  # aiokafka is untyped here
    """aiokafka's ProduceRequest (same version negotiation, same response parsing), whose
    request body is encoded by :func:`_encode_produce`."""

    def build(self, request_struct_class: type[Any]) -> Any:
        return super().build(_FAST_STRUCTS.get(request_struct_class, request_struct_class))


# --- produce v12, for KIP-890 transactions (flexible format)


def _produce_v12(
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    by_topic: Mapping[str, list[tuple[int, memoryview]]],
) -> Call:
    """Produce v12: the first version whose partitions join a transaction by themselves
    (KIP-890); v13 names topics by id instead."""

    def body(_version: int) -> bytes:
        parts: list[bytes | memoryview] = [
            compact_str(transactional_id), _ACKS_AND_TIMEOUT.pack(acks, timeout_ms)
        ]
        parts.append(uvarint(len(by_topic) + 1))
        for topic, partitions in by_topic.items():
            parts += (compact_str(topic), uvarint(len(partitions) + 1))
            for partition, records in partitions:
                parts += (I32.pack(partition), uvarint(len(records) + 1), records, NO_TAGS)
            parts.append(NO_TAGS)
        parts.append(NO_TAGS)
        return b"".join(parts)

    def read(_version: int, r: Reader) -> _ProduceResponse:
        topics = []
        for _ in range(r.compact_count()):
            topic = r.compact_str() or ""
            partitions: list[tuple[Any, ...]] = []
            for _ in range(r.compact_count()):
                partition, code, offset, timestamp = r.int32(), r.int16(), r.int64(), r.int64()
                r.int64()  # log start offset
                for _ in range(r.compact_count()):  # per-record errors: the message says it
                    r.int32()
                    r.compact_str()
                    r.tags()
                message = r.compact_str()
                r.tags()
                partitions.append((partition, code, offset, timestamp, -1, None, message))
            r.tags()
            topics.append((topic, partitions))
        return _ProduceResponse(topics, r.int32())

    return Call(_PRODUCE, (12,), body, read)
