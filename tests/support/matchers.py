"""``apply_function``s of the await-message tests, imported by dotted path (in the triggerer, or the worker)."""

from __future__ import annotations

import json
from typing import Any

from airflow_provider_jetstream.core.consume.deliveries import Delivery

#: Sequences :func:`done_for_site` examined, in order, in this process (a test clears it).
EXAMINED: list[int] = []


def done_for_site(message: Delivery, site: str = "lyon") -> dict[str, Any] | None:
    """A ``{"status": "done", "site": site}`` message matches: its site and batch; any other does not."""
    EXAMINED.append(message.sequence)
    body = json.loads(message.data)
    if body.get("status") == "done" and body.get("site") == site:
        return {"site": site, "batch": body.get("batch")}
    return None


def sequence_of(message: Delivery) -> int:
    """Every message matches; its sequence is the value (the generated-inputs harness's function)."""
    return message.sequence
