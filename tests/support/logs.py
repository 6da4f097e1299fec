"""Log lines a test waits for: a logged decision ("waiting: ...") proves the code under test had its chance to act."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from tests.support.waiting import eventually


class LogLines:
    """The log events captured so far (the code under test logs through structlog), as text."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events

    def lines(self) -> list[str]:
        rendered = []
        for event in list(self.events):
            text, args = str(event.get("event", "")), event.get("positional_args")
            rendered.append(text % tuple(args) if args else text)
        return rendered

    def count(self, text: str) -> int:
        """How many lines contain ``text``."""
        return sum(text in line for line in self.lines())

    async def wait_for(self, text: str, count: int = 1, timeout: float = 30.0) -> None:
        """Wait until ``count`` lines contain ``text``; fail, showing the last lines, if not within ``timeout``."""
        seen = await eventually(lambda: self.count(text), lambda n: n >= count, timeout)  # scaled there
        assert seen >= count, f"{seen} log line(s) with {text!r} after {timeout}s, not {count}: {self.lines()[-15:]}"


@contextmanager
def captured_logs() -> Iterator[LogLines]:
    """Capture every structlog event while the block runs (what the triggers log)."""
    with structlog.testing.capture_logs() as events:
        yield LogLines(events)
