"""The adapter to aiokafka's client: connections, metadata and sending produce requests.

Everything above ``_kafka/`` sees the small :class:`KafkaAdapter` protocol and aioaccum's own
error tree (made by :mod:`aioaccum._kafka.errors`); aiokafka's classes and exceptions stop in
this folder. The produce request's bytes are :mod:`aioaccum._kafka.produce`'s. Tests of the
sender drive a fake that implements the same protocol.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

import aiokafka.errors as kerr
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import create_conn
from aiokafka.protocol.transaction import InitProducerIdRequest
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from aioaccum._core import kafka_errors
from aioaccum._core.cluster import TopicPartition
from aioaccum._kafka.connection import ConnectionSettings
from aioaccum._kafka.connections import ProduceConnections
from aioaccum._kafka.errors import (
    authentication_error,
    broker_error_for_code,
    map_errors,
    translate,
)
from aioaccum._kafka.logs import Throttle, demote_aiokafka_noise, redact_sasl_logs
from aioaccum._kafka.metadata import MetadataClient
from aioaccum._kafka.oauth import MECHANISM as OAUTHBEARER
from aioaccum._kafka.oauth import OAuthBearerFailed, OAuthClient, TokenCache
from aioaccum._kafka.produce import (
    FastProduceRequest,
    PartitionResponse,
    ProduceAnswers,
    answers_from,
    produce_v12,
)
from aioaccum._kafka.sasl import Credentials
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import (
    AioAccumError,
    BrokerError,
    ProducerTimeoutError,
)

__all__ = [
    "AioKafkaAdapter",
    "KafkaAdapter",
    "PartitionResponse",
    "ProduceAnswers",
    "ProduceDone",
    "ProduceHandle",
    "TaskProduce",
]


class ProduceHandle(Protocol):
    """A produce request sent and not ended: what the sender keeps of it."""

    def cancel(self) -> None:
        """Give up on it: its completion is never called (the sender at shutdown)."""

    async def released(self) -> None:
        """Return once no transport holds the request's buffers (after :meth:`cancel`)."""


ProduceDone = Callable[[Any, Any, "BaseException | None"], None]
"""``done(handle, answers, None)`` or ``done(handle, None, error)``: a produce request's end,
called once from the loop (never from inside :meth:`KafkaAdapter.send_produce`) unless the
request was cancelled. ``error`` is an :class:`AioAccumError` (``possibly_written`` set) except
after a bug in the network layer."""


class KafkaAdapter(Protocol):
    """What the sender and producer need from the network layer."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def leader_for(self, tp: TopicPartition) -> int | None: ...

    def partitions_for_node(self, node: int) -> Sequence[TopicPartition]: ...

    def rack_of(self, node: int) -> str | None: ...

    @property
    def client_rack(self) -> str | None: ...

    @property
    def metadata_version(self) -> int: ...

    def partitions_for_topic(self, topic: str) -> Sequence[int] | None: ...

    def available_partitions_for_topic(self, topic: str) -> Sequence[int]: ...

    def request_metadata_update(self, topics: Sequence[str] = ()) -> None: ...

    async def wait_for_topic(self, topic: str, timeout: float) -> Sequence[int]: ...

    def send_produce(
        self,
        node: int,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]],
        done: ProduceDone,
    ) -> ProduceHandle:
        """Send one produce request to ``node`` without waiting for it; each batch is its
        list of buffers, written as they are. ``done`` tells how it ended. The sender passes
        the arguments by position (once per request: keywords cost as much again to parse)."""
        ...

    async def init_producer_id(self) -> tuple[int, int]: ...


class TaskProduce:
    """A produce request carried out by a task awaiting an ``async produce(node, acks=,
    timeout_ms=, batches=)`` that takes each batch as one buffer: how a network layer without
    a connection of its own (aiokafka's client, the tests' fakes) offers
    :meth:`KafkaAdapter.send_produce`. A task per request: not the producer's own path."""

    __slots__ = ("_done", "task")

    def __init__(
        self,
        produce: Callable[..., Awaitable[Any]],
        node: int,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]],
        done: ProduceDone,
    ) -> None:
        self._done: ProduceDone | None = done
        joined = [
            (tp, parts[0] if len(parts) == 1 else memoryview(b"".join(parts)))
            for tp, parts in batches
        ]
        self.task = asyncio.get_running_loop().create_task(
            self._run(produce, node, acks, timeout_ms, joined)
        )

    async def _run(
        self,
        produce: Callable[..., Awaitable[Any]],
        node: int,
        acks: int,
        timeout_ms: int,
        batches: list[tuple[TopicPartition, memoryview]],
    ) -> None:
        try:
            answers = await produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)
        except asyncio.CancelledError:
            if self._done is not None:
                # Cancelled by someone else (the loop shutting down): an end all the same.
                lost = translate(kerr.KafkaConnectionError("the produce request was cancelled"))
                lost.possibly_written = True
                self._end(None, lost)
            raise
        except Exception as exc:
            self._end(None, exc)
        else:
            self._end(answers, None)

    def _end(self, answers: Any, error: BaseException | None) -> None:
        # Called in the task's own step, as the answer comes: no extra loop turn.
        done, self._done = self._done, None
        if done is not None:
            done(self, answers, error)

    def cancel(self) -> None:
        self._done = None
        self.task.cancel()

    async def released(self) -> None:
        # Once the task has ended, nothing it called holds the buffers.
        await asyncio.wait([self.task])


# How long a failed bootstrap may spend finding out why (refused credentials or certificates are
# answered within milliseconds).
_DIAGNOSIS_TIMEOUT_MS = 5000

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
        # Partitions per topic looked up since the last metadata update, which empties it (in
        # place: the producer holds the dict, see topic_partitions).
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
        # Produce requests go on aioaccum's own connections (aioaccum._kafka.connection);
        # aiokafka's carry everything else.
        self.produce_connections: ProduceConnections | None = None

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
            redact_sasl_logs()
            assert cfg.sasl_oauth_token_provider is not None  # the config's rules see to it
            tokens = TokenCache(
                cfg.sasl_oauth_token_provider, timeout=cfg.request_timeout_ms / 1000
            )
            security["security_protocol"] = cfg.security_protocol.removeprefix("SASL_")
        elif cfg.sasl_mechanism is not None:
            redact_sasl_logs()
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
            raise translate(exc) from exc
        except BaseException:
            await client.close()
            raise
        self._client = client
        credentials = None
        if cfg.sasl_mechanism is not None:
            credentials = Credentials(
                cfg.sasl_mechanism, cfg.sasl_plain_username, cfg.sasl_plain_password, tokens
            )
        settings_for_produce = ConnectionSettings(
            client_id=cfg.client_id,
            request_timeout=cfg.request_timeout_ms / 1000,
            idle_timeout=cfg.connections_max_idle_ms / 1000,
            ssl_context=ssl_context,
            credentials=credentials,
            socket_buffers=buffers,
        )
        self.produce_connections = ProduceConnections(settings_for_produce, self._address)

    def _address(self, node: int) -> tuple[str, int] | None:
        client = self._client
        found = client.cluster.broker_metadata(node) if client is not None else None
        return None if found is None else (found.host, int(found.port))

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
            auth = authentication_error(exc, where, login)
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
        conns, self.produce_connections = self.produce_connections, None
        if conns is not None:
            await conns.close()
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def _on_metadata_update(self, _cluster: object) -> None:
        self._metadata_version += 1
        cache = self._topic_partitions
        used = list(cache)  # one C call under the GIL: sends on other threads cannot interleave
        cache.clear()
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

    def rack_of(self, node: int) -> str | None:
        # Brokers' racks come with every metadata answer (MetadataResponse v1 and later).
        broker = self.client.cluster.broker_metadata(node)
        rack = None if broker is None else broker.rack
        return rack if isinstance(rack, str) else None

    @property
    def client_rack(self) -> str | None:
        # The partitioner is made before the connection; the view carries the client's rack
        # to it beside the brokers' (ProducerConfig already refused rack awareness without one).
        cfg = self._config
        return cfg.client_rack if cfg.partitioner_rack_aware else None

    @property
    def metadata_version(self) -> int:
        return self._metadata_version

    @property
    def topic_partitions(self) -> dict[str, list[int]]:
        """What :meth:`partitions_for_topic` answered per topic since the last metadata update.

        The same dict for the adapter's life, emptied (never replaced) when metadata changes:
        the producer reads it once per record, a dictionary lookup where the method call costs
        several times more, and calls the method only for a topic it does not hold."""
        return self._topic_partitions

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

    def send_produce(
        self,
        node: int,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]],
        done: ProduceDone,
    ) -> ProduceHandle:
        conns = self.produce_connections
        if conns is not None:
            return conns.send_produce(
                node, acks, timeout_ms, batches, self.transactional_id, self.produce_v12, done
            )
        return TaskProduce(self.produce, node, acks, timeout_ms, batches, done)

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        """One produce request on aiokafka's client, awaited (before :meth:`start` made the
        produce connections, and for tests that plug a client in)."""
        by_topic: dict[str, list[tuple[int, memoryview]]] = collections.defaultdict(list)
        for tp, records in batches:
            by_topic[tp[0]].append((tp[1], records))
        request: Any
        if self.produce_v12:
            request = produce_v12(self.transactional_id, acks, timeout_ms, by_topic)
        else:
            request = FastProduceRequest(
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
        return answers_from(response, [(tp, (records,)) for tp, records in batches])

    async def init_producer_id(self) -> tuple[int, int]:
        client = self.client
        node = client.get_random_node()
        request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
        with map_errors():
            response = await client.send(node, request)
        if response.error_code:
            raise broker_error_for_code(response.error_code, "InitProducerId failed")
        return int(response.producer_id), int(response.producer_epoch)

