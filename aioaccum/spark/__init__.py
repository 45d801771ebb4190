"""The Spark sinks: ``format("aioaccum")`` (batch and streaming, :func:`register`), and
:func:`write_dataframe`, a DataFrame to Kafka from the driver or from the executors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aioaccum.spark.sink import (
    ROW_JSON,
    SparkTransactionError,
    SparkWriteError,
    WriteReport,
    write_dataframe,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ROW_JSON",
    "SparkTransactionError",
    "SparkWriteError",
    "WriteReport",
    "register",
    "write_dataframe",
]


def register(spark: SparkSession) -> None:
    """Make ``format("aioaccum")`` known to ``spark``, for ``df.write`` and ``df.writeStream``.

    PySpark 4.3 finds data sources by itself only in top-level modules named ``pyspark_*``
    (and not through entry points), so call this once per session.
    """
    from aioaccum.spark.datasource import register as register_source

    register_source(spark)
