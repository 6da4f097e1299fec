"""Airflow names the tests use that moved between the supported releases (3.1: ``airflow.models.dagbag``,
``airflow.listeners.listener``; 3.2+: ``airflow.dag_processing.dagbag``, ``airflow.sdk``). The provider's own
moved names come from :mod:`airflow_provider_jetstream.compat`."""

from __future__ import annotations

from typing import Any

try:  # Airflow >= 3.2
    from airflow.dag_processing.dagbag import BundleDagBag, DagBag, sync_bag_to_db
except ImportError:  # Airflow 3.1
    from airflow.models.dagbag import BundleDagBag, DagBag, sync_bag_to_db  # type: ignore[no-redef]

try:  # Airflow >= 3.2
    from airflow.sdk.exceptions import TaskDeferred
except ImportError:  # Airflow 3.1
    from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]


def bundle_dag_bag(path: Any, name: str) -> Any:
    """A ``BundleDagBag`` of a bundle's folder, named ``name`` where the release's takes a name (3.2+)."""
    import inspect

    named = "bundle_name" in inspect.signature(DagBag.__init__).parameters
    return BundleDagBag(dag_folder=path, bundle_path=path, **({"bundle_name": name} if named else {}))


def get_listener_manager() -> Any:
    """Airflow's listener manager (the task runner's, where listeners see task outcomes)."""
    try:  # Airflow >= 3.2
        from airflow.sdk.listener import get_listener_manager as manager
    except ImportError:  # Airflow 3.1
        from airflow.listeners.listener import get_listener_manager as manager
    return manager()


__all__ = ["BundleDagBag", "DagBag", "TaskDeferred", "bundle_dag_bag", "get_listener_manager", "sync_bag_to_db"]
