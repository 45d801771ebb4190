"""The interceptor API's plain types: the record an interceptor sees, and what it implements.

Java's ``ProducerRecord`` and ``ProducerInterceptor``. They are plain types, with no behaviour
of the producer's, so they sit beneath the settings (``ProducerConfig.interceptors`` names
them) and beneath the hooks that run them (:mod:`aioaccum._runtime.hooks`). The public path is
:mod:`aioaccum.interceptors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from aioaccum._core.futures import RecordMetadata

__all__ = ["Headers", "ProducerInterceptor", "ProducerRecord"]

Headers = Sequence[tuple[str, bytes | None]]


class ProducerRecord(NamedTuple):
    """One record as ``send()`` was given it, before serialization (Java's ``ProducerRecord``).

    Immutable: an interceptor returns a changed copy (``record.replace(value=...)``).
    ``partition`` and ``timestamp_ms`` are ``None`` when the producer chooses them.
    """

    # A named tuple rather than a frozen dataclass: one is made per record sent through the
    # hooks, and a frozen dataclass takes several times longer to build.
    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: Headers | None = None

    def replace(self, **changes: Any) -> ProducerRecord:
        """A copy with ``changes`` (field name -> new value)."""
        return self._replace(**changes)


class ProducerInterceptor(Protocol):
    """What ``Producer(interceptors=[...])`` takes: Java's ``ProducerInterceptor``.

    Subclass it to inherit the do-nothing defaults, or pass any object with these methods
    (one of the two ``on_`` methods is enough at run time).
    """

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """Called for each record before it is serialized; return it, or a replacement."""
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        """Called once per record: acknowledged (``error`` is ``None``) or failed."""
        return None

    def close(self) -> None:
        """Called once when the producer closes."""
        return None
