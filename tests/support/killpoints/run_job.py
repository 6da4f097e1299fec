"""spark-submit application for kill-point tests: the packaged stream_to_parquet job, killed at a point.

    spark-submit run_job.py <kill point> <the job's arguments...>

Needs the repository root on PYTHONPATH (for ``tests.support.killpoints``); the job itself is the
installed package's, run through its ``main``.
"""

from __future__ import annotations

import sys

from airflow_provider_jetstream.spark.jobs import stream_to_parquet
from tests.support.killpoints import install

if __name__ == "__main__":
    point, *job_arguments = sys.argv[1:]
    install(stream_to_parquet.StreamToParquetJob, point)
    stream_to_parquet.main(job_arguments)
