"""PySpark I/O for JetStream: the ``jetstream`` data source (batch read, streaming read, write).

>>> from airflow_provider_jetstream.spark import JetStreamDataSource
>>> spark.dataSource.register(JetStreamDataSource)

Airflow-free: Spark drivers and executors import this package, nats-py, pyspark, pyarrow and numpy
only. Without the ``spark`` extra, importing it raises ``ImportError`` saying what to install.
"""

from airflow_provider_jetstream.core.errors import require_extra

require_extra(("pyspark", "pyarrow", "numpy"), "the jetstream Spark data source")

from airflow_provider_jetstream.spark.source import JetStreamDataSource, register  # noqa: E402 (after the check)

__all__ = ["JetStreamDataSource", "register"]
