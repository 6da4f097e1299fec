"""Functions for JetStreamConsumeOperator tests (importable by dotted path), and a runner of the operator in its
own process: ``python -m tests.support.consume_functions '<operator kwargs as JSON>'`` prints its XCom as JSON."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


class BadInput(Exception):
    """A message that will never succeed (the tests' ``term_on``)."""


def record(message: Any, log: str, die_at: int | None = None, fail: list[int] | None = None) -> int:
    """Append the message's sequence to ``log`` (durably), then: raise :class:`BadInput` for a payload ``bad``,
    ``ValueError`` for a sequence in ``fail`` on its first delivery, or (``die_at``, once per ``log``) SIGKILL
    this process: processed, not acked. Returns the sequence."""
    with open(log, "a") as out:
        out.write(f"{message.seq}\n")
        out.flush()
        os.fsync(out.fileno())
    if message.data == b"bad":
        raise BadInput(f"message {message.seq} is bad")
    if fail and message.seq in fail and message.delivered == 1:
        raise ValueError(f"message {message.seq} failed once")
    marker = Path(f"{log}.killed")
    if die_at is not None and message.seq == die_at and not marker.exists():
        marker.write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    return message.seq


def record_batch(messages: list[Any], log: str) -> list[int]:
    """Record each message of the batch; return their sequences."""
    return [record(message, log) for message in messages]


def processed(log: str) -> list[int]:
    """The sequences ``record`` saw, in order (a sequence twice: processed twice)."""
    path = Path(log)
    return [int(line) for line in path.read_text().split()] if path.exists() else []


if __name__ == "__main__":
    from airflow_provider_jetstream.operators.consume import JetStreamConsumeOperator

    kwargs = json.loads(sys.argv[1])
    print(json.dumps(JetStreamConsumeOperator(task_id="consume", **kwargs).execute({})))
