"""aioaccum: an asyncio-native Kafka producer with Java-grade batching and memory control."""

from aioaccum.errors import (
    AioAccumError,
    BrokerError,
    BufferExhaustedError,
    ConfigError,
    DeliveryTimeoutError,
    ProducerClosedError,
    ProducerTimeoutError,
    RecordTooLargeError,
    SerializationError,
)

__version__ = "0.1.0"

__all__ = [
    "AioAccumError",
    "BrokerError",
    "BufferExhaustedError",
    "ConfigError",
    "DeliveryTimeoutError",
    "ProducerClosedError",
    "ProducerTimeoutError",
    "RecordTooLargeError",
    "SerializationError",
    "__version__",
]
