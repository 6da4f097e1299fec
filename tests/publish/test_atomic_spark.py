"""The Spark writer with ``atomic=true``: each task's rows land as one atomic batch, all or nothing; a re-run
stores nothing twice; a task that cannot land whole (too many rows, a refused row) stores none of its
rows; a stream without ``allow_atomic`` is refused before any task runs."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import uid
from tests.support.natsutil import server_version
from tests.support.spark import SparkStream, hub_client, leaf_api, run


def _stream(topology: LocalTopology, **config: Any) -> SparkStream:
    """A stream in the leaf domain, subjects ``<name>.>``, with ``config`` (e.g. ``allow_atomic=True``)."""
    # Atomic batches themselves are under test: on an older server this fails, it is never skipped.
    assert server_version(topology.hub) >= (2, 12), "atomic batches need nats-server 2.12+"
    name = uid("spark_ab").replace("-", "_")
    created = leaf_api(topology, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"], **config})
    assert "error" not in created, created
    return SparkStream(name, "leaf", name, topology)


def _stored(stream: SparkStream) -> list[tuple[str, str]]:
    """``(payload, Nats-Batch-Id)`` of every message of the stream, in order."""
    state = leaf_api(stream.topology, f"STREAM.INFO.{stream.name}")["state"]

    async def go() -> list[tuple[str, str]]:
        nc = await hub_client(stream.topology)
        try:
            js = nc.jetstream(domain="leaf")
            out = []
            for seq in range(state["first_seq"], state["last_seq"] + 1) if state["messages"] else []:
                msg = await js.get_msg(stream.name, seq)
                out.append((msg.data.decode(), (msg.headers or {}).get("Nats-Batch-Id", "")))
            return out
        finally:
            await nc.close()

    return run(go())


def _delete(stream: SparkStream) -> None:
    leaf_api(stream.topology, f"STREAM.DELETE.{stream.name}")


def test_each_task_s_rows_land_as_one_atomic_batch_and_a_rerun_stores_nothing_twice(
    spark: Any, hub_leaf: LocalTopology
) -> None:
    stream = _stream(hub_leaf, allow_atomic=True, duplicate_window=120_000_000_000)
    try:
        rows = spark.createDataFrame([(str(i), f"ab/{i}") for i in range(1600)], "data string, id string")
        options = stream.write_options(subject=f"{stream.prefix}.rows", msgIdColumn="id", atomic="true")
        rows.repartition(2).write.format("jetstream").options(**options).mode("append").save()
        stored = _stored(stream)
        assert sorted(int(payload) for payload, _ in stored) == list(range(1600))
        # Two tasks, two atomic batches: each task's rows are stored together (consecutive, one batch id).
        batch_ids = [batch for _, batch in stored]
        assert len(set(batch_ids)) == 2 and batch_ids == sorted(batch_ids, key=batch_ids.index)
        # The same rows again (a re-run, or a retried task): every id is a duplicate, nothing stored twice.
        rows.repartition(2).write.format("jetstream").options(**options).mode("append").save()
        assert len(_stored(stream)) == 1600
    finally:
        _delete(stream)


def test_a_task_that_cannot_land_whole_stores_none_of_its_rows(spark: Any, hub_leaf: LocalTopology) -> None:
    stream = _stream(hub_leaf, allow_atomic=True, max_msg_size=1000)
    try:
        options = stream.write_options(subject=f"{stream.prefix}.rows", atomic="true")
        # More rows in one task than one batch takes: refused before anything is sent, with the limit.
        many = spark.createDataFrame([(str(i),) for i in range(1001)], "data string").coalesce(1)
        with pytest.raises(Exception, match=r"more than 1000 messages for one atomic batch") as refused:
            many.write.format("jetstream").options(**options).mode("append").save()
        assert "repartition" in str(refused.value)
        # One row over the stream's max_msg_size: the task fails with the server's reason, none of its rows stored.
        rows = [("x" * 2000 if i == 7 else str(i),) for i in range(20)]
        one_bad = spark.createDataFrame(rows, "data string").coalesce(1)
        with pytest.raises(Exception, match=r"message size exceeds maximum allowed") as failed:
            one_bad.write.format("jetstream").options(**options).mode("append").save()
        assert "20 of 20 messages were not stored" in str(failed.value)
        assert _stored(stream) == []
    finally:
        _delete(stream)


def test_atomic_on_a_stream_without_allow_atomic_is_refused_before_any_task_runs(
    spark: Any, hub_leaf: LocalTopology
) -> None:
    stream = _stream(hub_leaf)
    try:
        rows = spark.createDataFrame([(str(i),) for i in range(10)], "data string")
        options = stream.write_options(subject=f"{stream.prefix}.rows", atomic="true")
        with pytest.raises(Exception, match=r"jetstream option atomic='true': stream .* does not take atomic batches"):
            rows.write.format("jetstream").options(**options).mode("append").save()
        assert _stored(stream) == []
        # A value that is not a boolean is refused with the option's name and what it takes.
        with pytest.raises(Exception, match=r"atomic") as refused:
            rows.write.format("jetstream").options(**{**options, "atomic": "sometimes"}).mode("append").save()
        assert "sometimes" in str(refused.value)
    finally:
        _delete(stream)
