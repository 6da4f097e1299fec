"""The metadata DB's side of lineage: the test DAGs written to it, the runs asset events queue, the asset events."""

from __future__ import annotations

from typing import Any


def sync_test_dags() -> None:
    """Write the ``test-dags`` bundle's DAGs to the metadata DB (as ``dag.test()`` does first), and
    unpause the lineage downstream DAGs: a paused DAG is not queued by asset events."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    from tests.support.airflow_names import bundle_dag_bag, sync_bag_to_db

    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    bundle = manager.get_bundle("test-dags")
    if not bundle.is_initialized:
        bundle.initialize()
    bag = bundle_dag_bag(bundle.path, bundle.name)
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


def alias_registered(name: str) -> bool:
    """Whether the asset alias ``name`` is in the metadata DB."""
    from airflow.models.asset import AssetAliasModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(AssetAliasModel.id).where(AssetAliasModel.name == name)) is not None
