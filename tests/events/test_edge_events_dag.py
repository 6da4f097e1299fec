"""dags/jetstream_edge_events.py on a hub and two leaves: an announcement fires one event; its batch runs once."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import nats
import pytest

from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger
from tests.support.airflow_names import DagBag
from tests.support.triggerer import Triggerer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dags"))  # as Airflow's processes put the DAGs folder on sys.path


@pytest.fixture(scope="module")
def dagbag(airflow_db) -> DagBag:
    return DagBag(dag_folder=str(REPO / "dags" / "jetstream_edge_events.py"))


def test_the_dag_is_scheduled_on_the_announcements_asset_and_its_watcher(dagbag: DagBag) -> None:
    assert dagbag.import_errors == {}
    dag = dagbag.dags["jetstream_edge_events"]
    assert dag.doc_md and "jetstream_edge_events_setup" in dagbag.dag_ids
    from jetstream_edge_events import announcements

    assert announcements.uri == "jetstream://nats-hub/hub/announcements-all"
    (watcher,) = announcements.watchers
    assert isinstance(watcher.trigger, JetStreamMessageTrigger)
    assert watcher.trigger.serialize()[1]["consumer"] == "af_edge_events"


def test_an_announced_batch_fires_one_event_and_is_processed_once(airflow_db, dagbag, make_topology, monkeypatch):
    topology = make_topology(leaf_domains=["leaf-a", "leaf-b"])
    monkeypatch.setenv(
        "AIRFLOW_CONN_NATS_HUB",
        json.dumps({"conn_type": "jetstream", "host": f"127.0.0.1:{topology.hub.port}", "login": "acc",
                    "password": "acc", "extra": {"domain": "hub"}}),
    )  # fmt: skip
    run = dagbag.dags["jetstream_edge_events_setup"].test()
    assert run.state == "success"
    from jetstream_edge_events import announcements, process_announcements

    async def edge() -> None:
        """The edge process on leaf-a: a batch of readings, then its announcement."""
        nc = await nats.connect(topology.url("leaf-a"))
        js = nc.jetstream()
        from nats.js.api import StreamConfig

        await js.add_stream(StreamConfig(name="readings", subjects=["sensors.leaf-a.>"]))
        seqs = [
            (await js.publish("sensors.leaf-a.t", json.dumps({"sensor": f"s{i % 2}", "value": i}).encode())).seq
            for i in range(6)
        ]
        body = {"batch": "b1", "first_seq": seqs[0], "last_seq": seqs[-1]}
        await js.publish("announce.leaf-a.batch", json.dumps(body).encode())
        await nc.drain()

    async def watch() -> dict:
        runner = Triggerer()
        (watcher,) = announcements.watchers
        _, kwargs = watcher.trigger.serialize()
        runner.start(1, JetStreamMessageTrigger(**{**kwargs, "options": {**kwargs["options"], "cohort_wait": 0}}))
        try:
            await edge()
            (fired,) = await runner.wait_fired(1, timeout=60)  # sourced from the leaf into the hub
            runner.persist()
            return fired.event.payload
        finally:
            await runner.stop()

    payload = asyncio.run(watch())
    assert payload["subject"] == "announce.leaf-a.batch" and payload["data"]["batch"] == "b1"
    (result,) = process_announcements([payload])
    assert (result["leaf"], result["readings"], result["mean_by_sensor"]) == ("leaf-a", 6, {"s0": 2.0, "s1": 3.0})
    assert process_announcements([payload]) == []  # a redelivered announcement is not processed again
