"""Lineage fixtures: what the OpenLineage provider extracts from each task a real task runner finished
(the metadata DB's rows are read with :mod:`tests.support.lineage`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from airflow.listeners import hookimpl


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
    from tests.support.airflow_names import get_listener_manager

    capture = LineageCapture()
    manager = get_listener_manager()
    manager.add_listener(capture)
    try:
        yield capture
    finally:
        manager.pm.unregister(capture)
