"""nats.js (the official JavaScript client, ``tests/interop/js``) run with Node: one command, or a watch."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_jetstream.testing.servers import USERS, LocalTopology

JS_DIR = Path(__file__).resolve().parents[1] / "interop" / "js"
SCRIPT = JS_DIR / "client.js"


@dataclass
class NatsJs:
    """Runs ``js/client.js`` with Node, connected as user ACC to a server of a topology."""

    node: str
    topology: LocalTopology
    server: str = "hub"
    account: str = "ACC"
    timeout: float = 60.0

    def _env(self) -> dict[str, str]:
        user, password = USERS[self.account]
        url = self.topology.hub.url if self.server == "hub" else self.topology.leaves[self.server].url
        return {**os.environ, "NATS_URL": url, "NATS_USER": user, "NATS_PASSWORD": password}

    def _argv(self, command: str, args: dict[str, Any]) -> list[str]:
        return [self.node, str(SCRIPT), command, json.dumps(args)]

    def run(self, command: str, **args: Any) -> dict[str, Any]:
        """Run one command to its end; its ``result`` document."""
        done = subprocess.run(
            self._argv(command, args), env=self._env(), capture_output=True, text=True, timeout=self.timeout
        )
        if done.returncode != 0:
            raise AssertionError(f"nats.js {command} {args} failed (exit {done.returncode}):\n{done.stderr}")
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        results = [line["result"] for line in lines if "result" in line]
        assert results, f"nats.js {command} printed no result: {done.stdout!r} {done.stderr!r}"
        return results[0]

    def start(self, command: str, **args: Any) -> NodeRun:
        """Start a command that reports progress (a watch): read its lines with :class:`NodeRun`."""
        process = subprocess.Popen(
            self._argv(command, args),
            env=self._env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return NodeRun(command, process, self.timeout)


class NodeRun:
    """A running nats.js command: wait (bounded) for its progress lines, then for its result."""

    def __init__(self, command: str, process: subprocess.Popen[str], timeout: float) -> None:
        self.command, self.process, self.timeout = command, process, timeout
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                self.lines.put(json.loads(line))
        self.lines.put(None)  # end of output

    def _next(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        try:
            doc = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self.stop()
            raise AssertionError(f"nats.js {self.command}: no {waiting_for} within {self.timeout}s") from None
        if doc is None:
            self.process.wait(self.timeout)
            err = self.process.stderr.read() if self.process.stderr else ""
            raise AssertionError(
                f"nats.js {self.command} exited ({self.process.returncode}) before {waiting_for}:\n{err}"
            )
        return doc

    def wait_for(self, key: str) -> dict[str, Any]:
        """The first line the script prints with ``key`` (e.g. a watch reporting it is armed)."""
        deadline = time.monotonic() + self.timeout
        while True:
            doc = self._next(deadline, repr(key))
            if key in doc:
                return doc
            if "result" in doc:
                raise AssertionError(f"nats.js {self.command} ended before {key!r}: {doc}")

    def result(self) -> dict[str, Any]:
        """The command's ``result`` document, once it has printed it."""
        deadline = time.monotonic() + self.timeout
        while True:
            doc = self._next(deadline, "result")
            if "result" in doc:
                return doc["result"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.reader.join(5)
