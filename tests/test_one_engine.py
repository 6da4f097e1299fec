"""One consumer engine: the server's pull statuses are read in one place, settles are spelled in one place, and
every reader pulls through the one pull subscription (read from the package's source, no server)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import airflow_provider_jetstream

PACKAGE = Path(airflow_provider_jetstream.__file__).parent
#: The one reading of the server's statuses to a pull.
STATUS_HANDLER = "core/read/pull.py"
#: The outcomes a status is read as, and the function that reads it.
STATUS_NAMES = {"pull_status", "HEARTBEAT", "REQUEST_DONE", "RETRY_AFTER", "RESUME", "FATAL"}
#: The wire protocol as data: the only module that spells a settle or a header name.
PROTOCOL = "core/protocol.py"
SETTLE_BODY = re.compile(rb"^(\+ACK|-NAK|\+TERM|\+WPI|\+NXT)")
HEADER_NAME = re.compile(r"^(Nats|KV|Airflow-DLQ)-[A-Za-z-]+$")


def modules() -> dict[str, ast.Module]:
    return {str(path.relative_to(PACKAGE)): ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def test_only_the_pull_subscription_reads_the_servers_statuses() -> None:
    readers = {
        name
        for name, tree in modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").endswith("core.protocol")
        and STATUS_NAMES & {alias.name for alias in node.names}
    }
    assert readers == {STATUS_HANDLER}


def test_every_reader_pulls_through_the_one_pull_subscription() -> None:
    """A pull request (``CONSUMER.MSG.NEXT``) is spelled by the subscription only (the test topology's account
    exports name it too: configuration, not a reader)."""
    spelled = {
        name
        for name, tree in modules().items()
        if not name.startswith("testing/")
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "CONSUMER.MSG.NEXT" in node.value
    }
    assert spelled <= {STATUS_HANDLER}, spelled
    # What drove its own pull loop before: each now takes the subscription's state.
    for module in ("core/read/exact.py", "core/read/ordered.py", "core/consume/fetch.py", "core/consume/durable.py",
                   "core/consume/watch.py"):  # fmt: skip
        source = (PACKAGE / module).read_text()
        assert "PullSubscription" in source or "OrderedConsumer" in source, module


def test_settles_and_header_names_are_spelled_only_in_the_protocol_module() -> None:
    offenders = []
    for name, tree in modules().items():
        if name == PROTOCOL:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes) and SETTLE_BODY.match(node.value):
                offenders.append(f"{name}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and HEADER_NAME.match(node.value):
                offenders.append(f"{name}:{node.lineno} {node.value!r}")
    assert offenders == []
