"""Lineage of JetStreamSparkSubmitOperator run by ``dag.test()``: the stream read in, the Parquet
directory out (OpenLineage), and the Parquet asset's event that queues a DAG scheduled on it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from airflow_provider_jetstream.testing.servers import USERS
from tests.support.lineage import asset_events, queued_for, sync_test_dags

pytestmark = pytest.mark.spark


def test_spark_copy_reads_the_stream_and_writes_the_parquet_asset(
    airflow_db, hub_leaf, jetstream_conn, monkeypatch, tmp_path, lineage_capture
) -> None:
    import nats
    from nats.js.api import StreamConfig

    from tests.dags.spark_stream_to_parquet import dag

    user, password = USERS["ACC"]
    stream = f"lin_spark_{uuid.uuid4().hex[:6]}"

    async def publish() -> None:
        nc = await nats.connect(hub_leaf.hub.url, user=user, password=password)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        for i in range(5):
            await js.publish(f"{stream}.a", b"m%d" % i)
        await nc.close()

    asyncio.run(publish())
    output = tmp_path / "parquet"
    monkeypatch.setenv("JETSTREAM_LINEAGE_PARQUET", str(output))  # the Parquet downstream's schedule
    conn = jetstream_conn(
        host=f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password, asset_server="lineage-nats"
    )
    sync_test_dags()

    run = dag.test(run_conf={"conn_id": conn, "stream": stream, "output": str(output), "bucket": "lin_spark_ckpt"})

    assert run.state == "success"
    assert lineage_capture.datasets("copy_to_parquet", "inputs") == [("jetstream://lineage-nats", f"hub/{stream}")]
    assert lineage_capture.datasets("copy_to_parquet", "outputs") == [("file", str(output))]
    assert [e["task_id"] for e in asset_events(f"file://{output}")] == ["copy_to_parquet"]
    assert queued_for("lineage_parquet_downstream") == [f"file://{output}"]


def test_with_its_own_application_the_operator_declares_no_lineage() -> None:
    from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitOperator

    mine = JetStreamSparkSubmitOperator(task_id="s", application="/jobs/mine.py")
    assert mine.outlets == [] and mine.get_openlineage_facets_on_complete(None) is None
    packaged = JetStreamSparkSubmitOperator(task_id="p", stream="s", output_path="/o", checkpoint_bucket="b")
    assert [alias.name for alias in packaged.outlets] == ["jetstream:p"]
