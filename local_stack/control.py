"""Cut a leaf of the running ``make stack`` off the hub, and link it again: ``make stack-cut LEAF=<name>`` and
``make stack-relink LEAF=<name>``.

The stack process serves a unix socket, ``control.sock`` in its work directory (``.stack/``), with
:class:`StackControl`; this module's command line (``python -m local_stack.control cut leaf-a``) asks it. A cut
restarts the leaf without its remotes (its own JetStream keeps working, publishes to it are stored there); a
relink restarts it with them and returns once its domain answers through the hub again
(:meth:`~airflow_provider_jetstream.testing.servers.LocalTopology.disconnect_leaf` and
:meth:`~airflow_provider_jetstream.testing.servers.LocalTopology.reconnect_leaf`, what the tests use).

One request a line, one answer a line, both JSON: ``{"do": "cut" | "relink", "leaf": "<domain>"}`` and
``{"ok": true, "said": "..."}`` or ``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import argparse
import json
import socket
import socketserver
import sys
import threading
from pathlib import Path
from typing import Any

from airflow_provider_jetstream.testing.servers import LocalTopology

#: The socket's file name in the stack's work directory.
CONTROL_SOCKET = "control.sock"
#: What the control does: cut a leaf off the hub, or link it again.
ACTIONS = ("cut", "relink")
#: Seconds a relink may take before it fails (the leaf restarts and its domain must answer through the hub).
RELINK_TIMEOUT = 60.0


class StackControl:
    """Serves ``cut`` and ``relink`` of the leaves of ``nats`` on a unix socket at ``path`` (see the module doc),
    one request at a time, in a thread of its own, until :meth:`stop`.

    :param nats: the stack's hub and leaves.
    :param path: the socket's path (replaced if a stale one is there).
    """

    def __init__(self, nats: LocalTopology, path: Path) -> None:
        self.nats = nats
        self.path = Path(path)
        self._server: socketserver.UnixStreamServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> StackControl:
        """Listen on the socket and serve in a daemon thread."""
        self.path.unlink(missing_ok=True)
        control = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                answer = control.answer(self.rfile.readline())
                self.wfile.write(json.dumps(answer).encode() + b"\n")

        self._server = socketserver.UnixStreamServer(str(self.path), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="stack-control", daemon=True)
        self._thread.start()
        return self

    def answer(self, line: bytes) -> dict[str, Any]:
        """The answer to one request line: what was done, or why nothing was."""
        try:
            request = json.loads(line)
            action, leaf = request["do"], request["leaf"]
        except (ValueError, KeyError, TypeError):
            return {"ok": False, "error": f'request={line[:80]!r} is not allowed: {{"do": "cut", "leaf": "<name>"}}'}
        if action not in ACTIONS:
            return {"ok": False, "error": f"do={action!r} is not allowed: one of {', '.join(ACTIONS)}"}
        if leaf not in self.nats.leaves:
            return {"ok": False, "error": f"LEAF={leaf!r} is not allowed: one of {', '.join(sorted(self.nats.leaves))}"}
        try:
            if action == "cut":
                self.nats.disconnect_leaf(leaf)
                return {
                    "ok": True,
                    "said": f"{leaf} cut off the hub: its JetStream still stores what is published to it",
                }
            self.nats.reconnect_leaf(leaf, timeout=RELINK_TIMEOUT)
            return {"ok": True, "said": f"{leaf} linked to the hub again: its domain answers through the hub"}
        except Exception as err:  # the stack goes on; the caller is told
            return {"ok": False, "error": f"{action} {leaf}: {err}"}

    def stop(self) -> None:
        """Stop serving and remove the socket; safe to call twice."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.path.unlink(missing_ok=True)


def ask(workdir: Path, action: str, leaf: str, timeout: float = RELINK_TIMEOUT + 30) -> str:
    """Ask the stack running in ``workdir`` to ``cut`` or ``relink`` ``leaf``: what it did; ``RuntimeError``
    saying why when it did not (or when no stack runs there).

    :param workdir: the stack's work directory (``.stack``).
    :param action: ``cut`` or ``relink``.
    :param leaf: the leaf's domain (``leaf-a``...).
    :param timeout: seconds to wait for the answer. Default: a relink's timeout and 30 s.
    """
    path = Path(workdir) / CONTROL_SOCKET
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError as err:
            raise RuntimeError(f"no stack answers at {path} ({err.strerror}): is `make stack` running?") from None
        sock.sendall(json.dumps({"do": action, "leaf": leaf}).encode() + b"\n")
        with sock.makefile("rb") as answers:
            answer = json.loads(answers.readline() or b"{}")
    if not answer.get("ok"):
        raise RuntimeError(answer.get("error") or "the stack closed the socket without an answer")
    return answer["said"]


def main(argv: list[str] | None = None) -> int:
    """``make stack-cut LEAF=<name>`` / ``make stack-relink LEAF=<name>``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=ACTIONS, help="cut the leaf off the hub, or link it again")
    parser.add_argument("leaf", help="the leaf's domain, e.g. leaf-a")
    parser.add_argument("--workdir", default=".stack", help="the running stack's work directory (default: .stack)")
    args = parser.parse_args(argv)
    try:
        print(ask(Path(args.workdir), args.action, args.leaf))
    except RuntimeError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
