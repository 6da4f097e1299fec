"""`make demo` leaves no nats-server running when it is interrupted (Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def servers_under(directory: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if "nats-server" in cmdline and str(directory) in cmdline:
            found.append(process)
    return found


def test_ctrl_c_stops_every_server(tmp_path: Path) -> None:
    env = {**os.environ, "JETSTREAM_DEMO_DIR": str(tmp_path), "DEMO_READINGS_PER_LEAF": "2000000"}
    demo = subprocess.Popen([sys.executable, str(REPO / "demo" / "run.py")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        assert "starting a hub" in demo.stdout.readline()
        deadline = time.monotonic() + 60
        while len(servers_under(tmp_path)) < 3:  # hub, leaf-a, leaf-b: now publishing edge data
            assert time.monotonic() < deadline and demo.poll() is None, "the demo's servers did not start"
            time.sleep(0.2)
        demo.send_signal(signal.SIGINT)
        assert demo.wait(30) == 130
        assert "interrupted; servers stopped" in demo.stdout.read()
    finally:
        if demo.poll() is None:
            demo.kill()
    assert servers_under(tmp_path) == []
