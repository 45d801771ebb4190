"""Settings: one table of rows per group, and everything derived from the rows.

* :mod:`~aioaccum.config.table`: the row type (:class:`Setting`) and what a table derives
  from its rows (lookups, name checks, "did you mean" suggestions); its kinds (type and
  validator in one) are in :mod:`~aioaccum.config.kinds`.
* :mod:`~aioaccum.config.settings`: the producer's rows; :mod:`~aioaccum.config.producer_config`
  builds :class:`ProducerConfig` and the rules between settings on them.
* :mod:`~aioaccum.config.serve_settings`: the HTTP service's rows and ``ServeSettings``.
* :mod:`~aioaccum.config.aiokafka_config`: aiokafka's producer arguments as rows, and their
  translation for the drop-in.
* :mod:`~aioaccum.config.properties`: the one ``.properties`` reader.
"""

from aioaccum.config.producer_config import (
    JAVA_TO_PYTHON,
    PYTHON_TO_JAVA,
    SETTINGS,
    Partitioner,
    ProducerConfig,
    Serializer,
)
from aioaccum.config.table import NoJavaName, Setting

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
