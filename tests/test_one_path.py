"""One home for each reaction, read from the package's syntax trees: the one resend rule (``core/resend.py``),
header names and settles declared once (``core/protocol.py``), the server's pull statuses read in one place and
every pull request sent by the one pull subscription (``core/read/pull.py``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import airflow_provider_jetstream
from tests.support.syntax import parse_file

PACKAGE = Path(airflow_provider_jetstream.__file__).parent
RESEND = "core/resend.py"
PROTOCOL = "core/protocol.py"
RESEND_MODULE = "airflow_provider_jetstream.core.resend"
PROTOCOL_MODULE = "airflow_provider_jetstream.core.protocol"
#: The harness that starts nats-server processes for users' tests: its loops poll the processes it started
#: until they are ready, they send nothing again.
HARNESS = "testing/"
#: The one reading of the server's statuses to a pull, the names it reads them with, and the pull request's subject.
STATUS_HANDLER = "core/read/pull.py"
STATUS_NAMES = {"pull_status", "HEARTBEAT", "REQUEST_DONE", "RETRY_AFTER", "RESUME", "FATAL"}
PULL_REQUEST = "CONSUMER.MSG.NEXT"
#: What a consumer is told of a delivered message (its settles).
SETTLE_BODY = re.compile(rb"^(\+ACK|-NAK|\+TERM|\+WPI|\+NXT)")
#: A constant's name that says it paces or repeats a send.
RESEND_NAME = re.compile(r"RESEND|RETR(Y|IES)|BACKOFF|PAUSE|FAILOVER|AGAIN")
#: A string that is a header name (``Nats-Msg-Id``, ``KV-Operation``, ``Airflow-DLQ-Reason``...).
HEADER_NAME = re.compile(r"(Nats|KV|Airflow-DLQ)-[A-Za-z]+(-[A-Za-z]+)*")


def modules() -> Iterator[tuple[str, ast.Module]]:
    """Each module of the package (but the harness) as ``(path under the package, syntax tree)``."""
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if not relative.startswith(HARNESS):
            yield relative, parse_file(path)


def public_names(relative: str) -> set[str]:
    """The names a module of the package defines at its top level (functions, classes, constants)."""
    names = set()
    for node in parse_file(PACKAGE / relative).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return {name for name in names if not name.startswith("_") and name not in ("T", "log")}


def own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under ``node``, without entering the functions and classes defined there."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield child
            yield from own_nodes(child)


def called(node: ast.AST) -> str | None:
    """The last name of what a call calls (``sleep`` of ``asyncio.sleep(...)``), None when it is no call."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def pauses(node: ast.AST) -> bool:
    """A call of ``sleep`` (``asyncio.sleep``, ``time.sleep``) other than ``sleep(0)``, which only lets other
    tasks run."""
    if called(node) != "sleep":
        return False
    arguments = node.args  # type: ignore[attr-defined]
    return not (arguments and isinstance(arguments[0], ast.Constant) and arguments[0].value == 0)


def catches(node: ast.AST) -> bool:
    """An ``except`` or a ``contextlib.suppress(...)``: an error caught and the code going on."""
    if isinstance(node, ast.Try) and node.handlers:
        return True
    return isinstance(node, (ast.With, ast.AsyncWith)) and any(called(i.context_expr) == "suppress" for i in node.items)


def numeric(node: ast.AST | None) -> bool:
    """A number, or arithmetic of numbers (``15 * 60.0``)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return numeric(node.left) and numeric(node.right)
    return isinstance(node, ast.UnaryOp) and numeric(node.operand)


def imports_of(tree: ast.Module, names: set[str], home: str) -> list[str]:
    """The ``names`` a module imports from anywhere but their ``home`` module."""
    return [
        f"imports {alias.name} from {node.module}, not from {home}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module != home
        for alias in node.names
        if alias.name in names and node.module.startswith("airflow_provider_jetstream")
    ]


def resend_offences(tree: ast.Module) -> list[str]:
    """What a module does that only the resend rule may: make a ``Backoff``, keep a number named for a
    resend, run a loop that catches an error and sleeps before trying again, or import the rule's names
    from anywhere but the rule."""
    found = []
    for node in ast.walk(tree):
        if called(node) == "Backoff":
            found.append(f"line {node.lineno}: makes a Backoff")
        if isinstance(node, (ast.Module, ast.ClassDef)):
            for statement in node.body:
                if isinstance(statement, (ast.Assign, ast.AnnAssign)) and numeric(statement.value):
                    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                    for target in targets:
                        if isinstance(target, ast.Name) and RESEND_NAME.search(target.id.upper()):
                            found.append(f"line {statement.lineno}: keeps a resend constant {target.id}")
        if isinstance(node, (ast.While, ast.For, ast.AsyncFor)):
            inner = list(own_nodes(node))
            if any(pauses(n) for n in inner) and any(catches(n) for n in inner):
                found.append(f"line {node.lineno}: runs a loop that catches an error and sleeps before trying again")
    return found + imports_of(tree, public_names(RESEND), RESEND_MODULE)


def header_offences(tree: ast.Module) -> list[str]:
    """Header names a module spells out, or imports from anywhere but the protocol module."""
    found = [
        f"line {node.lineno}: spells out the header name {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and HEADER_NAME.fullmatch(node.value)
    ]
    headers = {name for name in public_names(PROTOCOL) if name.endswith("_HEADER") or name == "KV_OPERATION"}
    return found + imports_of(tree, headers, PROTOCOL_MODULE)


def settle_offences(tree: ast.Module) -> list[str]:
    """Settles spelled out (``+ACK``, ``-NAK``...) instead of taken from the protocol module."""
    return [
        f"line {node.lineno}: spells out the settle {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, bytes) and SETTLE_BODY.match(node.value)
    ]


def offenders(rule: str) -> dict[str, list[str]]:
    check = {"resend": resend_offences, "headers": header_offences, "settles": settle_offences}[rule]
    home = RESEND if rule == "resend" else PROTOCOL
    return {relative: found for relative, tree in modules() if relative != home and (found := check(tree))}


def test_only_the_resend_rule_decides_what_is_sent_again_and_after_what_pause() -> None:
    """No module but ``core/resend.py`` makes a ``Backoff``, keeps a retry constant or runs a loop of "try,
    pause, try again"; every caller imports the rule from there (the publish engine and its fast-ingest and
    atomic modes, the API's requests, KV and object writes, the Spark checkpoint)."""
    assert offenders("resend") == {}


def test_header_names_are_declared_once_in_the_protocol_module() -> None:
    """Every header name the package writes or reads is a constant of ``core/protocol.py``, imported from there."""
    assert offenders("headers") == {}


def test_settles_are_spelled_only_in_the_protocol_module() -> None:
    assert offenders("settles") == {}


def test_only_the_pull_subscription_reads_the_servers_statuses_and_sends_pull_requests() -> None:
    """Every reader (exact ranges, ordered reads, fetch and consume, the durable puller, the watches) acts on what
    the pull subscription read; none imports the statuses' outcomes, and none spells a pull request's subject
    (the test topology's account exports name it: configuration, not a reader)."""
    readers, spelled = set(), set()
    for relative, tree in modules():
        for node in ast.walk(tree):
            imported = {alias.name for alias in node.names} if isinstance(node, ast.ImportFrom) else set()
            if getattr(node, "module", None) == PROTOCOL_MODULE and STATUS_NAMES & imported:
                readers.add(relative)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and PULL_REQUEST in node.value:
                spelled.add(relative)
    assert readers == {STATUS_HANDLER}
    assert spelled == {STATUS_HANDLER}


def test_the_checks_find_what_they_look_for() -> None:
    """Each check, on a module written to break its rule."""
    module = ast.parse(
        "import asyncio\n"
        "from airflow_provider_jetstream.core.api import retry_failover\n"
        "from airflow_provider_jetstream.core.manage.buckets import KV_OPERATION\n"
        "RETRY_PAUSE = 0.5\n"
        "HEADERS = {'Nats-Msg-Id': 'x'}\n"
        "async def ask(call):\n"
        "    pause = Backoff(first=0.1)\n"
        "    while True:\n"
        "        try:\n"
        "            return await call()\n"
        "        except OSError:\n"
        "            await asyncio.sleep(pause.next())\n"
    )
    assert sorted(why.split(": ", 1)[-1] for why in resend_offences(module)) == [
        "imports retry_failover from airflow_provider_jetstream.core.api, not from " + RESEND_MODULE,
        "keeps a resend constant RETRY_PAUSE",
        "makes a Backoff",
        "runs a loop that catches an error and sleeps before trying again",
    ]
    assert sorted(why.split(": ", 1)[-1] for why in header_offences(module)) == [
        "imports KV_OPERATION from airflow_provider_jetstream.core.manage.buckets, not from " + PROTOCOL_MODULE,
        "spells out the header name 'Nats-Msg-Id'",
    ]
