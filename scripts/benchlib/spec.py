"""Workloads, and the one settings record that every contender's process receives.

Every contender of a workload gets the same acks, batch size, linger, compression, buffer memory
and idempotence (each mapped to that client's own names in ``clients`` and ``contenders``).
Workloads with ``acks=1`` turn idempotence off for all clients; the ``acks=all`` workloads turn
it on for all of them: every client's own default differs (Java and aioaccum on, librdkafka and
aiokafka off), and a mixed field would compare different guarantees. The one exception is the
``defaults`` workload, which sets only acks and idempotence and leaves batch size, linger and
buffer memory at each client's own default (None here): what a user who sets nothing meets.

The partition-scaling workloads spread records the same way for every contender: record ``i``
goes to topic ``i % topics`` of the run (``topic_names``) and, when keyed, carries key
``i % keys`` of ``key_pool``. Each client then picks the partition with its own default
partitioner for keyed records (murmur2 for Java, aioaccum, aiokafka and kafka-python, CRC32 for
librdkafka); over distinct keys both spread evenly.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

KIB = 1024
MIB = 1024 * 1024
BUFFER_MEMORY = 32 * MIB
# The client id the memory-bound run's quota is set for, so the throttle touches nothing else.
THROTTLED_CLIENT_ID = "aioaccum-bench-throttled"
DEFAULT_PARTITIONS = 6
# Distinct keys per partition in a keyed workload. Keys land on partitions like balls thrown
# into bins: with k keys per partition about n * e^-k of n partitions get none, so 4 keys per
# partition leave about 110 of 6,000 empty; with 16, the keys of ``key_pool`` reach every one
# of 6, 600 and 6,000 partitions under murmur2 and CRC32 alike.
KEYS_PER_PARTITION = 16


@dataclass(frozen=True, slots=True)
class Workload:
    """One named benchmark: what is sent, with which settings, by how many senders."""

    name: str
    records: int
    size: int
    # None leaves the setting at each client's own default (the ``defaults`` workload).
    batch_size: int | None = 16 * KIB
    linger_ms: int | None = 5
    buffer_memory: int | None = BUFFER_MEMORY
    compression: str = "none"
    acks: str = "1"
    # Replicas of each partition; more than 1 needs that many brokers (``--brokers 3``).
    replication: int = 1
    # Senders at once: 1 is one loop keeping every future; N > 1 is N coroutines (threads for
    # synchronous clients), each waiting for its record's acknowledgement before the next.
    concurrency: int = 1
    # Offer records to a throttled broker for a bounded time and watch memory and blocking.
    memory_bound: bool = False
    # Where records go: ``topics`` topics of ``partitions`` partitions each, in turn, and with
    # ``keyed`` a key per record from a pool of KEYS_PER_PARTITION x ``partitions`` keys.
    partitions: int = DEFAULT_PARTITIONS
    topics: int = 1
    keyed: bool = False
    # The workload's runs share topics created once for it, each run's count being the rise of
    # the end offsets, instead of a fresh topic per run: creating thousands of partitions keeps
    # the brokers busy for seconds, and deleting them makes the brokers remove the logs a minute
    # later, inside some other contender's timed run.
    shared_topics: bool = False
    note: str = ""

    def __post_init__(self) -> None:
        if self.spread and (self.concurrency > 1 or self.memory_bound):
            raise ValueError(f"{self.name}: keys and many topics take one sender, not throttled")

    @property
    def idempotence(self) -> bool:
        return self.acks == "all"

    @property
    def spread(self) -> bool:
        """Whether records carry keys or go to more than one topic."""
        return self.keyed or self.topics > 1

    @property
    def keys(self) -> int:
        """How many distinct keys the records cycle through (0: no keys)."""
        return KEYS_PER_PARTITION * self.partitions if self.keyed else 0

    @property
    def own_defaults(self) -> bool:
        """Whether batch size, linger and buffer memory are left to each client's default."""
        return self.batch_size is None and self.linger_ms is None and self.buffer_memory is None

    def describe(self) -> str:
        parts = [f"{self.records:,} x {human_bytes(self.size)}"]
        if self.own_defaults:
            parts.append("batch size, linger and buffer memory at each client's own default")
        else:
            own = "each client's default"
            batch, linger = self.batch_size, self.linger_ms
            parts.append("batch " + (own if batch is None else human_bytes(batch)))
            parts.append("linger " + (own if linger is None else f"{linger} ms"))
        parts.append(f"acks={self.acks}" + (" + idempotence" if self.idempotence else ""))
        if self.replication > 1:
            parts.append(f"replication factor {self.replication}")
        if self.compression != "none":
            parts.append(self.compression)
        if self.concurrency > 1:
            parts.append(f"{self.concurrency:,} concurrent senders")
        if self.memory_bound:
            parts.append("broker throttled")
        if self.topics > 1:
            parts.append(
                f"{self.topics:,} topics of {plural(self.partitions, 'partition')}, round robin"
            )
        elif self.keyed:
            parts.append(f"{self.keys:,} keys over {plural(self.partitions, 'partition')}")
        elif self.partitions != DEFAULT_PARTITIONS:
            parts.append(plural(self.partitions, "partition"))
        return ", ".join(parts)


def plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def human_bytes(n: int) -> str:
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} B"


# Records per run of the 1 KB and 4 KB workloads: 600 MB and 800 MB of values, a run of several
# seconds for the fastest client. At 200,000 x 1 KB and 50,000 x 4 KB the fastest runs lasted
# 0.3 to 2 s, where opening connections and the brokers' first appends to a fresh topic weigh
# as much as the steady flow: one run had aioaccum at 0.83x confluent on 4k-1m-lz4 and the next
# at 1.15x, while 250,000 records gave 1.06x and 1.07x twice over.
RECORDS_1K = 600_000
RECORDS_4K = 200_000

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("100b-16k", 1_000_000, 100),
        Workload("100b-128k", 1_000_000, 100, batch_size=128 * KIB),
        Workload("1k-16k", RECORDS_1K, 1000),
        Workload("1k-128k", RECORDS_1K, 1000, batch_size=128 * KIB),
        Workload("4k-16k", RECORDS_4K, 4000),
        Workload("4k-128k", RECORDS_4K, 4000, batch_size=128 * KIB),
        Workload("100b-128k-lz4", 1_000_000, 100, batch_size=128 * KIB, compression="lz4"),
        # Larger records at batch sizes from 16 KiB to 1 MiB, plain and lz4: MB/s is the figure.
        Workload("1k-1m", RECORDS_1K, 1000, batch_size=MIB),
        Workload("4k-1m", RECORDS_4K, 4000, batch_size=MIB),
        *(
            Workload(f"{size}-{batch}-lz4", records, n, batch_size=b, compression="lz4")
            for size, n, records in (("1k", 1000, RECORDS_1K), ("4k", 4000, RECORDS_4K))
            for batch, b in (("16k", 16 * KIB), ("128k", 128 * KIB), ("1m", MIB))
        ),
        Workload("1k-16k-acks-all", 200_000, 1000, acks="all"),
        # The journal's price at 100 B: its contenders need acks=all and idempotence, so this
        # is the workload where plain aioaccum runs with the same guarantees.
        Workload("100b-16k-acks-all", 1_000_000, 100, acks="all"),
        # What a user who sets nothing meets, with the strongest guarantees: acks=all,
        # idempotence, 3 replicas; every other setting each client's own default (librdkafka
        # batches up to 1 MB, Java and aioaccum 16 KiB). Then the same at equal batch sizes.
        Workload(
            "defaults",
            500_000,
            100,
            batch_size=None,
            linger_ms=None,
            buffer_memory=None,
            acks="all",
            replication=3,
            note="each client as it comes: only acks and idempotence are set, the same for all",
        ),
        *(
            Workload(f"defaults-{batch}", 500_000, 100, batch_size=b, acks="all", replication=3)
            for batch, b in (("16k", 16 * KIB), ("128k", 128 * KIB), ("1m", MIB))
        ),
        Workload(
            "contention",
            100_000,
            100,
            concurrency=1000,
            note="each sender awaits its record's ack before sending the next",
        ),
        Workload(
            "memory-bound",
            2_000_000,
            1000,
            memory_bound=True,
            note="records offered to a broker throttled by a client quota, for a bounded time",
        ),
        # Partition scaling: the same records spread over ever more partitions, so batches get
        # smaller and requests carry more of them. Their topics are shared by all their runs.
        Workload("keyed-6p", 500_000, 100, partitions=6, keyed=True, shared_topics=True),
        Workload("keyed-600p", 500_000, 100, partitions=600, keyed=True, shared_topics=True),
        Workload(
            "keyed-6000p",
            200_000,
            100,
            partitions=6000,
            keyed=True,
            shared_topics=True,
            note="200,000 records, not 500,000: in a trial on the project's busy 2-core machine "
            "the clients sent 700 to 1,600 records/s here, so 500,000 would take 5 to 12 "
            "minutes a run, past the 10-minute run limit for the slowest",
        ),
        Workload(
            "topics-1000",
            500_000,
            100,
            partitions=1,
            topics=1000,
            shared_topics=True,
            note="each client meets 999 of the topics inside the timed run: only one is "
            "warmed up before the clock starts, as in every workload",
        ),
    )
}

# The default (no --workload) fits about 25 minutes with 3 repetitions of every contender on
# this project's 2-core machine: one run of 100b-16k by the seven clients takes about 4 minutes
# there (the slowest clients need a minute each), and the memory-bound run takes 7 x 30 s once.
# aioaccum's two further ways of waiting (gather, wait_all) run the one-sender workloads only,
# each about as long as `aioaccum`: a few minutes more, and `aioaccum-sync` as much again.
# `--all` runs every workload: well over an hour there without the partition-scaling ones, which
# add hours (a run of keyed-6000p or topics-1000 takes one to several minutes per client); the
# `defaults*` ones need 3 brokers and are left out, saying so, on fewer.
DEFAULT_WORKLOADS = ("100b-16k", "1k-16k", "contention", "memory-bound")
# The partition-scaling ones (keyed-*, topics-1000) run when named, or with --all.


@dataclass(frozen=True, slots=True)
class Spec:
    """What one child process runs: a contender, a workload's settings, a topic, limits."""

    contender: str
    bootstrap: str
    # The run's one topic, or the stem of its topics (``topic_names``).
    topic: str
    topics: int
    # Distinct keys in ``key_pool`` order, cycled over the records; 0 sends no keys.
    keys: int
    records: int
    size: int
    # None: the client's own default.
    batch_size: int | None
    linger_ms: int | None
    compression: str
    acks: str
    idempotence: bool
    buffer_memory: int | None
    concurrency: int
    memory_bound: bool
    deadline_s: float
    client_id: str
    result_path: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Spec:
        data: dict[str, Any] = json.loads(text)
        return cls(**data)

    @property
    def acks_int(self) -> int:
        return -1 if self.acks == "all" else int(self.acks)

    @property
    def spread(self) -> bool:
        return self.keys > 0 or self.topics > 1

    def topic_names(self) -> list[str]:
        return topic_names(self.topic, self.topics)

    @property
    def sample_every(self) -> int:
        """Every how many records a send-to-ack latency is taken: about 20,000 per run."""
        return max(1, self.records // 20_000)


def topic_names(stem: str, count: int) -> list[str]:
    """A run's topics: ``stem`` itself when there is one, else ``stem-0`` .. ``stem-{count-1}``,
    in the order records go to them."""
    return [stem] if count == 1 else [f"{stem}-{i}" for i in range(count)]


def key_pool(count: int) -> list[bytes]:
    """``count`` distinct keys, in the order records carry them."""
    return [b"k%d" % i for i in range(count)]


def spread_problem(
    w: Workload, topics: list[str], counts: dict[tuple[str, int], int]
) -> str | None:
    """What is wrong with where a run's records landed, if anything: with many topics, each
    holds its exact round-robin share; keyed, once every key was sent, no partition is empty."""
    if w.topics > 1:
        per_topic = dict.fromkeys(topics, 0)
        for (topic, _), n in counts.items():
            per_topic[topic] += n
        share, extra = divmod(w.records, w.topics)
        wrong = [
            (topic, got, want)
            for i, (topic, got) in enumerate(per_topic.items())
            if got != (want := share + (1 if i < extra else 0))
        ]
        if wrong:
            topic, got, want = wrong[0]
            return (
                f"{len(wrong):,} of {len(topics):,} topics hold other than their share "
                f"(first: {topic} holds {got:,} of {want:,})"
            )
    if w.keyed and w.records >= w.keys:
        empty = sum(1 for n in counts.values() if n == 0)
        if empty:
            return f"{empty:,} of {len(counts):,} partitions got no records"
    return None


def payload(size: int) -> bytes:
    """Random capital letters, like Java's ProducerPerformance, so codecs see the same data."""
    import random

    rng = random.Random(size)
    return bytes(rng.randrange(65, 91) for _ in range(size))
