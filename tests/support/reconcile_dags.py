"""Runs of the one-task reconcile DAGs (tests/dags/management_reconcile.py) through dag.test(), and their XComs."""

from __future__ import annotations

from typing import Any

from tests.dags.management_reconcile import bucket_dag, stream_dag

#: Every param of a run: ``dag.test()`` keeps the previous run's values for the ones left out.
DEFAULTS = {
    "domain": "leaf",
    "if_exists": "update",
    "dry_run": False,
    "allow_data_loss": False,
    "allow_double_store": False,
}


def xcom(run: Any, task_id: str = "reconcile") -> Any:
    """What task ``task_id`` of ``run`` returned."""
    return run.get_task_instance(task_id).xcom_pull(task_ids=task_id)


def run_stream(spec: dict, conn: str, **params: Any) -> Any:
    """The stream reconcile DAG run once with ``spec`` on connection ``conn`` (and ``params`` over :data:`DEFAULTS`)."""
    return stream_dag.test(run_conf={**DEFAULTS, "conn_id": conn, "spec": spec, **params})


def run_bucket(spec: dict | str, conn: str, **params: Any) -> Any:
    """The bucket reconcile DAG run once with ``spec`` on connection ``conn`` (and ``params`` over :data:`DEFAULTS`)."""
    return bucket_dag.test(run_conf={**DEFAULTS, "conn_id": conn, "spec": spec, **params})
