"""What the v2 and v3 endpoints share: one producer per process, topic checks, the bounded
wait for buffer memory, the budget of request bytes, and the wait for acknowledgements that
a shutdown cuts short.

Every wait here has a bound. A record waits for buffer memory ``buffer.wait.ms``, then the
answer is 429. A topic check waits for a broker ``max.block.ms``, then 503. A record's outcome
comes within ``delivery.timeout.ms`` (the producer sees to it), or, once SIGTERM came, within
``shutdown.grace.ms``. A client that goes away cancels none of it: records already handed to
the producer are delivered, and their futures are only watched, never cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aioaccum import (
    AioAccumError,
    FutureRecordMetadata,
    Producer,
    ProducerTimeoutError,
    RecordMetadata,
    wait_all,
)
from aioaccum._kafka.cluster_view import ClusterReader, ClusterSnapshot, TopicInfo

from ._auth import AuthFile, Principal
from ._errors import (
    RETRY_AFTER_OUTAGE_S,
    ErrorCode,
    RestError,
    buffer_full,
    partition_not_found,
    rest_error_for,
    topic_not_found,
)
from ._settings import ServeSettings

if TYPE_CHECKING:
    from ._schemas import SchemaResolver

__all__ = ["STOPS_THE_REST", "ByteBudget", "Draining", "Gateway", "Outcome"]

log = logging.getLogger("aioaccum.serve")

# A topic seen to exist is trusted this long before it is asked about again: a round trip per
# request would double the cost of small requests.
TOPIC_TTL_S = 10.0
# Kafka's rule for topic names (Topic.validate): 1 to 249 of these characters, not "." or "..".
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")

Outcome = RecordMetadata | RestError

# What Gateway.send raises when the buffer stayed full, the brokers are out of reach or the
# server stops: the records after this one in the same request or stream would meet the same
# (each after its own wait), so none of them is sent, and the client sends the rest again, in
# order, once it may.
STOPS_THE_REST = frozenset(
    {ErrorCode.TOO_MANY_REQUESTS, ErrorCode.SERVICE_UNAVAILABLE, ErrorCode.BROKER_NOT_AVAILABLE}
)


class ByteBudget:
    """Bytes of request bodies held by all requests of this process together.

    A request takes its bytes before it reads them and gives them back once its records are in
    the producer's buffer (which has its own bound). FIFO waiters, as the producer's pool.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0
        self._waiters: dict[asyncio.Future[None], int] = {}

    def take_nowait(self, size: int) -> bool:
        if self._waiters or self.held + size > self.total:
            return False
        self.held += size
        return True

    async def take(self, size: int, timeout: float) -> bool:
        """Take ``size`` bytes, waiting up to ``timeout`` seconds; False if they did not free."""
        if size > self.total:
            return False
        if self.take_nowait(size):
            return True
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = size
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            self._leave(waiter, size)
            return False
        except asyncio.CancelledError:
            self._leave(waiter, size)
            raise
        return True

    def _leave(self, waiter: asyncio.Future[None], size: int) -> None:
        """A wait that ended without using its grant: nothing held, nobody blocked by it."""
        if waiter.done() and not waiter.cancelled():
            self.give(size)  # granted just as the wait ended: hand it on
        if self._waiters.pop(waiter, None) is not None:
            self._grant()  # left the queue: whoever it blocked may go now

    def give(self, size: int) -> None:
        self.held -= size
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            waiter, size = next(iter(self._waiters.items()))
            if not waiter.cancelled() and self.held + size > self.total:
                return
            del self._waiters[waiter]
            if not waiter.cancelled():
                self.held += size
                waiter.set_result(None)


class Draining:
    """The shutdown's clock: set when SIGTERM arrives, expired ``grace`` seconds later.

    Streams stop reading at :attr:`started`; waits for acknowledgements stop at
    :attr:`expired`, answering what is still unacknowledged with 503.
    """

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.expired = asyncio.Event()

    def begin(self, grace: float) -> None:
        """Start the shutdown; call on the loop's thread (a signal handler on it may)."""
        if self.started.is_set():
            return
        self.started.set()
        asyncio.get_running_loop().call_later(grace, self.expired.set)


@dataclass(frozen=True, slots=True)
class _KnownTopic:
    info: TopicInfo
    until: float


class Gateway:
    """The producer and everything around it, for one process."""

    def __init__(
        self,
        settings: ServeSettings,
        producer: Producer,
        reader: ClusterReader,
        auth: AuthFile | None,
        draining: Draining,
        schemas: SchemaResolver | None = None,
    ) -> None:
        self.settings = settings
        # The schema formats' registry; None without schema.registry.url.
        self.schemas = schemas
        self.producer = producer
        self.reader = reader
        self.auth = auth
        self.budget = ByteBudget(settings.body_budget_bytes)
        self.draining = draining
        config = settings.producer_config
        self._max_block_s = config.max_block_ms / 1000
        self._buffer_wait_s = settings.buffer_wait_ms / 1000
        self._known: dict[str, _KnownTopic] = {}
        self._asking: dict[str, asyncio.Task[ClusterSnapshot]] = {}
        self._probing: asyncio.Future[ClusterSnapshot] | None = None
        self.cluster_id: str | None = None
        self.in_flight = 0
        self.records_accepted = 0

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Counts a produce request in flight while it runs."""
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    # --- who is calling

    def principal(self, headers: Mapping[str, str]) -> Principal | None:
        """The caller, or None when auth is off.

        Raises:
            RestError: 401, when auth is on and the credentials are missing or wrong.
        """
        return None if self.auth is None else self.auth.authenticate(headers)

    def authorize(self, headers: Mapping[str, str], topic: str) -> None:
        """Raises RestError 401 or 403 unless the caller may write ``topic``, 400 (after the
        caller is known) when ``topic`` is not a name Kafka allows."""
        principal = self.principal(headers)
        if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
            raise RestError(
                400,
                ErrorCode.BAD_REQUEST,
                f"{topic!r} is not a Kafka topic name: 1 to 249 characters of a-z, A-Z, 0-9, "
                "'.', '_' and '-', and not '.' or '..'",
            )
        if principal is not None and not principal.may_write(topic):
            raise principal.forbidden(topic)

    # --- topics

    async def describe(self, topics: Sequence[str] | None) -> ClusterSnapshot:
        """Metadata (every topic when ``topics`` is None), within ``max.block.ms``.

        Raises:
            RestError: 503 when no broker answered in time.
        """
        try:
            snapshot = await self.reader.describe(topics, self._max_block_s)
        except AioAccumError as exc:
            raise rest_error_for(exc) from exc
        if snapshot.cluster_id is not None:
            self.cluster_id = snapshot.cluster_id
        return snapshot

    async def probe(self) -> ClusterSnapshot:
        """Whether a broker answers, within ``readiness.timeout.ms``; callers at the same time
        share one request, so a flood of /readyz costs the cluster one round trip.

        Raises:
            AioAccumError: No broker answered in time.
        """
        probing = self._probing
        if probing is None:
            timeout = self.settings.readiness_timeout_ms / 1000
            probing = asyncio.ensure_future(self.reader.describe([], timeout))
            self._probing = probing
            probing.add_done_callback(self._probed)
        # Shared: one caller leaving must not cancel it for the rest.
        return await asyncio.shield(probing)

    def _probed(self, probing: asyncio.Future[ClusterSnapshot]) -> None:
        self._probing = None
        if not probing.cancelled():
            probing.exception()  # retrieved here too, in case every caller left

    async def topic(
        self, name: str, *, not_found: ErrorCode = ErrorCode.TOPIC_NOT_FOUND
    ) -> TopicInfo:
        """The topic's metadata, from a recent answer or a new one; requests for the same topic
        at the same time share one metadata request.

        Raises:
            RestError: 404 when the cluster has no such topic, 403 when the gateway's own
                principal may not describe it, 503 when no broker answered in time.
        """
        loop = asyncio.get_running_loop()
        known = self._known.get(name)
        if known is not None and known.until > loop.time():
            return known.info
        asking = self._asking.get(name)
        if asking is None:
            asking = asyncio.ensure_future(self.describe([name]))
            self._asking[name] = asking
            asking.add_done_callback(lambda _: self._asking.pop(name, None))
        # Shared with other requests: one leaving must not cancel it for the rest.
        snapshot = await asyncio.shield(asking)
        if name in snapshot.unauthorized:
            raise RestError(
                403,
                ErrorCode.KAFKA_AUTHORIZATION,
                f"the cluster refused this gateway's producer access to topic {name!r}: grant "
                "its principal DESCRIBE and WRITE on the topic",
            )
        info = snapshot.topics.get(name)
        if info is None:
            self._known.pop(name, None)
            raise topic_not_found(name, not_found)
        self._known[name] = _KnownTopic(info, loop.time() + TOPIC_TTL_S)
        return info

    @staticmethod
    def check_partition(info: TopicInfo, partition: int | None) -> None:
        """Raises RestError 404 (40402) unless ``partition`` is None or one of the topic's."""
        if partition is not None and not 0 <= partition < len(info.partitions):
            raise partition_not_found(info.name, partition, len(info.partitions))

    # --- records

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> FutureRecordMetadata:
        """Hand one record to the producer, waiting at most ``buffer.wait.ms`` for memory.

        Raises:
            RestError: 429 when the buffer stayed full, 413 for a record too large, 503 when
                the producer is closing, and the rest of :func:`rest_error_for`; a code in
                :data:`STOPS_THE_REST` says that the records after this one would fail alike.
        """
        if self.draining.started.is_set():
            raise RestError(
                503,
                ErrorCode.SERVICE_UNAVAILABLE,
                "the server is shutting down and takes no more records; send them to another "
                "instance",
                retry_after=RETRY_AFTER_OUTAGE_S,
            )
        try:
            # The metadata first, with its own bound: a slow metadata answer is an outage
            # (503), not a full buffer, and buffer.wait.ms below is then the pool's wait alone.
            async with asyncio.timeout(self._max_block_s):
                await self.producer.partitions_for(topic)
        except (TimeoutError, ProducerTimeoutError):
            # Either bound may end it first: the producer's own max.block.ms, or this one.
            raise RestError(
                503,
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"no metadata for topic {topic!r} within max.block.ms="
                f"{self.settings.producer_config.max_block_ms} ms: the brokers are out of reach; "
                f"retry after {RETRY_AFTER_OUTAGE_S} s",
                retry_after=RETRY_AFTER_OUTAGE_S,
            ) from None
        except AioAccumError as exc:
            raise rest_error_for(exc) from exc
        try:
            # A send() that raises, cancelled by the timeout too, has buffered nothing.
            async with asyncio.timeout(self._buffer_wait_s):
                future = await self.producer.send(
                    topic, value, key, partition, timestamp_ms, headers
                )
        except AioAccumError as exc:
            raise rest_error_for(exc) from exc
        except TimeoutError:
            raise buffer_full(
                self.settings.producer_config.buffer_memory, self.settings.buffer_wait_ms
            ) from None
        self.records_accepted += 1
        return future

    async def settle(self, futures: Sequence[FutureRecordMetadata]) -> list[Outcome]:
        """Each record's outcome, in order, once all have one, or once the shutdown's grace
        has expired (then the unacknowledged ones are 503). Cancelling this cancels no record.
        """
        if not all(future.done() for future in futures):
            waiting = asyncio.ensure_future(wait_all(futures, return_exceptions=True))
            expired = asyncio.ensure_future(self.draining.expired.wait())
            try:
                await asyncio.wait({waiting, expired}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
                expired.cancel()
        return [_outcome(future) for future in futures]


def _outcome(future: FutureRecordMetadata) -> Outcome:
    if not future.done():
        return RestError(
            503,
            ErrorCode.SERVICE_UNAVAILABLE,
            "the server shut down before the record was acknowledged; it may still be written "
            "(the producer flushes on exit): check before sending it again",
            retry_after=RETRY_AFTER_OUTAGE_S,
        )
    if future.cancelled():
        return RestError(500, ErrorCode.KAFKA_ERROR, "the record's outcome was cancelled")
    exc = future.exception()
    if exc is None:
        return future.result()
    if isinstance(exc, AioAccumError):
        return rest_error_for(exc)
    return RestError(500, ErrorCode.KAFKA_ERROR, f"{type(exc).__name__}: {exc}")
