"""The README's first DAG and the TaskFlow guide's example: the same file as tests/dags/taskflow_example.py,
run with ``dag.test()`` on a hub + leaf topology, with what it did checked on the servers."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from airflow_provider_jetstream.testing.servers import USERS
from tests.dags.taskflow_example import dag
from tests.support.management import Raw

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "tests" / "dags" / "taskflow_example.py"


def first_python_block(page: Path, heading: str) -> str:
    """The first Python block of a page's ``## heading`` section."""
    section = page.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, f"{page.name}'s {heading!r} section has no python block"
    return blocks[0]


def test_the_readme_and_docs_examples_are_the_tested_dag_file() -> None:
    assert first_python_block(REPO / "README.md", "A first DAG") == EXAMPLE.read_text()
    assert first_python_block(REPO / "docs" / "hook.md", "TaskFlow") == EXAMPLE.read_text()


def xcom(run, task_id: str):
    return run.get_task_instance(task_id).xcom_pull(task_ids=task_id)


def kv_value(raw: Raw, domain: str, bucket: str, key: str) -> tuple[int, bytes]:
    """``(revision, value)`` of a key, read from the bucket's stream without the code under test."""
    reply = raw.api(domain, f"STREAM.MSG.GET.KV_{bucket}", {"last_by_subj": f"$KV.{bucket}.{key}"})
    assert "error" not in reply, reply
    return reply["message"]["seq"], base64.b64decode(reply["message"]["data"])


def test_taskflow_example_runs_on_hub_and_leaf(airflow_db, make_topology, jetstream_conn) -> None:
    topology = make_topology()  # private: the example's names (readings, pipeline...) are fixed
    raw = Raw(topology)
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(host=f"127.0.0.1:{topology.hub.port}", login=user, password=password)

    first = dag.test(run_conf={"conn_id": conn_id})
    assert first.state == "success"
    assert xcom(first, "declare") == {"leaf": "created", "hub": "created"}
    published = xcom(first, "publish")
    assert {k: published[k] for k in ("count", "stored", "duplicates", "stream", "domain")} == {
        "count": 100,
        "stored": 100,
        "duplicates": 0,
        "stream": "readings",
        "domain": "leaf",
    }
    # Stored at the edge only (the hub has no stream on sensors.>), copied to the hub by the server.
    assert raw.info("leaf", "readings")["state"]["messages"] == 100
    assert raw.info("hub", "readings") is None
    replication = xcom(first, "replicated")
    assert replication["caught_up"] is True and replication["last_seq"] == 100
    (origin,) = replication["origins"]
    assert (origin["check"], origin["origin_last_seq"], origin["held_seq"]) == ("exact", 100, 100)
    assert raw.info("hub", "readings-all")["state"]["messages"] == 100  # the sensor waited for all of it
    consumer = raw.api("hub", "CONSUMER.INFO.readings-all.reports")
    assert "error" not in consumer and consumer["config"]["ack_wait"] == 30_000_000_000
    checkpoint = xcom(first, "checkpoint")
    assert checkpoint["checkpoint"] == {"last_seq": 100} and checkpoint["unprocessed"] == 100
    assert kv_value(raw, "hub", "pipeline", "readings.checkpoint") == (checkpoint["revision"], b'{"last_seq":100}')

    # Run again: the declarations are unchanged, the new run's messages are new ones (its own ids).
    second = dag.test(run_conf={"conn_id": conn_id})
    assert second.state == "success"
    assert xcom(second, "declare") == {"leaf": "unchanged", "hub": "unchanged"}
    assert xcom(second, "publish")["stored"] == 100
    assert raw.info("leaf", "readings")["state"]["messages"] == 200
    assert xcom(second, "replicated")["last_seq"] == 200
    again = xcom(second, "checkpoint")
    assert again["checkpoint"] == {"last_seq": 200} and again["revision"] > checkpoint["revision"]
    assert json.loads(kv_value(raw, "hub", "pipeline", "readings.checkpoint")[1]) == {"last_seq": 200}
