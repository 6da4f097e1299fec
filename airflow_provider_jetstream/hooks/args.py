"""Interim: the replication sensor's watch builder, until the sensors use the argument layer too.

Every argument check lives in :mod:`airflow_provider_jetstream.core.arguments`; this module goes once
the sensors (whose waiting logic is being rewritten at the same time) are moved over.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments.operations import REPLICATION
from airflow_provider_jetstream.core.arguments.operations import replication_watch as watch_from
from airflow_provider_jetstream.core.status.replication import ReplicationWatch


def replication_watch(stream: Any, *, unreachable_timeout: float | None = None, **arguments: Any) -> ReplicationWatch:
    """A :class:`ReplicationWatch` from arguments checked with :data:`REPLICATION`."""
    return watch_from(REPLICATION.check({"stream": stream, **arguments}), unreachable_timeout)
