"""A one-port TCP listener that plays a plain-text NATS server's greeting and records what it gets.

It sends ``INFO {...}`` (no ``tls_required``) to every client and keeps every byte the client sends
until the client closes, so a test can prove what a client did or did not send: no CONNECT, no
password. It never answers CONNECT or PING, so a client that does send them fails by its timeout.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Recorder:
    port: int
    info: dict
    accepted: int = 0
    received: list[bytes] = field(default_factory=list)
    _done: list[threading.Event] = field(default_factory=list)

    @property
    def data(self) -> bytes:
        """Every byte received from every client so far."""
        return b"".join(self.received)

    def wait_closed(self, timeout: float = 10.0) -> None:
        """Wait until every accepted client has closed its end (its bytes are then all recorded)."""
        for done in list(self._done):
            assert done.wait(timeout), "a client of the recorder did not close its connection"


@contextmanager
def recording_server(**info: object) -> Iterator[Recorder]:
    """Listen on a free loopback port; yield the :class:`Recorder`; stop listening at exit."""
    greeting = {"server_id": "RECORDER", "server_name": "recorder", "version": "2.15.1", "proto": 1,
                "host": "127.0.0.1", "max_payload": 1048576, "auth_required": True, **info}  # fmt: skip
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    recorder = Recorder(port=listener.getsockname()[1], info=greeting)
    stop = threading.Event()

    def serve(conn: socket.socket, done: threading.Event) -> None:
        with conn:
            conn.sendall(b"INFO " + json.dumps(greeting).encode() + b"\r\n")
            conn.settimeout(30)
            try:
                while chunk := conn.recv(65536):
                    recorder.received.append(chunk)
            except OSError:
                pass
        done.set()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            recorder.accepted += 1
            done = threading.Event()
            recorder._done.append(done)
            threading.Thread(target=serve, args=(conn, done), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        stop.set()
        thread.join(5)
        listener.close()
