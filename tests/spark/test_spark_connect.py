"""The ``jetstream`` source over Spark Connect: batch and streaming reads, the writer and the packaged job, through
a real Spark Connect server process whose environment holds no NATS connection (the reads carry it in options)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.operators.spark_connect import run_stream_to_parquet
from airflow_provider_jetstream.testing.servers import USERS
from tests.support.spark import available_now, publish_many, secret_stream, stored_messages
from tests.support.spark_connect import REPOSITORY
from tests.support.waiting import scaled


def test_a_batch_read_over_spark_connect_reads_every_message_once(connect_spark, make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 500)
    df = connect_spark.read.format("jetstream").options(**stream.options(minPartitions="3")).load()
    rows = df.select("seq", "subject", "domain").collect()
    assert sorted(r.seq for r in rows) == list(range(1, 501))
    assert {r.subject for r in rows} == {f"{stream.prefix}.a", f"{stream.prefix}.b"}
    assert {r.domain for r in rows} == {"leaf"}
    # The server plans the read: without the connection in the options it has none (its environment holds none).
    options = stream.options()
    del options["servers"]
    with pytest.raises(Exception, match="jetstream option servers is missing"):
        connect_spark.read.format("jetstream").options(**options).load().count()


def test_a_streaming_read_over_spark_connect_restarts_from_its_checkpoint(connect_spark, make_stream, tmp_path) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 120)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def progress_of_a_run() -> list:
        query = available_now(connect_spark, stream.options(maxMessagesPerTrigger="50"), output, checkpoint)
        # Over Spark Connect a progress is read by attribute (``progress["numInputRows"]`` is None).
        return [p for p in query.recentProgress if p.numInputRows]

    progress = progress_of_a_run()
    assert [json.loads(p.sources[0].endOffset)["seq"] for p in progress] == [50, 100, 120]
    publish_many(stream, 30)
    progress_of_a_run()
    seqs = sorted(r.seq for r in connect_spark.read.parquet(str(output)).collect())
    assert seqs == list(range(1, 151)), "restarted from its checkpoint: every message exactly once"


def test_the_writer_over_spark_connect_stores_each_row(connect_spark, make_stream) -> None:
    stream = make_stream("leaf")
    rows = [(f"{stream.prefix}.w{i % 2}", f"payload-{i}", f"id-{i}") for i in range(40)]
    df = connect_spark.createDataFrame(rows, "subject string, data string, id string")
    df.repartition(2).write.format("jetstream").options(**stream.write_options(msgIdColumn="id")).mode("append").save()
    stored = stored_messages(stream)
    assert sorted(d for _, d, _ in stored) == sorted(f"payload-{i}".encode() for i in range(40))
    assert {h["Nats-Msg-Id"] for _, _, h in stored} == {f"id-{i}" for i in range(40)}


def test_the_packaged_job_over_spark_connect_copies_each_message_once(
    connect_spark, make_stream, jetstream_conn, hub_leaf, tmp_path
) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 60)
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password)
    output = tmp_path / "parquet"
    arguments = {
        "jetstream_conn_id": conn_id,
        "stream": stream.name,
        "domain": "leaf",
        "output_path": str(output),
        "checkpoint_bucket": "spark_connect_ckpt",
        "options": {"partition_by": ["subject"], "checkpoint_key": stream.name},
    }
    first = run_stream_to_parquet(connect_spark, **arguments)
    assert {k: first[k] for k in ("outcome", "start", "end", "rows", "checkpoint")} == {
        "outcome": "written",
        "start": 1,
        "end": 60,
        "rows": 60,
        "checkpoint": 60,
    }
    publish_many(stream, 15)
    second = run_stream_to_parquet(connect_spark, **arguments)
    assert (second["outcome"], second["start"], second["end"], second["rows"]) == ("written", 61, 75, 15)
    third = run_stream_to_parquet(connect_spark, **arguments)
    assert (third["outcome"], third["checkpoint"]) == ("nothing new", 75)
    seqs = sorted(r.seq for r in connect_spark.read.parquet(str(output)).collect())
    assert seqs == list(range(1, 76))
    assert sorted(p.name for p in output.iterdir() if p.name.startswith("seq_range=")) == [
        "seq_range=00000000000000000001-00000000000000000060",
        "seq_range=00000000000000000061-00000000000000000075",
    ]


def test_the_packaged_job_over_spark_connect_refuses_what_it_cannot_commit_before_anything_changes(
    connect_spark, make_stream, jetstream_conn, hub_leaf
) -> None:
    stream = make_stream("leaf")
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password)
    given = {"jetstream_conn_id": conn_id, "stream": stream.name, "domain": "leaf", "checkpoint_bucket": "spark_cc"}
    with pytest.raises(JetStreamConfigError, match=r"output_path='hdfs://nn:8020/orders' is not allowed over Spark"):
        run_stream_to_parquet(connect_spark, output_path="hdfs://nn:8020/orders", **given)
    with pytest.raises(JetStreamConfigError, match="partition_by"):
        run_stream_to_parquet(connect_spark, output_path="/tmp/x", options={"partition_by": ["nope"]}, **given)
    # Refused before the checkpoint bucket was created.
    reply = _bucket_info(hub_leaf, "spark_cc")
    assert reply.get("error", {}).get("code") == 404, reply


def _server_sessions(server) -> set[str]:
    """The ids of the sessions the Spark Connect server has logged so far."""
    return set(re.findall(r"sessionId: ([0-9a-f-]{36})", server.log.read_text()))


def _bucket_info(hub_leaf, bucket: str) -> dict:
    from tests.support.spark import hub_client, run

    async def go() -> dict:
        nc = await hub_client(hub_leaf)
        try:
            msg = await nc.request(f"$JS.hub.API.STREAM.INFO.KV_{bucket}", b"", timeout=5)
            return json.loads(msg.data)
        finally:
            await nc.close()

    return run(go())


#: One run of the test DAG in a process of its own, as Airflow runs a task: a process that has a local
#: SparkContext (another test's, on this test worker) cannot open a Spark Connect session with ``getOrCreate``.
RUN_DAG = """
import json, sys
from tests.dags.spark_connect_stream_to_parquet import dag
run = dag.test(run_conf=json.loads(sys.argv[1]))
xcom = run.get_task_instance("copy_to_parquet").xcom_pull(task_ids="copy_to_parquet")
print("dag run: " + json.dumps({"state": run.state, "xcom": xcom}))
"""


def test_a_dag_runs_the_packaged_job_through_a_spark_connect_connection_without_leaking_the_password(
    airflow_db, spark_connect_server, secret_server, jetstream_conn, monkeypatch, tmp_path
) -> None:
    from tests.dags.spark_connect_stream_to_parquet import SPARK_CONNECT_CONN_ID

    server, password = secret_server
    stream = f"spark_cc_{uuid.uuid4().hex[:6]}"

    secret_stream(server.url, password, stream, 40)
    conn_id = jetstream_conn(f"127.0.0.1:{server.port}", login="spark", password=password)
    host, port = spark_connect_server.url.removeprefix("sc://").split(":")
    connection = {"conn_type": "spark_connect", "host": host, "port": int(port)}
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONNECT_CONN_ID.upper()}", json.dumps(connection))
    output = tmp_path / "parquet"
    conf = {"conn_id": conn_id, "stream": stream, "output": str(output), "bucket": "spark_cc_ckpt"}

    sessions_before = _server_sessions(spark_connect_server)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", RUN_DAG, json.dumps(conf)],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=False,
    )
    logs = done.stdout + done.stderr
    found = [line for line in done.stdout.splitlines() if line.startswith("dag run: ")]
    assert found, logs[-4000:]
    run = json.loads(found[-1].removeprefix("dag run: "))
    assert run["state"] == "success", logs[-4000:]
    assert {k: run["xcom"][k] for k in ("outcome", "start", "end", "rows", "checkpoint", "skipped")} == {
        "outcome": "written",
        "start": 1,
        "end": 40,
        "rows": 40,
        "checkpoint": 40,
        "skipped": False,
    }
    import pyarrow.parquet as pq

    table = pq.read_table(output / "seq_range=00000000000000000001-00000000000000000040")
    assert sorted(table.column("seq").to_pylist()) == list(range(1, 41))
    assert _server_sessions(spark_connect_server) - sessions_before, "the task ran on the Spark Connect server"
    assert password not in logs, "the NATS password is in the task's logs"
    assert password not in spark_connect_server.log.read_text(), "the NATS password is in the server's log"
