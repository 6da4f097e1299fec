"""Lineage fixtures: what the OpenLineage provider extracts from each task a real task runner finished,
and the metadata DB's asset rows."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from airflow.sdk._shared.listeners import hookimpl


@dataclass
class LineageCapture:
    """A task-runner listener: for each successful task, the ``OperatorLineage`` the OpenLineage
    provider's ``ExtractorManager`` extracts from the very operator instance that ran (as the
    OpenLineage listener does, without sending events anywhere)."""

    lineage: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)

    @hookimpl
    def on_task_instance_success(self, previous_state: Any, task_instance: Any) -> None:
        from airflow.providers.openlineage.extractors.manager import ExtractorManager
        from airflow.utils.state import TaskInstanceState

        try:
            self.lineage[task_instance.task_id] = ExtractorManager().extract_metadata(
                dagrun=task_instance.get_template_context()["dag_run"],
                task=task_instance.task,
                task_instance_state=TaskInstanceState.SUCCESS,
                task_instance=task_instance,
            )
        except Exception as err:  # the task runner would only log it: keep it for the assertion
            self.errors[task_instance.task_id] = err

    def datasets(self, task_id: str, kind: str) -> list[tuple[str, str]]:
        """``(namespace, name)`` of a task's OpenLineage ``inputs`` or ``outputs``."""
        assert task_id in self.lineage, (task_id, self.errors)
        return [(d.namespace, d.name) for d in getattr(self.lineage[task_id], kind)]


@pytest.fixture
def lineage_capture() -> Iterator[LineageCapture]:
    from airflow.sdk.listener import get_listener_manager

    capture = LineageCapture()
    manager = get_listener_manager()
    manager.add_listener(capture)
    try:
        yield capture
    finally:
        manager.pm.unregister(capture)


def sync_test_dags() -> None:
    """Write the ``test-dags`` bundle's DAGs to the metadata DB (as ``dag.test()`` does first), and
    unpause the lineage downstream DAGs: a paused DAG is not queued by asset events."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    bundle = manager.get_bundle("test-dags")
    if not bundle.is_initialized:
        bundle.initialize()
    bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
    sync_bag_to_db(bag, bundle.name, bundle.version)
    with create_session() as session:
        for dag_id in ("lineage_downstream", "lineage_parquet_downstream"):
            model = session.get(DagModel, dag_id)
            assert model is not None, f"{dag_id} was not parsed: {bag.import_errors}"
            model.is_paused = False


def queued_for(dag_id: str) -> list[str]:
    """URIs of the assets whose events queue a run of ``dag_id`` (AssetDagRunQueue rows)."""
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetModel.uri)
            .join(AssetDagRunQueue, AssetDagRunQueue.asset_id == AssetModel.id)
            .where(AssetDagRunQueue.target_dag_id == dag_id)
        )
        return sorted(uri for (uri,) in rows)


def asset_events(uri: str) -> list[dict[str, Any]]:
    """The asset events of the asset with this URI: source task and extra, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(AssetModel.uri == uri)
        )
        return [
            {"dag_id": e.source_dag_id, "task_id": e.source_task_id, "extra": dict(e.extra or {})}
            for e in sorted(rows, key=lambda e: e.id)
        ]
