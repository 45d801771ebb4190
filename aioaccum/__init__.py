"""aioaccum: an asyncio-native Kafka producer with Java-grade batching and memory control."""

# First: it decides between compiled and pure-Python modules before any of them is imported.
from aioaccum import _speedups  # noqa: I001

from aioaccum._core.futures import FutureRecordMetadata, RecordMetadata, ThreadRecordFuture
from aioaccum._runtime.wait import wait_all
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import (
    AioAccumError,
    ArrowColumnError,
    AuthenticationError,
    BrokerError,
    BufferExhaustedError,
    ConfigError,
    DeliveryTimeoutError,
    InvalidTxnStateError,
    ProducerClosedError,
    ProducerFencedError,
    ProducerFailedError,
    ProducerTimeoutError,
    RecordTooLargeError,
    SerializationError,
    TopicAuthorizationError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionError,
    TransactionFatalError,
)
from aioaccum.oauth import OAuthToken
from aioaccum._runtime.pool import BufferPool, PoolStats
from aioaccum.producer import Producer, ProducerState

_speedups.check_compiled_sources()

__version__ = "0.1.0"

__all__ = [
    "AioAccumError",
    "ArrowColumnError",
    "AuthenticationError",
    "BrokerError",
    "BufferExhaustedError",
    "BufferPool",
    "ConfigError",
    "DeliveryTimeoutError",
    "FutureRecordMetadata",
    "InvalidTxnStateError",
    "OAuthToken",
    "PoolStats",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerFailedError",
    "ProducerFencedError",
    "ProducerState",
    "ProducerTimeoutError",
    "RecordMetadata",
    "RecordTooLargeError",
    "SerializationError",
    "ThreadRecordFuture",
    "TopicAuthorizationError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionError",
    "TransactionFatalError",
    "__version__",
    "wait_all",
]
