"""``make stack-cut LEAF=<name>`` and ``make stack-relink LEAF=<name>`` against a running ``make stack``.

The stack runs as ``make stack`` runs it (``python -m local_stack.stack``: PostgreSQL, Airflow, Spark and NATS,
real processes); the make targets talk to it through its control socket. A cut leaf is seen from the hub as a
domain that does not answer, and keeps storing what is published to it; once relinked, the hub's copy of the
leaf's stream catches up with what was published during the cut. Selected with ``-m deployment``.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamDomainUnavailableError
from local_stack.control import CONTROL_SOCKET
from tests.support.management import uid
from tests.support.waiting import scaled, wait_until

REPO = Path(__file__).resolve().parents[2]
LEAF = "leaf-a"
READINGS = 20

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(900)]


class RunningStack:
    """``python -m local_stack.stack`` in a process group of its own, its output collected as it comes."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "local_stack.stack", "--dags-folder", "dags", "--workdir", str(workdir),
             "--readings", str(READINGS)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def ready(self) -> bool:
        assert self.process.poll() is None, "\n".join(self.lines[-30:])
        return any(line.startswith("ready in") for line in self.lines)

    def url(self, name: str) -> str:
        """The NATS URL the stack printed for ``hub`` or a leaf."""
        for line in self.lines:
            match = re.match(rf"\s+NATS {re.escape(name)}\s+(nats://\S+)", line)
            if match:
                return match.group(1)
        raise AssertionError(f"the stack printed no URL for {name}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)  # what Ctrl-C does
            try:
                self.process.wait(timeout=scaled(120))
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    running = RunningStack(tmp_path_factory.mktemp("stack") / "stack")
    try:
        wait_until(running.ready, bool, timeout=600, what="make stack ready")
        yield running
    finally:
        running.stop()
    assert any("stopped" in line for line in running.lines), "\n".join(running.lines[-30:])
    assert not (running.workdir / CONTROL_SOCKET).exists()


def make(stack: RunningStack, target: str, leaf: str | None) -> subprocess.CompletedProcess[str]:
    """``make <target> LEAF=<leaf>``, as a user types it, against this stack's work directory."""
    args = [
        "make",
        "--no-print-directory",
        target,
        f"STACK_DIR={stack.workdir}",
        f"VENV={Path(sys.executable).parent.parent}",
    ]
    if leaf is not None:
        args.append(f"LEAF={leaf}")
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=scaled(180))


def ask(url: str, prefix: str, suffix: str) -> dict:
    """One JetStream API request at ``prefix`` on the server of ``url``."""

    async def request() -> dict:
        nc = await nats.connect(url)  # the URL the stack printed carries the user
        try:
            return await JetStreamApi(nc, prefix, timeout=5, failover=0).request(suffix)
        finally:
            await nc.close()

    return asyncio.run(request())


def stored(url: str, prefix: str, stream: str) -> int:
    return ask(url, prefix, f"STREAM.INFO.{stream}")["state"]["messages"]


def leaf_answers(url: str) -> bool:
    """Whether the leaf's JetStream answers through the hub."""
    try:
        ask(url, f"$JS.{LEAF}.API", "INFO")
    except JetStreamDomainUnavailableError:
        return False
    return True


def test_a_leaf_is_cut_off_and_linked_again_while_the_stack_runs(stack: RunningStack) -> None:
    hub, leaf = stack.url("hub"), stack.url(LEAF)
    copy = uid("stackcopy")
    asyncio.run(_create_copy(hub, copy))
    held = stored(leaf, "$JS.API", "readings")
    wait_until(lambda: stored(hub, "$JS.hub.API", copy), lambda n: n == held, what="the copy caught up")

    cut = make(stack, "stack-cut", LEAF)
    assert cut.returncode == 0, cut.stderr
    assert f"{LEAF} cut off the hub" in cut.stdout
    wait_until(lambda: leaf_answers(hub), lambda answers: not answers, what="the leaf's domain away from the hub")

    asyncio.run(_publish(leaf, 5))  # stored on the leaf during the cut
    assert stored(leaf, "$JS.API", "readings") == held + 5
    assert stored(hub, "$JS.hub.API", copy) == held

    relink = make(stack, "stack-relink", LEAF)
    assert relink.returncode == 0, relink.stderr
    assert f"{LEAF} linked to the hub again" in relink.stdout
    assert leaf_answers(hub)
    wait_until(lambda: stored(hub, "$JS.hub.API", copy), lambda n: n == held + 5, what="replication resumed")


def test_a_leaf_the_stack_does_not_have_is_refused_naming_its_leaves(stack: RunningStack) -> None:
    wrong = make(stack, "stack-cut", "leaf-z")
    assert wrong.returncode != 0
    assert "LEAF='leaf-z' is not allowed: one of leaf-a, leaf-b" in wrong.stderr
    missing = make(stack, "stack-relink", None)
    assert missing.returncode != 0 and "LEAF=<name> is required" in missing.stderr
    assert leaf_answers(stack.url("hub"))  # nothing was cut


async def _create_copy(hub: str, copy: str) -> None:
    nc = await nats.connect(hub)
    try:
        config = {"name": copy, "sources": [{"name": "readings", "external": {"api": f"$JS.{LEAF}.API"}}]}
        await JetStreamApi(nc, "$JS.hub.API").request(f"STREAM.CREATE.{copy}", config)
    finally:
        await nc.close()


async def _publish(leaf: str, count: int) -> None:
    nc = await nats.connect(leaf)
    try:
        js = nc.jetstream()
        for i in range(count):
            await js.publish(f"sensors.{LEAF}.temp", b'{"value": %d}' % i)
    finally:
        await nc.close()
