"""A Spark Connect server process for the tests: the one pyspark's wheel ships (``SparkConnectServer`` started with
its ``spark-submit``, as ``start-connect-server.sh`` does), on a free loopback port.

Its environment is not the tests': no ``JETSTREAM_CONNECTION_SECRET``, so reads through it get the NATS connection
from their options, as from a remote server. Its Python workers run this interpreter and import this checkout.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_jetstream.spark.connection import CONNECTION_ENV_VAR
from airflow_provider_jetstream.testing.ports import free_port
from tests.support.waiting import wait_until

REPOSITORY = Path(__file__).resolve().parents[2]
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class SparkConnectServer:
    """``spark-submit --class SparkConnectServer --master local[2]`` on a free port; :attr:`url` is ``sc://...``.

    :param workdir: where its log and scratch files go.
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log = workdir / "spark-connect.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SparkConnectServer:
        submit = Path(sys.executable).parent / "spark-submit"
        if not submit.exists():
            submit = Path(shutil.which("spark-submit") or "spark-submit")
        # Not the tests' NATS connection, nor their Spark Connect client settings.
        unset = (CONNECTION_ENV_VAR, "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")
        env = {key: value for key, value in os.environ.items() if key not in unset}
        env.update(
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
            SPARK_LOCAL_DIRS=str(self.workdir / "local"),
        )
        command = [
            str(submit),
            "--class",
            SERVER_CLASS,
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "--conf",
            "spark.sql.session.timeZone=UTC",
            "--conf",
            "spark.python.worker.reuse=true",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.connect.grpc.binding.port={self.port}",
        ]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir, start_new_session=True
            )
        wait_until(
            lambda: (self.process.poll() if self.process else None, _listening(self.port)),
            lambda state: state[0] is not None or state[1],
            timeout=120,
            what=f"Spark Connect server listening on {self.port}",
        )
        if self.process.poll() is not None:
            raise AssertionError(f"the Spark Connect server exited: {self.log.read_text()[-3000:]}")
        return self

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def mark_spark_connect_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mark this process as one with a Spark Connect session for the test, unmarked after it.

    PySpark sets ``SPARK_CONNECT_MODE_ENABLED`` when it opens a Spark Connect session and never removes it; left
    behind, it would make a later test's local SparkSession (in this process) a Spark Connect one without a URL.
    """
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
