"""Settings: one table of rows, and everything derived from it.

``ProducerConfig``, ``.properties`` files, the aiokafka drop-in's and the HTTP service's settings.
"""

from aioaccum.config.producer_config import (
    JAVA_TO_PYTHON,
    PYTHON_TO_JAVA,
    SETTINGS,
    NoJavaName,
    Partitioner,
    ProducerConfig,
    Serializer,
    Setting,
)

__all__ = [
    "JAVA_TO_PYTHON",
    "PYTHON_TO_JAVA",
    "SETTINGS",
    "NoJavaName",
    "Partitioner",
    "ProducerConfig",
    "Serializer",
    "Setting",
]
