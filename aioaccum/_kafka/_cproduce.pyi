"""Types of the compiled produce framing (``_cproduce.pyx``): the API of the pure-Python one in
:mod:`aioaccum._kafka.produce`, exactly."""

from collections.abc import Mapping, Sequence

from aioaccum._core.cluster import TopicPartition
from aioaccum._kafka.answers import ProduceAnswers

__all__ = ["read_answers", "request_parts"]

def request_parts(
    version: int,
    correlation_id: int,
    client_id: bytes,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    by_topic: Mapping[str, Sequence[tuple[int, Sequence[memoryview]]]],
) -> list[bytes | memoryview]: ...
def read_answers(
    version: int, body: bytes, batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]]
) -> ProduceAnswers: ...
