"""The asyncio Python contenders, each written the way its documentation shows it fastest, and
what every Python contender's process shares (``Recorder``, ``routes``); the synchronous
contenders are in ``sync_clients``, and ``child`` runs either kind.

This module runs inside a contender's own child process (``scripts/bench --child SPEC``), so
its imports, threads and memory are that contender's alone. Each runner sends ``spec.records``
records of ``spec.size`` bytes and observes every record's outcome (a kept future or a delivery
callback, as the client's idiom has it); a sample of records also carries a latency probe, the
time from the send call to the acknowledgement callback. aioaccum runs under several names that
send alike and differ in how they wait for the futures they kept (``AIOACCUM_WAITS``); its runs
also record which hot path ran, compiled or pure Python.

In the partition-scaling workloads (``spec.spread``) every runner sends record ``i`` to the
topic and with the key that ``routes`` gives it, calling the client's own send method with
``(topic, value, key)`` directly; the plain workloads keep their one-topic loop untouched.

In the memory-bound mode a runner offers records until all are offered or the deadline passes,
keeps no futures (only callbacks), times every send call to see whether it blocks, counts what
the client raises, and then exits at once without flushing: the throttled broker would take
minutes to drain what is buffered, and the broker's end offsets tell what was acknowledged.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator
from itertools import cycle, islice
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from benchlib.spec import MIB, Spec, key_pool, payload

if TYPE_CHECKING:
    from aioaccum import Producer


def rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / MIB


def peak_rss_mib() -> float | None:
    """This process's own peak RSS (VmHWM), None where /proc has no such line.

    ``wait4``'s ``ru_maxrss`` cannot tell it for a small child: Linux keeps the high-water mark
    across ``execve``, so a child reports at least the RSS the parent had when it forked.
    """
    try:
        with open(f"/proc/{os.getpid()}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


class Recorder:
    """Latency samples, error counts and timings of one run, written out as the result."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.latencies: list[float] = []
        self.errors = 0
        self.raised: dict[str, int] = {}
        self.longest_block_s = 0.0
        self.offered = 0
        self.timed_out = False
        self.baseline_rss_mib = 0.0
        self.started = self.ended = 0.0
        # The process's CPU time (user + system, every thread: librdkafka's too) at begin and
        # end, so the cost per record leaves out start-up, imports and connecting.
        self.cpu_started = self.cpu_ended = 0.0
        # aioaccum._speedups.describe() of the aioaccum that ran here (aioaccum runs only).
        self.hot_path: str | None = None

    def begin(self) -> None:
        self.baseline_rss_mib = rss_mib()
        self.cpu_started = time.process_time()
        self.started = time.perf_counter()

    def end(self) -> None:
        self.ended = time.perf_counter()
        self.cpu_ended = time.process_time()

    def probe(self) -> Callable[[Any], None]:
        """A callback that records the latency from now until it is called."""
        sent_at = time.perf_counter()
        latencies = self.latencies

        def done(_: Any) -> None:
            latencies.append((time.perf_counter() - sent_at) * 1000)

        return done

    def raised_one(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.raised[name] = self.raised.get(name, 0) + 1

    def result(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)

        def pct(p: float) -> float | None:
            return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else None

        out: dict[str, Any] = {
            "elapsed_s": max(self.ended - self.started, 1e-9),
            "errors": self.errors,
            "offered": self.offered,
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
            "latency_samples": len(ordered),
            "raised": self.raised,
            "longest_block_s": self.longest_block_s,
            "timed_out": self.timed_out,
            "baseline_rss_mib": self.baseline_rss_mib,
            "cpu_window_s": max(self.cpu_ended - self.cpu_started, 0.0),
            "own_peak_rss_mib": peak_rss_mib(),
        }
        if self.hot_path is not None:
            out["hot_path"] = self.hot_path
        return out


def routes(spec: Spec) -> Iterator[tuple[str, bytes | None]]:
    """Each record's topic and key (None when unkeyed), in order, the same for every contender.

    The topic and key lists are built here, so call it before the clock starts; the iterator
    then only indexes them.
    """
    keys: list[bytes | None] = [*key_pool(spec.keys)] or [None]
    return islice(zip(cycle(spec.topic_names()), cycle(keys), strict=False), spec.records)


def deadline_passed(rec: Recorder) -> bool:
    if time.perf_counter() - rec.started < rec.spec.deadline_s:
        return False
    rec.timed_out = True
    return True


# --- asyncio clients ----------------------------------------------------------------------


class RecordFuture(Protocol):
    """What an asyncio client's send gives back: an ``asyncio.Future`` or aioaccum's
    ``FutureRecordMetadata``."""

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None: ...

    def __await__(self) -> Generator[Any, None, Any]: ...


class SendTo(Protocol):
    """An asyncio client's own send method: ``send(topic, value, key)``, all positional."""

    def __call__(
        self, topic: str, value: bytes, key: bytes | None = None, /
    ) -> Awaitable[RecordFuture]: ...


SendFn = Callable[[bytes], Awaitable[RecordFuture]]
AsyncRunner = Callable[[Spec, Recorder], Coroutine[Any, Any, None]]
# How a contender waits for the futures it kept; counts the failed records in the Recorder.
WaitFn = Callable[[list[RecordFuture], Recorder], Coroutine[Any, Any, None]]


async def drive_async(spec: Spec, rec: Recorder, send_to: SendTo) -> list[RecordFuture]:
    """The send loop every asyncio contender shares: starts the clock, sends with the client's
    ``send_to`` and returns the futures it kept."""
    data = payload(spec.size)
    every = spec.sample_every
    if spec.spread:
        plan = routes(spec)
        rec.begin()
        return await _spread_async(spec, rec, send_to, plan, data, every)
    topic = spec.topic

    def send(value: bytes) -> Awaitable[RecordFuture]:
        return send_to(topic, value)

    rec.begin()
    if spec.memory_bound:
        return await _offer_async(spec, rec, send, data, every)
    if spec.concurrency > 1:
        await _concurrent_async(spec, rec, send, data, every)
        return []
    futures: list[RecordFuture] = []
    keep = futures.append
    for i in range(spec.records):
        if i % every == 0:
            probe = rec.probe()
            future = await send(data)
            future.add_done_callback(probe)
        else:
            future = await send(data)
        keep(future)
    rec.offered = spec.records
    return futures


async def _spread_async(
    spec: Spec,
    rec: Recorder,
    send_to: SendTo,
    plan: Iterator[tuple[str, bytes | None]],
    data: bytes,
    every: int,
) -> list[RecordFuture]:
    futures: list[RecordFuture] = []
    keep = futures.append
    for i, (topic, key) in enumerate(plan):
        if i % every == 0:
            probe = rec.probe()
            future = await send_to(topic, data, key)
            future.add_done_callback(probe)
        else:
            future = await send_to(topic, data, key)
        keep(future)
    rec.offered = spec.records
    return futures


async def _concurrent_async(
    spec: Spec, rec: Recorder, send: SendFn, data: bytes, every: int
) -> None:
    share, extra = divmod(spec.records, spec.concurrency)

    async def sender(index: int, count: int) -> None:
        for i in range(count):
            probe = rec.probe() if (index + i) % every == 0 else None
            future = await send(data)
            try:
                await future
            except Exception as exc:
                rec.errors += 1
                rec.raised_one(exc)
            if probe is not None:
                probe(None)

    async with asyncio.TaskGroup() as group:
        for n in range(spec.concurrency):
            group.create_task(sender(n, share + (1 if n < extra else 0)))
    rec.offered = spec.records


async def _offer_async(
    spec: Spec, rec: Recorder, send: SendFn, data: bytes, every: int
) -> list[RecordFuture]:
    def count(future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            rec.errors += 1

    try:
        async with asyncio.timeout(spec.deadline_s):
            for i in range(spec.records):
                probe = rec.probe() if i % every == 0 else None
                began = time.perf_counter()
                try:
                    future = await send(data)
                except Exception as exc:
                    rec.raised_one(exc)
                    continue
                finally:
                    rec.longest_block_s = max(rec.longest_block_s, time.perf_counter() - began)
                future.add_done_callback(count)
                if probe is not None:
                    future.add_done_callback(probe)
                rec.offered += 1
    except TimeoutError:
        rec.timed_out = True
    return []


# --- ways of waiting for the kept futures; each counts a record whose outcome is an error


async def await_each(futures: list[RecordFuture], rec: Recorder) -> None:
    """``await fut`` for each future in turn (aioaccum's documented idiom)."""
    for future in futures:
        try:
            await future
        except Exception:
            rec.errors += 1


async def gather_all(futures: list[RecordFuture], rec: Recorder) -> None:
    """``asyncio.gather(*futures, return_exceptions=True)`` (aiokafka's and confluent's)."""
    results = await asyncio.gather(*futures, return_exceptions=True)
    rec.errors += sum(1 for r in results if isinstance(r, BaseException))


async def wait_all(futures: list[RecordFuture], rec: Recorder) -> None:
    """``aioaccum.wait_all(futures, return_exceptions=True)``: one wait per batch."""
    from aioaccum import wait_all as aioaccum_wait_all

    results = await aioaccum_wait_all(futures, return_exceptions=True)
    rec.errors += sum(1 for r in results if isinstance(r, BaseException))


def aioaccum_hot_path() -> str:
    """Which of aioaccum's hot paths this process runs (compiled or pure Python)."""
    try:
        from aioaccum import _speedups
    except ImportError:
        return "unknown (this aioaccum has no _speedups)"
    return _speedups.describe()


class _NoOpInterceptor:
    """Passes every record through and ignores every outcome."""

    def on_send(self, record: Any) -> Any:
        return record

    def on_acknowledgement(self, metadata: Any, error: BaseException | None) -> None:
        return None


# The contenders with a write-ahead journal, by journal_sync.
JOURNAL_SYNCS = {f"aioaccum-journal-{mode}": mode for mode in ("none", "interval", "always")}

# The contenders that name buffer_memory_allocation_strategy (KIP-1332) explicitly.
ALLOCATION_STRATEGIES = {"aioaccum-full": "full", "aioaccum-incremental": "incremental"}


def feature_settings(contender: str) -> dict[str, Any]:
    """Extra Producer settings of the contenders that price an optional feature: one no-op
    interceptor, or a span per record (OpenTelemetry's SDK, spans dropped unexported); the
    price of metrics, by turning them off; or an allocation strategy named outright."""
    if contender in ALLOCATION_STRATEGIES:
        return {"buffer_memory_allocation_strategy": ALLOCATION_STRATEGIES[contender]}
    if contender == "aioaccum-nometrics":
        return {"metrics_enabled": False}
    if contender in JOURNAL_SYNCS:
        import atexit
        import shutil
        import tempfile

        # A fresh folder per run, on the machine's temporary disk, removed when the run's
        # process exits: folders left behind keep gigabytes of dirty pages that the kernel
        # writes back during later runs, and make the journal's figures drift run by run.
        folder = tempfile.mkdtemp(prefix="aioaccum-bench-journal-")
        atexit.register(shutil.rmtree, folder, True)
        return {"journal_dir": folder, "journal_sync": JOURNAL_SYNCS[contender],
                "enable_idempotence": True, "acks": -1}
    if contender == "aioaccum-interceptor":
        return {"interceptors": [_NoOpInterceptor()]}
    if contender == "aioaccum-tracing":
        from opentelemetry.sdk.trace import TracerProvider

        return {"tracer_provider": TracerProvider()}
    return {}


def aioaccum_producer(spec: Spec, rec: Recorder) -> Producer:
    """An aioaccum Producer with the workload's settings, noting in ``rec`` which hot path runs
    (imported here: children load one client each)."""
    from aioaccum import Producer

    rec.hot_path = aioaccum_hot_path()
    return Producer(spec.bootstrap, **aioaccum_settings(spec))


def given(**settings: Any) -> dict[str, Any]:
    """The settings that are not None: None leaves a setting at the client's own default."""
    return {name: value for name, value in settings.items() if value is not None}


def aioaccum_settings(spec: Spec) -> dict[str, Any]:
    """The workload's settings in aioaccum's names, with the contender's own extras."""
    return {
        "acks": spec.acks_int,
        "compression_type": spec.compression,
        "enable_idempotence": spec.idempotence,
        "client_id": spec.client_id,
        **given(
            batch_size=spec.batch_size,
            linger_ms=spec.linger_ms,
            buffer_memory=spec.buffer_memory,
        ),
        **feature_settings(spec.contender),
    }


def aioaccum_runner(wait: WaitFn) -> AsyncRunner:
    """aioaccum per record: ``fut = await producer.send(topic, value)``, every future kept,
    then ``wait`` for them and ``flush()``. With concurrent senders, or in the memory-bound
    run, no futures are kept and ``wait`` plays no part."""

    async def run(spec: Spec, rec: Recorder) -> None:
        producer = aioaccum_producer(spec, rec)
        await producer.start()
        await producer.partitions_for(spec.topic_names()[0])
        futures = await drive_async(spec, rec, producer.send)
        if spec.memory_bound:
            exit_now(rec)
        await wait(futures, rec)
        await producer.flush()
        rec.end()
        await producer.close()

    return run


# The aioaccum contenders that send record by record, by how they wait for the futures.
AIOACCUM_WAITS: dict[str, WaitFn] = {
    "aioaccum": await_each,
    "aioaccum-gather": gather_all,
    "aioaccum-wait-all": wait_all,
    "aioaccum-nometrics": await_each,
    "aioaccum-interceptor": await_each,
    "aioaccum-tracing": await_each,
    "aioaccum-full": await_each,
    "aioaccum-incremental": await_each,
    **dict.fromkeys(JOURNAL_SYNCS, await_each),
}


BULK_METHODS = ("send_many", "send_batch")


def bulk_method(producer: object) -> str | None:
    """The name of the Producer's bulk send method, if this version has one."""
    return next((name for name in BULK_METHODS if hasattr(producer, name)), None)


async def run_aioaccum_bulk(spec: Spec, rec: Recorder) -> None:
    """aioaccum's bulk path: ``await producer.send_many(topic, values)`` in chunks of 1,000,
    with ``keys=`` the chunk's keys in a keyed workload (one topic per call: it sits out the
    many-topics ones).

    Takes the result as one future for the chunk (aioaccum's ``send_many``) or a list of
    per-record futures, so a ``send_batch`` of either shape also fits. The latency probe rides
    on each chunk's last future.
    """
    if spec.topics > 1:
        raise SystemExit("a bulk call sends to one topic")
    producer = aioaccum_producer(spec, rec)
    method_name = bulk_method(producer)
    if method_name is None:
        raise SystemExit("this aioaccum has no bulk send method")
    send_many: Callable[..., Awaitable[Any]] = getattr(producer, method_name)
    await producer.start()
    await producer.partitions_for(spec.topic)
    data, chunk = payload(spec.size), 1000
    keys = cycle(key_pool(spec.keys)) if spec.keys else None
    futures: list[RecordFuture] = []

    def count(future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            rec.errors += 1

    rec.begin()
    try:
        async with asyncio.timeout(spec.deadline_s):
            for start in range(0, spec.records, chunk):
                n = min(chunk, spec.records - start)
                probe = rec.probe()
                began = time.perf_counter()
                try:
                    if keys is None:
                        out = await send_many(spec.topic, [data] * n)
                    else:
                        out = await send_many(spec.topic, [data] * n, keys=[*islice(keys, n)])
                except Exception as exc:
                    rec.raised_one(exc)
                    continue
                finally:
                    rec.longest_block_s = max(rec.longest_block_s, time.perf_counter() - began)
                batch = list(out) if isinstance(out, list | tuple) else [out]
                batch[-1].add_done_callback(probe)
                if spec.memory_bound:
                    for future in batch:
                        future.add_done_callback(count)
                else:
                    futures.extend(batch)
                rec.offered += n
    except TimeoutError:
        rec.timed_out = True
    if spec.memory_bound:
        exit_now(rec)
    await gather_all(futures, rec)
    await producer.flush()
    rec.end()
    await producer.close()


async def run_aiokafka(spec: Spec, rec: Recorder) -> None:
    from aiokafka import AIOKafkaProducer

    # aiokafka has no buffer-memory setting: it waits for a partition's batch to drain.
    producer = AIOKafkaProducer(
        bootstrap_servers=spec.bootstrap,
        acks=spec.acks_int if spec.acks != "all" else "all",
        compression_type=None if spec.compression == "none" else spec.compression,
        enable_idempotence=spec.idempotence,
        client_id=spec.client_id,
        **given(max_batch_size=spec.batch_size, linger_ms=spec.linger_ms),
    )
    await producer.start()
    await producer.partitions_for(spec.topic_names()[0])
    futures = await drive_async(spec, rec, producer.send)
    if spec.memory_bound:
        exit_now(rec)
    await gather_all(futures, rec)
    rec.end()
    await producer.stop()


def confluent_config(spec: Spec) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": spec.bootstrap,
        "client.id": spec.client_id,
        "acks": spec.acks,
        "compression.type": spec.compression,
        "enable.idempotence": spec.idempotence,
        **given(**{"batch.size": spec.batch_size, "linger.ms": spec.linger_ms}),
    }
    if spec.buffer_memory is not None:
        # Bytes, not librdkafka's default 100,000-message cap, are the bound for every client.
        config["queue.buffering.max.kbytes"] = spec.buffer_memory // 1024
        config["queue.buffering.max.messages"] = 10_000_000
    return config


async def run_confluent_aio(spec: Spec, rec: Recorder) -> None:
    from confluent_kafka.aio import AIOProducer

    # AIOProducer hands records to librdkafka 1,000 at a time, or after 1 s without a new one:
    # senders that each await their ack would wait out that second on every record unless
    # its batch is no larger than the number of senders.
    batch = 1000 if spec.concurrency == 1 else min(1000, spec.concurrency)
    producer = AIOProducer(confluent_config(spec), batch_size=batch)
    await producer.list_topics(spec.topic_names()[0], timeout=10)

    async def poller() -> None:
        # Delivery reports arrive only through poll(); AIOProducer polls when it hands over a
        # batch, which senders that wait for their acks never trigger.
        while True:
            await producer.poll(0.05)

    polling = asyncio.create_task(poller()) if spec.concurrency > 1 else None
    futures = await drive_async(spec, rec, producer.produce)
    if spec.memory_bound:
        exit_now(rec)
    if polling is not None:
        polling.cancel()
    await producer.flush()
    await gather_all(futures, rec)
    rec.end()
    await producer.close()


ASYNC_RUNNERS: dict[str, AsyncRunner] = {
    **{name: aioaccum_runner(wait) for name, wait in AIOACCUM_WAITS.items()},
    "aioaccum-bulk": run_aioaccum_bulk,
    "aiokafka": run_aiokafka,
    "confluent-aio": run_confluent_aio,
}


def write_result(rec: Recorder) -> None:
    import json

    with open(rec.spec.result_path, "w") as out:
        json.dump(rec.result(), out)


def exit_now(rec: Recorder) -> NoReturn:
    """Ends a memory-bound run: result out, then exit without flushing or closing.

    Draining the buffer through the throttled broker would take minutes, and a closing event
    loop would wait for the client's tasks; the broker's end offsets tell what got through.
    """
    rec.end()
    write_result(rec)
    os._exit(0)
