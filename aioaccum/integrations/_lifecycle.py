"""Start and stop a producer alongside an application: shared by the web integrations.

The shutdown path is the part worth sharing: flush what is buffered within a bound, then close,
and say in the log how many records did not make it, so an operator reading a deploy's logs knows
whether a restart lost data.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aioaccum._kafka.adapter import KafkaAdapter
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import ConfigError, ProducerClosedError
from aioaccum.producer import Producer

__all__ = ["DEFAULT_CLOSE_TIMEOUT_S", "resolve_config", "shutdown_producer", "start_producer"]

log = logging.getLogger("aioaccum.integrations")

# Kubernetes sends SIGKILL 30 s after SIGTERM by default; leave the server room to exit first.
DEFAULT_CLOSE_TIMEOUT_S = 25.0


def resolve_config(
    bootstrap_servers: str | Sequence[str] | None, settings: dict[str, Any]
) -> tuple[ProducerConfig, KafkaAdapter | None]:
    """Validate a helper's producer arguments up front: when the app is defined, not started.

    Returns:
        The config, and the ``kafka=`` adapter override if one was given (tests pass one).

    Raises:
        ConfigError: A setting is invalid, or ``config=`` came with other settings.
    """
    settings = dict(settings)
    kafka: KafkaAdapter | None = settings.pop("kafka", None)
    config: ProducerConfig | None = settings.pop("config", None)
    if config is None:
        if bootstrap_servers is not None:
            settings["bootstrap_servers"] = bootstrap_servers
        return ProducerConfig.from_kwargs(**settings), kafka
    if settings or bootstrap_servers is not None:
        raise ConfigError("pass either config= or bootstrap_servers and settings, not both")
    return config, kafka


async def start_producer(config: ProducerConfig, kafka: KafkaAdapter | None) -> Producer:
    """A started producer; one that failed to start is closed before the error goes up, so
    no connection outlives the failed start-up."""
    producer = Producer(config=config, kafka=kafka)
    try:
        await producer.start()
    except BaseException:
        await producer.close(0)
        raise
    return producer


async def shutdown_producer(producer: Producer, close_timeout: float) -> int:
    """Flush, then close, within ``close_timeout`` seconds in all.

    Args:
        producer: A started producer (a producer that never started is only closed).
        close_timeout: Seconds for flushing and closing together.

    Returns:
        How many records were still unacknowledged when the time ran out (they fail with
        :class:`~aioaccum.errors.ProducerClosedError`); 0 when everything was delivered.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + close_timeout
    dropped = 0
    try:
        await producer.flush(close_timeout)
    except TimeoutError:
        dropped = producer.pending_records()
    except ProducerClosedError:
        # Never started, already closed, or the sender died (it logged why).
        dropped = producer.pending_records()
    finally:
        await producer.close(max(deadline - loop.time(), 0.0))
    if dropped:
        log.warning(
            "closing the Kafka producer: %d record(s) were not acknowledged within "
            "close_timeout=%.1fs and were failed with ProducerClosedError (some may still have "
            "reached the broker); raise close_timeout or check the brokers",
            dropped,
            close_timeout,
        )
    return dropped
