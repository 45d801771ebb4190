"""What the producer's log tells a person, and how often.

Theory of operation
-------------------
Faults repeat: while a broker is down every request to it fails, and while a topic is missing
every retry backoff asks for it again. Logged each time, that is ten lines a second that all say
the same thing. So each kind of trouble is told once, with numbers and what to do, and then at
most once every :data:`REPEAT_EVERY_S` seconds with how often it happened meanwhile
(:class:`Throttle`).

aiokafka, underneath, logs each occurrence itself ("Unable connect to ...", "Topic X not found
in cluster metadata"). The producer handles all of them (it retries, or raises a typed error to
the caller), so those lines are demoted to DEBUG (:func:`demote_aiokafka_noise`): they still
show for a user who turns DEBUG on for ``aiokafka``, and stay out of a log nobody configured.

Each component logs under its own module's name below ``aioaccum`` (``aioaccum._runtime.sender``,
``aioaccum.producer``, ``aioaccum._kafka.metadata`` ...).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable

__all__ = ["REPEAT_EVERY_S", "Throttle", "demote_aiokafka_noise"]

REPEAT_EVERY_S = 60.0
"""Seconds between two messages about the same ongoing trouble."""

# aiokafka's format strings for trouble the producer deals with itself.
_EXPECTED_NOISE = (
    'Unable connect to "%s:%s": %s',
    "Unable connect to node with id %s: %s",
    'Unable to request metadata from "%s:%s": %s',
    "Unable to request metadata from node with id %s: %r",
    "Unable to update metadata from %s",
    "Topic %s not found in cluster metadata",
    "Topic %s is not available during auto-create initialization",
    "Topic %s is not authorized for this client",
    "Sending username and password in the clear",
)
_NOISY_LOGGERS = ("aiokafka", "aiokafka.client", "aiokafka.cluster", "aiokafka.conn")


class Throttle:
    """Says yes to a key the first time, then at most once every ``interval`` seconds.

    Args:
        interval: Seconds between two yeses for one key.
        clock: Monotonic seconds.
        max_keys: Keys remembered; beyond it all are forgotten (a bound, not an LRU: topics
            or nodes past a thousand only mean an occasional repeat).
    """

    def __init__(
        self,
        interval: float = REPEAT_EVERY_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1024,
    ) -> None:
        self._interval = interval
        self._clock = clock
        self._max_keys = max_keys
        # key -> (when last allowed, occurrences held back since)
        self._seen: dict[Hashable, tuple[float, int]] = {}

    def allow(self, key: Hashable) -> int | None:
        """None to stay quiet; else how many occurrences were held back since the last time."""
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None:
            last, held = seen
            if now - last < self._interval:
                self._seen[key] = (last, held + 1)
                return None
            self._seen[key] = (now, 0)
            return held
        if len(self._seen) >= self._max_keys:
            self._seen.clear()
        self._seen[key] = (now, 0)
        return 0


class _DemoteExpected(logging.Filter):
    """Turns aiokafka's records of trouble the producer handles into DEBUG records."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG or record.msg not in _EXPECTED_NOISE:
            return True
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
        # The logger already let the record through at its old level; now it must pass at its
        # new one (handlers check their own levels afterwards).
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_DEMOTE = _DemoteExpected()


def demote_aiokafka_noise() -> None:
    """Install the demotion on aiokafka's loggers (once per process)."""
    for name in _NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if _DEMOTE not in logger.filters:
            logger.addFilter(_DEMOTE)


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


def redact_sasl_logs() -> None:
    """Install the filter on aiokafka's connection logger, once."""
    conn_logger = logging.getLogger("aiokafka.conn")
    if _SASL_REDACTION not in conn_logger.filters:
        conn_logger.addFilter(_SASL_REDACTION)
