"""PySpark I/O for JetStream: the ``jetstream`` data source (batch read, streaming read, write).

>>> from airflow_provider_jetstream.spark import JetStreamDataSource
>>> spark.dataSource.register(JetStreamDataSource)

Airflow-free: Spark drivers and executors import this package, nats-py, pyspark, pyarrow and numpy
only. Without the ``spark`` extra, importing it raises ``ImportError`` saying what to install.
"""

try:
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as err:  # the optional [spark] extra
    raise ImportError(
        f"the jetstream Spark data source needs pyspark, pyarrow and numpy ({err}): "
        "install 'airflow-provider-jetstream[spark]'",
        name=err.name,
    ) from err

from airflow_provider_jetstream.spark.source import JetStreamDataSource, register

__all__ = ["JetStreamDataSource", "register"]
