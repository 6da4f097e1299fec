"""The Spark writer publishes in fast-ingest batches where the stream has ``allow_batched``: every row stored
once, each sent with the batch reply pattern (``.$FI``), which a core subscriber on the subject sees; with
``fastIngest=false`` each row on its own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import uid
from tests.support.natsutil import server_version
from tests.support.spark import SparkStream, hub_client, leaf_api, stored_messages
from tests.support.waiting import Later, scaled


@pytest.mark.parametrize("fast_ingest", ["true", "false"])
def test_spark_rows_to_an_allow_batched_stream_go_in_fast_ingest_batches_unless_turned_off(
    spark: Any, hub_leaf: LocalTopology, fast_ingest: str
) -> None:
    # Fast ingest itself is under test: on an older server this fails, it is never skipped.
    assert server_version(hub_leaf.hub) >= (2, 14), "fast ingest needs nats-server 2.14+ (older: the per-message path)"
    name = uid("spark_fi").replace("-", "_")
    stream = SparkStream(name, "leaf", name, hub_leaf)
    n = 5000
    ends = 2 if fast_ingest == "true" else 0

    created = leaf_api(
        hub_leaf, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"], "allow_batched": True}
    )
    assert created["config"]["allow_batched"], created
    ready = threading.Event()

    async def watch() -> dict[str, int]:
        """Every message on the stream's subjects: sent in a batch (a ``$FI`` reply), ending one (op 3, not
        stored), or on its own."""
        seen = {"batched": 0, "ends": 0, "other": 0}
        done = asyncio.Event()

        async def count(msg: Any) -> None:
            kind = "other" if not msg.reply.endswith(".$FI") else "ends" if msg.reply.endswith(".3.$FI") else "batched"
            seen[kind] += 1
            if seen["batched"] + seen["other"] >= n and seen["ends"] >= ends:
                done.set()

        nc = await hub_client(hub_leaf)
        try:
            await nc.subscribe(f"{name}.>", cb=count)
            await nc.flush()
            ready.set()
            await asyncio.wait_for(done.wait(), scaled(120))
            return seen
        finally:
            await nc.close()

    watcher = Later(watch)
    watcher.start()
    try:
        assert ready.wait(scaled(30)), "the watching subscription did not start"
        rows = spark.createDataFrame([(str(i), f"spark-fi/{i}") for i in range(n)], "data string, id string")
        rows.coalesce(2).write.format("jetstream").options(
            **stream.write_options(subject=f"{name}.rows", msgIdColumn="id", fastIngest=fast_ingest)
        ).mode("append").save()
        # Two partitions: two tasks, a batch each; or an ack per row with fastIngest=false.
        expected = (
            {"batched": n, "ends": 2, "other": 0} if fast_ingest == "true" else {"batched": 0, "ends": 0, "other": n}
        )
        assert watcher.finish(120) == expected
        state = leaf_api(hub_leaf, f"STREAM.INFO.{name}")["state"]
        assert (state["messages"], state["first_seq"], state["last_seq"]) == (n, 1, n)
    finally:
        leaf_api(hub_leaf, f"STREAM.DELETE.{name}")


def test_rows_to_one_subject_are_stored_alike_in_fast_ingest_batches_and_one_by_one(
    spark: Any, hub_leaf: LocalTopology
) -> None:
    """Each record batch goes as one block: text data (a null one empty), an integer msgIdColumn and, or not, a
    headers column reach the stream as the per-message path stores them; a null message id is refused before a
    row of its batch is sent."""
    assert server_version(hub_leaf.hub) >= (2, 14), "fast ingest needs nats-server 2.14+ (older: the per-message path)"
    n = 300
    rows = spark.createDataFrame(
        [(None if i == 7 else f"d{i}", i, {"k": f" v{i} "} if i % 3 else None) for i in range(n)],
        "data string, n long, headers map<string,string>",
    ).coalesce(2)
    for frame, headers_of_7 in ((rows, {"k": "v7"}), (rows.drop("headers"), {})):
        stored = {}
        for fast_ingest in ("true", "false"):
            name = uid("spark_blk").replace("-", "_")
            stream = SparkStream(name, "leaf", name, hub_leaf)
            body = {"name": name, "subjects": [f"{name}.>"], "allow_batched": True}
            leaf_api(hub_leaf, f"STREAM.CREATE.{name}", body)
            try:
                options = stream.write_options(subject=f"{name}.rows", msgIdColumn="n", fastIngest=fast_ingest)
                frame.write.format("jetstream").options(**options).mode("append").save()
                frame.write.format("jetstream").options(**options).mode("append").save()  # a re-run: all duplicates
                messages = stored_messages(stream)
            finally:
                leaf_api(hub_leaf, f"STREAM.DELETE.{name}")
            assert len(messages) == n
            assert {headers.pop("Nats-Expected-Stream") for _, _, headers in messages} == {name}
            assert {subject for subject, _, _ in messages} == {f"{name}.rows"}
            stored[fast_ingest] = sorted((int(h["Nats-Msg-Id"]), data or b"", h) for _, data, h in messages)
        assert stored["true"] == stored["false"]
        # The header value stripped, as nats-py sends it; the null data empty.
        assert stored["true"][7] == (7, b"", {**headers_of_7, "Nats-Msg-Id": "7"})
        assert stored["true"][9] == (9, b"d9", {"Nats-Msg-Id": "9"})

    name = uid("spark_null").replace("-", "_")
    stream = SparkStream(name, "leaf", name, hub_leaf)
    leaf_api(hub_leaf, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"], "allow_batched": True})
    try:
        nulls = spark.createDataFrame([("a", "1"), ("b", None), ("c", "3")], "data string, id string").coalesce(1)
        with pytest.raises(Exception, match=r"row 1 of a batch has id=None \(msgIdColumn\), which is not allowed"):
            nulls.write.format("jetstream").options(
                **stream.write_options(subject=f"{name}.rows", msgIdColumn="id")
            ).mode("append").save()
        assert leaf_api(hub_leaf, f"STREAM.INFO.{name}")["state"]["messages"] == 0
    finally:
        leaf_api(hub_leaf, f"STREAM.DELETE.{name}")
