"""The Spark sink: a DataFrame to Kafka, from the driver or from the executors."""

from aioaccum.spark.sink import (
    ROW_JSON,
    SparkTransactionError,
    SparkWriteError,
    WriteReport,
    write_dataframe,
)

__all__ = [
    "ROW_JSON",
    "SparkTransactionError",
    "SparkWriteError",
    "WriteReport",
    "write_dataframe",
]
