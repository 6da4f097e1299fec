"""Nemesis: the edge-to-hub pipeline runs while hub nodes are killed and restarted, and loses or doubles nothing.

The pipeline, three DAG runs of three tasks each: the leaf's stream takes a batch (published through the
Airflow connection, which lists every hub node, to domain ``leaf``, each message with a ``Nats-Msg-Id`` so a
retried publish stores nothing twice); the replication sensor waits until the hub's R3 aggregate (sourcing
the leaf's stream) holds all of it; the packaged Spark job copies the aggregate to Parquet. Every task
may be retried as Airflow would (``tests/support/nemesis.py``'s ``Attempts``: up to 3 attempts, 5 s
apart). Meanwhile the nemesis (``tests/support/nemesis.py``) kills a seeded random hub node every
``EVERY`` seconds and starts it again ``DOWN_FOR`` seconds later; run ``i`` starts right after kill
``i``, so every run begins with a node down and a leader election possibly under way. Afterwards the
Parquet output holds every sequence of the aggregate exactly once, and the aggregate every published
message exactly once. See docs/reliability.md ("Nemesis") for the figures.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor
from airflow_provider_jetstream.spark.jobs.stream_to_parquet import main as stream_to_parquet
from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import uid
from tests.support.nemesis import Attempts, Nemesis, schedule
from tests.support.waiting import wait_until

pytestmark = pytest.mark.spark

#: The schedule: round i kills node Random(SEED)'s i-th pick at FIRST_AT + i * EVERY s, restarts it DOWN_FOR s later.
SEED, ROUNDS, EVERY, DOWN_FOR, FIRST_AT = 21, 3, 15.0, 5.0, 0.5
#: Airflow's retries of every task: 3 attempts, 5 s apart (an election takes 5-7 s on the test machine).
RETRY_DELAY = 5.0
#: Messages per DAG run (one DAG run per round).
BATCH = 2000
#: How long the sensor may wait within one attempt (its ``timeout``).
SENSOR_TIMEOUT = 30.0


def gaps_and_duplicates(seqs: list[int], last: int) -> tuple[list[int], list[int]]:
    """The sequences of ``1..last`` missing from ``seqs``, and those in it more than once."""
    seen: dict[int, int] = {}
    for seq in seqs:
        seen[seq] = seen.get(seq, 0) + 1
    return [s for s in range(1, last + 1) if s not in seen], sorted(s for s, n in seen.items() if n > 1)


def test_the_edge_to_hub_pipeline_survives_hub_nodes_killed_one_at_a_time(
    hub_cluster: LocalTopology, cluster_conn: str, spark: Any, tmp_path: Any
) -> None:
    origin, aggregate = uid("edge"), uid("agg")
    output, bucket = tmp_path / "out", f"nemesis_{uuid.uuid4().hex[:8]}"
    JetStreamHook(cluster_conn, domain="leaf").ensure_stream({"name": origin, "subjects": [f"{origin}.>"]})
    JetStreamHook(cluster_conn, domain="hub").ensure_stream(
        {"name": aggregate, "sources": [{"name": origin, "domain": "leaf"}], "num_replicas": 3}
    )
    faults = schedule(SEED, len(hub_cluster.hubs), ROUNDS, EVERY, DOWN_FOR, FIRST_AT)
    tasks = Attempts(attempts=3, retry_delay=RETRY_DELAY)
    leaders: list[tuple[int, str]] = []

    def publish(run: int) -> dict[str, Any]:
        payloads = [f"r{run}-{i:05d}".encode() for i in range(BATCH)]
        hook = JetStreamHook(cluster_conn, domain="leaf")
        return hook.publish(f"{origin}.r{run}", payloads, msg_id=f"nemesis/{origin}/r{run}/{{index}}")

    def wait_for_replication(run: int) -> Any:
        sensor = JetStreamReplicationLagSensor(
            task_id=f"wait_{run}", jetstream_conn_id=cluster_conn, domain="hub", stream=aggregate, poke_interval=0.2
        )
        done = wait_until(
            lambda: sensor.poke({}), lambda done: bool(getattr(done, "is_done", done)), SENSOR_TIMEOUT, "caught up"
        )
        leaders.append((run, done.xcom_value["cluster"]["summary"]))  # the health the sensor's XCom shows
        return done

    def copy_to_parquet(run: int) -> Any:
        argv = [
            *("--stream", aggregate, "--domain", "hub", "--output-path", str(output)),
            *("--checkpoint-bucket", bucket, "--checkpoint-domain", "hub"),
            *("--servers", hub_cluster.hub_urls, "--min-partitions", "2"),
        ]
        return stream_to_parquet(argv, spark=spark)

    nemesis = Nemesis(hub_cluster, faults)
    began = time.monotonic()
    nemesis.start()
    try:
        for run in range(ROUNDS):
            nemesis.wait_for(2 * run + 1)  # run i starts right after kill i
            tasks.run(f"publish_{run}", lambda run=run: publish(run))
            tasks.run(f"wait_for_replication_{run}", lambda run=run: wait_for_replication(run))
            tasks.run(f"stream_to_parquet_{run}", lambda run=run: copy_to_parquet(run))
    finally:
        done = nemesis.stop()
        print(f"nemesis: {round(time.monotonic() - began, 1)} s; faults (s, action, node):")
        print("\n".join(f"  {entry}" for entry in done))
        print("tasks (step, attempt, s, outcome):\n" + "\n".join(f"  {entry}" for entry in tasks.log))
        print("cluster health seen by the sensors:\n" + "\n".join(f"  {entry}" for entry in leaders))

    steps = {entry[0] for entry in tasks.log}
    assert steps == {entry[0] for entry in tasks.log if entry[3] == "success"}, "every task succeeded, retried or not"
    info = JetStreamHook(cluster_conn, domain="hub").stream_info(aggregate)
    state = info["state"]
    rows = spark.read.parquet(str(output)).select("seq", "data").collect()
    gaps, duplicates = gaps_and_duplicates([r.seq for r in rows], state["last_seq"])
    assert (gaps, duplicates) == ([], []), f"Parquet against the stream: {len(gaps)} gaps, {len(duplicates)} duplicates"
    assert len(rows) == state["messages"] == state["last_seq"]
    # The aggregate holds every published message once (a retried publish or copy doubled nothing).
    expected = sorted(f"r{run}-{i:05d}".encode() for run in range(ROUNDS) for i in range(BATCH))
    assert sorted(bytes(r.data) for r in rows) == expected
    print("nemesis figures:", json.dumps({**tasks.summary(), "messages": len(rows), "gaps": 0, "duplicates": 0}))
