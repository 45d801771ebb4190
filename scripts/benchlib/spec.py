"""Workloads, and the one settings record that every contender's process receives.

Every contender of a workload gets the same acks, batch size, linger, compression, buffer memory
and idempotence (each mapped to that client's own names in ``clients`` and ``contenders``).
Workloads with ``acks=1`` turn idempotence off for all clients; the ``acks=all`` workload turns
it on for all of them: every client's own default differs (Java and aioaccum on, librdkafka and
aiokafka off), and a mixed field would compare different guarantees.
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


@dataclass(frozen=True, slots=True)
class Workload:
    """One named benchmark: what is sent, with which settings, by how many senders."""

    name: str
    records: int
    size: int
    batch_size: int = 16 * KIB
    linger_ms: int = 5
    compression: str = "none"
    acks: str = "1"
    # Senders at once: 1 is one loop keeping every future; N > 1 is N coroutines (threads for
    # synchronous clients), each waiting for its record's acknowledgement before the next.
    concurrency: int = 1
    # Offer records to a throttled broker for a bounded time and watch memory and blocking.
    memory_bound: bool = False
    note: str = ""

    @property
    def idempotence(self) -> bool:
        return self.acks == "all"

    def describe(self) -> str:
        parts = [
            f"{self.records:,} x {human_bytes(self.size)}",
            f"batch {human_bytes(self.batch_size)}",
        ]
        parts.append(f"linger {self.linger_ms} ms")
        parts.append(f"acks={self.acks}" + (" + idempotence" if self.idempotence else ""))
        if self.compression != "none":
            parts.append(self.compression)
        if self.concurrency > 1:
            parts.append(f"{self.concurrency:,} concurrent senders")
        if self.memory_bound:
            parts.append("broker throttled")
        return ", ".join(parts)


def human_bytes(n: int) -> str:
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} B"


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("100b-16k", 1_000_000, 100),
        Workload("100b-128k", 1_000_000, 100, batch_size=128 * KIB),
        Workload("1k-16k", 200_000, 1000),
        Workload("1k-128k", 200_000, 1000, batch_size=128 * KIB),
        Workload("4k-16k", 50_000, 4000),
        Workload("4k-128k", 50_000, 4000, batch_size=128 * KIB),
        Workload("100b-128k-lz4", 1_000_000, 100, batch_size=128 * KIB, compression="lz4"),
        Workload("1k-16k-acks-all", 200_000, 1000, acks="all"),
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
    )
}

# The default (no --workload) fits about 25 minutes with 3 repetitions of every contender on
# this project's 2-core machine: one run of 100b-16k by the seven clients takes about 4 minutes
# there (the slowest clients need a minute each), and the memory-bound run takes 7 x 30 s once.
# aioaccum's two further ways of waiting (gather, wait_all) run the one-sender workloads only,
# each about as long as `aioaccum`: a few minutes more. `--all` runs every workload, about an
# hour there.
DEFAULT_WORKLOADS = ("100b-16k", "1k-16k", "contention", "memory-bound")


@dataclass(frozen=True, slots=True)
class Spec:
    """What one child process runs: a contender, a workload's settings, a topic, limits."""

    contender: str
    bootstrap: str
    topic: str
    records: int
    size: int
    batch_size: int
    linger_ms: int
    compression: str
    acks: str
    idempotence: bool
    buffer_memory: int
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
    def sample_every(self) -> int:
        """Every how many records a send-to-ack latency is taken: about 20,000 per run."""
        return max(1, self.records // 20_000)


def payload(size: int) -> bytes:
    """Random capital letters, like Java's ProducerPerformance, so codecs see the same data."""
    import random

    rng = random.Random(size)
    return bytes(rng.randrange(65, 91) for _ in range(size))
