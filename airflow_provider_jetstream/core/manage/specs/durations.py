"""Interim: the duration parsers the sensors and triggers import until they use the argument layer.

The durations and instants now live in :mod:`airflow_provider_jetstream.core.arguments.durations`;
this module goes once the sensors and triggers (whose waiting logic is being rewritten) are moved over.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments.durations import duration_seconds


def optional_duration_seconds(value: Any, field_name: str) -> float | None:
    return None if value is None else duration_seconds(value, field_name, positive=True)


__all__ = ["duration_seconds", "optional_duration_seconds"]
