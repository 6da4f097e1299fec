"""Fakes for the unit tests of pure logic: a NATS client recording what it publishes, answering requests from a dict."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import nats.errors


@dataclass
class FakeClient:
    """What the pull engine, the ack floor and the durable puller use of a nats-py ``Client``.

    ``published`` holds ``(subject, payload, reply)`` in order; ``answers`` maps a request subject to the
    JSON object (or a callable making it) the fake server replies with; a subject without an answer has
    no responders.
    """

    published: list[tuple[str, bytes, str]] = field(default_factory=list)
    answers: dict[str, Any] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    flushes: int = 0
    is_connected: bool = True
    is_closed: bool = False
    inbox: str = "_INBOX.fake"

    def new_inbox(self) -> str:
        return self.inbox

    async def publish(self, subject: str, payload: bytes = b"", reply: str = "", headers: Any = None) -> None:
        self.published.append((subject, payload, reply))

    async def flush(self, timeout: float = 10) -> None:
        self.flushes += 1

    async def request(self, subject: str, payload: bytes = b"", timeout: float = 1) -> Any:
        self.requests.append(subject)
        if subject not in self.answers:
            raise nats.errors.NoRespondersError
        answer = self.answers[subject]
        body = answer() if isinstance(answer, Callable) else answer
        return SimpleNamespace(data=json.dumps(body).encode())

    def bodies(self, subject: str | None = None) -> list[bytes]:
        """The payloads published (to ``subject`` only, if given)."""
        return [payload for s, payload, _ in self.published if subject is None or s == subject]
