"""Free loopback ports for the servers of a test topology, never handed out twice (also across the
parallel processes that take a share each, :func:`share_ports`)."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

from airflow_provider_jetstream.core.errors import NatsServerError

LOOPBACK = "127.0.0.1"

_handed_out_ports: set[int] = set()
#: ``(index, count)``: this process takes every ``count``-th port, starting at offset ``index``.
_port_share = (0, 1)


def share_ports(index: int, count: int) -> None:
    """Several processes starting servers on one machine at once (parallel test workers): process
    ``index`` of ``count`` hands out only its own share of the ports, so no two pick the same one
    between checking it is free and the server listening on it."""
    if not 0 <= index < count:
        raise ValueError(f"share_ports: index {index} is not within 0..{count - 1}")
    global _port_share
    _port_share = (index, count)


def _first_ephemeral_port() -> int:
    """Where the range the kernel takes outgoing connections' local ports from starts (Linux's
    setting, else IANA's 49152)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 49152


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now, and that no client will take.

    Ports are picked below the kernel's ephemeral range: a port the kernel hands out (``bind`` to
    port 0) can also become the local port of any outgoing connection, such as a leaf's link to
    its hub, before the server that was meant to listen on it starts. No port is handed out twice
    by one process, and none outside its share (:func:`share_ports`).
    """
    low = _first_ephemeral_port()
    index, count = _port_share
    start = max(1024, low - 12_000)
    candidates = range(start + (index - start) % count, low, count)
    for _ in range(200):
        port = random.choice(candidates) if len(candidates) > 100 or count > 1 else 0
        if port in _handed_out_ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
            port = sock.getsockname()[1]
        _handed_out_ports.add(port)
        return port
    raise NatsServerError(f"no free TCP port on {LOOPBACK} below {low}")
