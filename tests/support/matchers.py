"""``apply_function``s of the await-message tests, imported by dotted path (in the triggerer, or the worker)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from airflow_provider_jetstream.core.consume.deliveries import Delivery

#: Sequences :func:`done_for_site` examined, in order, in this process (a test clears it).
EXAMINED: list[int] = []
#: Sequences :func:`fails_first_time` raised for, in this process.
FAILED: set[int] = set()


def done_for_site(message: Delivery, site: str = "lyon") -> dict[str, Any] | None:
    """A ``{"status": "done", "site": site}`` message matches: its site and batch; any other does not."""
    EXAMINED.append(message.seq)
    body = json.loads(message.data)
    if body.get("status") == "done" and body.get("site") == site:
        return {"site": site, "batch": body.get("batch")}
    return None


def sequence_of(message: Delivery) -> int:
    """Every message matches; its sequence is the value (the generated-inputs harness's function)."""
    return message.seq


def fails_first_time(message: Delivery) -> dict[str, Any]:
    """Raises the first time this process examines a message (a bug the retry does not hit); matches it after."""
    if message.seq not in FAILED:
        FAILED.add(message.seq)
        raise ValueError(f"cannot parse {message.data[:20]!r}")
    return {"failed_before": True}


def done_gated(message: Delivery, record: str, gate: str) -> dict[str, Any] | None:
    """Appends ``<sequence> <pid>`` to the file ``record`` for each message examined; a ``{"status": "done"}``
    message matches (its batch), but only once the file ``gate`` exists: until then the function holds it,
    as a slow function would (a triggerer killed meanwhile dies holding it)."""
    with open(record, "a") as out:
        out.write(f"{message.seq} {os.getpid()}\n")
    body = json.loads(message.data)
    if body.get("status") != "done":
        return None
    while not os.path.exists(gate):  # a condition, polled: this runs in a thread of the triggerer
        time.sleep(0.05)
    return {"batch": body.get("batch")}
