"""Airflow end of the harness: a real DAG run through ``dag.test()`` uses the hook against real servers."""

from __future__ import annotations

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from tests.dags.jetstream_hook_smoke import dag


def test_dag_test_runs_a_task_that_uses_the_hook(airflow_db, hub_leaf, hub_conn) -> None:
    dag_run = dag.test(run_conf={"conn_id": hub_conn, "domain": "leaf"})
    assert dag_run.state == "success"
    ti = dag_run.get_task_instance("create_stream")
    assert ti.xcom_pull(task_ids="create_stream") == {"name": "dag_smoke", "domain": "leaf"}

    async def leaf_stream_subjects() -> list[str]:
        async with JetStreamHook(hub_conn).ajetstream(domain="leaf") as js:
            return (await js.stream_info("dag_smoke")).config.subjects

    assert JetStreamHook(hub_conn).run(leaf_stream_subjects()) == ["dag.smoke"]
