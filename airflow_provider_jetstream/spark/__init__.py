"""PySpark I/O for JetStream: the ``jetstream`` data source (batch read, streaming read, write).

>>> from airflow_provider_jetstream.spark import JetStreamDataSource
>>> spark.dataSource.register(JetStreamDataSource)

Airflow-free: Spark drivers and executors import this package, nats-py and pyarrow only.
"""

from airflow_provider_jetstream.spark.source import JetStreamDataSource, register

__all__ = ["JetStreamDataSource", "register"]
