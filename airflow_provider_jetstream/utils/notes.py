"""Task notes the grid shows: what a JetStream task wants a person to see there (a run that went on
without an origin it could not reach).

Airflow 3 gives a running task no call to set its own note. So the task pushes the text to XCom under
:data:`NOTE_XCOM_KEY` (:func:`leave_note`), and this module, a listener the provider's plugin
registers, sets it as the task's note in the scheduler when the DAG run ends (succeeded or failed),
unless a person already wrote one.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)

#: The XCom key of a task's note.
NOTE_XCOM_KEY = "jetstream_note"
#: The longest note Airflow keeps (``task_instance_note.content``).
NOTE_LIMIT = 1000


def leave_note(context: Any, text: str) -> None:
    """Leave ``text`` (cut to :data:`NOTE_LIMIT` characters) as the running task's note, set when its run ends."""
    ti = context.get("ti") if hasattr(context, "get") else None
    if ti is not None and text:
        ti.xcom_push(key=NOTE_XCOM_KEY, value=text[:NOTE_LIMIT])


@hookimpl
def on_dag_run_success(dag_run: Any, msg: str) -> None:
    copy_notes(dag_run)


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    copy_notes(dag_run)


def copy_notes(dag_run: Any) -> None:
    """Set the note of each task of ``dag_run`` that left one, in the scheduler's session (committed with
    the run's new state); a note a person wrote is kept."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import select
    from sqlalchemy.orm import object_session

    session = object_session(dag_run)
    if session is None:
        return
    try:
        rows = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id, XComModel.key == NOTE_XCOM_KEY
            )
        ).all()
        notes = {(row.task_id, row.map_index): XComModel.deserialize_value(row) for row in rows}
        if not notes:
            return
        tis = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag_run.dag_id,
                TaskInstance.run_id == dag_run.run_id,
                TaskInstance.task_id.in_({task_id for task_id, _ in notes}),
            )
        )
        for ti in tis:
            text = notes.get((ti.task_id, ti.map_index))
            if isinstance(text, str) and text and not ti.note:
                ti.note = text[:NOTE_LIMIT]
    except Exception:  # a note is worth less than the scheduler's loop: say so and go on
        log.exception("could not set the JetStream task notes of run %r of DAG %r", dag_run.run_id, dag_run.dag_id)
