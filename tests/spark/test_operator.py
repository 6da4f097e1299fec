"""JetStreamSparkSubmitOperator through dag.test(): spark-submit runs the packaged job end to end,
and the NATS password is in no command line and no log line."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitHook, JetStreamSparkSubmitOperator
from tests.support.reconcile_dags import xcom
from tests.support.spark import secret_stream


def _watch_command_lines(stop: threading.Event, seen: list[str]) -> None:
    """Collect the command line of every process on the machine while the task runs."""
    while not stop.wait(0.05):
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                with contextlib.suppress(OSError):
                    seen.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))


def test_dag_runs_the_packaged_job_via_spark_submit_without_leaking_the_password(
    airflow_db, secret_server, jetstream_conn, tmp_path, caplog, capfd, monkeypatch
) -> None:
    from tests.dags.spark_stream_to_parquet import dag

    server, password = secret_server
    stream = f"spark_op_{uuid.uuid4().hex[:6]}"
    # spark-submit runs the job in a new interpreter: it imports this checkout's package, whatever is installed.
    repository = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [repository, os.environ.get("PYTHONPATH")])))

    secret_stream(server.url, password, stream, 60)
    conn_id = jetstream_conn(f"127.0.0.1:{server.port}", login="spark", password=password)
    output = tmp_path / "parquet"

    def run_watched() -> tuple[Any, list[str]]:
        """One run of the DAG, and the command line of every process seen while it ran."""
        stop, seen = threading.Event(), []
        watcher = threading.Thread(target=_watch_command_lines, args=(stop, seen), daemon=True)
        watcher.start()
        try:
            run = dag.test(
                run_conf={"conn_id": conn_id, "stream": stream, "output": str(output), "bucket": "spark_op_ckpt"}
            )
        finally:
            stop.set()
            watcher.join()
        return run, seen

    dag_run, seen = run_watched()
    logs = caplog.text + "\n".join(capfd.readouterr())
    assert dag_run.state == "success", logs[-4000:]

    import pyarrow.parquet as pq

    table = pq.read_table(output / "seq_range=00000000000000000001-00000000000000000060")
    assert sorted(table.column("seq").to_pylist()) == list(range(1, 61))

    spark_commands = [c for c in seen if "spark-submit" in c or "SparkSubmit" in c]
    assert spark_commands, "the watcher saw the spark-submit processes"
    assert any("stream_to_parquet.py" in c and f"--stream={stream}" in c for c in spark_commands)
    assert not [c for c in seen if password in c], "the password is on a command line"
    assert "Spark-Submit cmd" in logs, "the logged spark-submit command was captured"
    assert password not in logs
    # The job's result is the task's XCom: what it read, wrote and where the checkpoint is now.
    result = xcom(dag_run, "copy_to_parquet")
    assert {k: result[k] for k in ("outcome", "start", "end", "rows", "checkpoint", "skipped")} == {
        "outcome": "written",
        "start": 1,
        "end": 60,
        "rows": 60,
        "checkpoint": 60,
        "skipped": False,
    }
    assert result["directory"].endswith("seq_range=00000000000000000001-00000000000000000060")

    # Nothing new: the next run reads the checkpoint and the stream, and starts no Spark application.
    again, seen = run_watched()
    assert again.state == "success"
    skipped = xcom(again, "copy_to_parquet")
    assert (skipped["skipped"], skipped["checkpoint"], skipped["stream_last_seq"], skipped["rows"]) == (True, 60, 60, 0)
    # (Other processes on the machine may run Spark: only this job's command line counts.)
    assert not [c for c in seen if "stream_to_parquet.py" in c and f"--stream={stream}" in c]


def test_a_named_spark_connection_that_does_not_exist_fails_instead_of_using_yarn() -> None:
    with pytest.raises(JetStreamConfigError, match="Spark connection 'spark_missing' could not be loaded"):
        JetStreamSparkSubmitHook(secret_env={}, conn_id="spark_missing")
    local = JetStreamSparkSubmitHook(secret_env={}, conn_id=None)
    assert local._connection["master"] == "local[*]"


def test_packaged_job_arguments_are_required_and_checked() -> None:
    with pytest.raises(JetStreamConfigError, match="output_path, checkpoint_bucket missing"):
        JetStreamSparkSubmitOperator(task_id="t", stream="s")
    with pytest.raises(JetStreamConfigError, match="domain='a' and api_prefix='b'"):
        JetStreamSparkSubmitOperator(
            task_id="t", stream="s", output_path="o", checkpoint_bucket="b", domain="a", api_prefix="b"
        )


def test_cluster_deploy_mode_is_refused_however_it_is_asked_for() -> None:
    for arguments in ({"deploy_mode": "cluster"}, {"conf": {"spark.submit.deployMode": "cluster"}}):
        op = JetStreamSparkSubmitOperator(task_id="t", application="/jobs/mine.py", **arguments)
        with pytest.raises(JetStreamConfigError, match="deploy_mode 'cluster' is not supported"):
            op._get_hook()


def test_the_hook_hands_secret_and_user_variables_to_spark_submit_only_and_keeps_the_error_line(tmp_path) -> None:
    """A stand-in spark-submit (a shell script) shows the environment it got and fails as a job does."""
    fake = tmp_path / "spark-submit"
    fake.write_text(
        "#!/bin/sh\n"
        'echo "command line: $*"\n'
        'echo "got $JETSTREAM_CONNECTION_SECRET and $USER_VAR"\n'
        'echo "2026-01-01 00:00:00,000 ERROR stream_to_parquet: the job says why"\n'
        'echo "INFO ShutdownHookManager: Shutdown hook called"\n'
        "exit 1\n"
    )
    fake.chmod(0o755)
    hook = JetStreamSparkSubmitHook(
        secret_env={"JETSTREAM_CONNECTION_SECRET": "s3cr3t-value"},
        conn_id=None,
        spark_binary=str(fake),
        env_vars={"USER_VAR": "mine"},
    )
    with pytest.raises(Exception, match="Error code is: 1") as info:
        hook.submit("/jobs/mine.py")
    output = str(info.value).splitlines()
    assert output[0] == "the Spark job failed: 2026-01-01 00:00:00,000 ERROR stream_to_parquet: the job says why"
    assert "got s3cr3t-value and mine" in output, "both variables reached the spark-submit process"
    (command_line,) = [line for line in output if line.startswith("command line: ")]
    assert "--master local[*]" in command_line and command_line.endswith(" /jobs/mine.py")
    assert "s3cr3t-value" not in command_line and "USER_VAR" not in command_line
