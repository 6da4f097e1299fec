"""One vocabulary: every public signature speaks docs/glossary.md, and every retired name is refused.

Reads every public signature: the role hooks' public methods, every operator, sensor and trigger
``__init__`` (with its ``arguments``), the ``Args`` declarations of ``core/signatures/``, the Spark options
(camelCase, read as snake_case), the packaged job's flags (kebab-case, read as snake_case) and the typed
options' fields. Fails on a name the glossary does not define, on a retired name still taken where it was
retired (``core/arguments/retired.py``), on a name the glossary defines twice or two names given one meaning;
checks the glossary's and the CHANGELOG's tables of retired names against the table in code; and shows, on
each kind of surface, an old name refused with its replacement in the message.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.arguments.options import Options
from airflow_provider_jetstream.core.arguments.retired import CAMEL, FLAG, RETIRED, SNAKE, snake, spelled
from airflow_provider_jetstream.core.errors import SpecError, SpecErrors

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "airflow_provider_jetstream"
GLOSSARY = ROOT / "docs" / "glossary.md"
CHANGELOG = ROOT / "CHANGELOG.md"
RETIRED_SECTION = "Retired names"
#: Spark's own mechanism, not a word of ours: ``spark.read.format("jetstream").load("NAME")`` sets ``path``.
SPARK_OWN = {"path"}

_CODE = re.compile(r"`([^`]+)`")


# -- the glossary page, read mechanically ------------------------------------------------------------


def _sections(text: str) -> dict[str, list[list[str]]]:
    """Each ``##`` section's table rows (cells), the header and separator rows left out."""
    sections: dict[str, list[list[str]]] = {}
    current = None
    for line in (raw.strip() for raw in text.splitlines()):
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None and line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if set("".join(cells)) <= set("-: ") or cells[0] in ("name", "old"):
                continue
            sections[current].append(cells)
    return sections


def _without_notes(cell: str) -> str:
    """A cell without its words in parentheses (notes, even with names in backticks)."""
    while "(" in cell:
        cell = re.sub(r"\([^()]*\)", "", cell)
    return cell


def glossary() -> dict[str, tuple[str, str]]:
    """Every defined name -> (its section, its meaning); refuses a row that is not one name alone."""
    defined: dict[str, tuple[str, str]] = {}
    for section, rows in _sections(GLOSSARY.read_text()).items():
        if section == RETIRED_SECTION:
            continue
        for cells in rows:
            names = _CODE.findall(cells[0])
            assert len(names) == 1 and cells[0] == f"`{names[0]}`", f"{section}: one name per row: {cells[0]}"
            assert names[0] not in defined, f"{names[0]!r} is defined twice ({defined[names[0]][0]}, {section})"
            defined[names[0]] = (section, cells[1])
    return defined


def retired_pairs(rows: list[list[str]]) -> set[tuple[str, str | None]]:
    """``(old, new)`` pairs of a retired-names table, in snake_case (``startingSequence`` is
    ``starting_sequence``); new None: removed. Several olds to one new, one old to several news, or pairs
    in order."""
    pairs: set[tuple[str, str | None]] = set()
    for old_cell, new_cell in rows:
        olds = list(dict.fromkeys(snake(n) for n in _CODE.findall(_without_notes(old_cell))))
        news = list(dict.fromkeys(snake(n) for n in _CODE.findall(_without_notes(new_cell))))
        if not news:
            pairs.update((old, None) for old in olds)
        elif len(olds) == 1 or len(news) == 1:
            pairs.update((old, new) for old in olds for new in news)
        else:
            assert len(olds) == len(news), f"retired names: pair each old with a new: {old_cell} | {new_cell}"
            pairs.update(zip(olds, news, strict=True))
    return pairs


def code_pairs() -> set[tuple[str, str | None]]:
    return {(entry.old, entry.new) for entry in RETIRED}


# -- every public signature -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Surface:
    """One public signature: where (``surface`` as the table's ``where`` patterns name it), its names (in
    ``form``), and whether it is a thing a caller calls (retired names must be refused there)."""

    kind: str
    surface: str
    names: tuple[str, ...]
    form: str = SNAKE
    called: bool = True

    def __str__(self) -> str:
        return f"{self.kind} {self.surface}"


def _parameters(function: Any) -> list[str]:
    return [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _modules(package: str) -> list[Any]:
    pkg = importlib.import_module(package)
    return [importlib.import_module(f"{package}.{info.name}") for info in pkgutil.iter_modules(pkg.__path__)]


def _classes(package: str, base: type) -> list[type]:
    found = {}
    for module in _modules(package):
        for name, cls in vars(module).items():
            if isinstance(cls, type) and issubclass(cls, base) and cls.__module__ == module.__name__:
                found[name] = cls
    return [found[name] for name in sorted(found)]


def _ours(cls: type) -> list[type]:
    return [c for c in cls.__mro__ if c.__module__.startswith(PACKAGE)]


def surfaces() -> list[Surface]:
    from airflow.sdk import BaseOperator
    from airflow.triggers.base import BaseTrigger

    from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
    from airflow_provider_jetstream.spark.job_args import COMMAND_LINE
    from airflow_provider_jetstream.spark.options import READ, READ_STREAM, WRITE

    out: list[Surface] = []
    for cls in _classes(f"{PACKAGE}.hooks", JetStreamBaseHook):
        for name, method in vars(cls).items():  # each method where it is defined (JetStreamHook adds none)
            if (name.startswith("_") and name != "__init__") or not callable(method):
                continue
            out.append(Surface("hook", f"{cls.__name__}.{name}", tuple(_parameters(method))))
    for kind, package in (("operator", "operators"), ("sensor", "sensors"), ("trigger", "triggers")):
        base = BaseTrigger if kind == "trigger" else BaseOperator
        for cls in _classes(f"{PACKAGE}.{package}", base):
            names = {n for c in _ours(cls) if "__init__" in vars(c) for n in _parameters(c.__init__)}
            arguments = getattr(cls, "arguments", None)
            names |= set(arguments.args) if isinstance(arguments, Args) else set()
            out.append(Surface(kind, cls.__name__, tuple(sorted(names))))
    for module in _modules(f"{PACKAGE}.core.signatures"):
        for name, value in vars(module).items():
            if isinstance(value, Args):
                out.append(Surface("signature", f"{module.__name__}.{name}", tuple(value.args), called=False))
    for what, signature in (("read", READ), ("read", READ_STREAM), ("write", WRITE)):
        names = tuple(n for n in signature.args if n not in SPARK_OWN)
        out.append(Surface("spark", f"spark {what}", names, CAMEL))
    out.append(Surface("job", "stream_to_parquet", tuple(COMMAND_LINE.args), FLAG))
    for cls in _option_classes():
        out.append(Surface("options", cls.__name__, tuple(cls.arguments.args)))
    return out


def _option_classes() -> list[type[Options]]:
    import airflow_provider_jetstream.core.signatures.options
    import airflow_provider_jetstream.spark.job_args  # noqa: F401

    found, todo = [], list(Options.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


SURFACES = surfaces()


def _snake(name: str, form: str) -> str:
    return snake(name) if form != SNAKE else name


# -- the rules ----------------------------------------------------------------------------------------------


def test_the_glossary_defines_each_name_once_one_name_per_meaning() -> None:
    defined = glossary()
    meanings: dict[str, str] = {}
    for name, (_, meaning) in defined.items():
        assert meaning.lower() not in meanings, f"{name!r} and {meanings[meaning.lower()]!r} share a meaning"
        meanings[meaning.lower()] = name
    spellings = {camel: name for name in defined for camel in [spelled(name, CAMEL).lower()]}
    assert len(spellings) == len(defined), "two names spelled alike in camelCase"


@pytest.mark.parametrize("surface", SURFACES, ids=str)
def test_every_public_name_is_defined_by_the_glossary(surface: Surface) -> None:
    defined = glossary()
    undefined = [name for name in surface.names if _snake(name, surface.form) not in defined]
    assert undefined == [], f"{surface}: names docs/glossary.md does not define: {undefined}"


@pytest.mark.parametrize("surface", [s for s in SURFACES if s.called], ids=str)
def test_no_retired_name_is_still_taken_where_it_was_retired(surface: Surface) -> None:
    taken = set(surface.names)
    still = [
        spelled(entry.old, surface.form)
        for entry in RETIRED
        if spelled(entry.old, surface.form) in taken and entry.applies(surface.surface, taken, surface.form)
    ]
    assert still == [], f"{surface}: retired names it still takes: {still}"


def test_a_retired_name_that_names_something_else_says_where_it_was_retired() -> None:
    defined = glossary()
    unscoped = [entry.old for entry in RETIRED if entry.old in defined and not entry.where and not entry.output]
    assert unscoped == [], f"still glossary names elsewhere: give their entries 'where': {unscoped}"
    for entry in RETIRED:
        assert entry.new is None or entry.new in defined, f"{entry.old} -> {entry.new}: not a glossary name"


def test_the_glossary_lists_the_retired_names_of_the_code() -> None:
    rows = _sections(GLOSSARY.read_text())[RETIRED_SECTION]
    assert retired_pairs(rows) == code_pairs()


def test_the_changelog_lists_the_retired_names_of_the_code() -> None:
    unreleased = CHANGELOG.read_text().split("\n## ")[1]
    assert unreleased.startswith("Unreleased")
    rows = [r for rows in _sections("## x\n" + unreleased).values() for r in rows if len(r) == 2]
    table = [r for r in rows if _CODE.search(r[0])]
    old_new = [r for r in table if not r[1].startswith("`options=")]
    assert retired_pairs(old_new) == code_pairs()


def test_the_changelog_lists_every_argument_moved_into_options() -> None:
    """Its "moved into options" table: ``| `max_in_flight` | `options=PublishOptions(...)` |`` rows."""
    unreleased = CHANGELOG.read_text().split("\n## ")[1]
    listed = set(re.findall(r"\| `(\w+)`[^|]*\| `options=(\w+)\(", unreleased))
    moved = {(name, cls.__name__) for cls in _option_classes() for name in cls.arguments.args}
    inherited = {(n, c.__name__) for c in _option_classes() for n in c.arguments.args if _inherited(c, n)}
    assert listed >= moved - inherited


def _inherited(cls: type[Options], name: str) -> bool:
    return any(name in getattr(base, "arguments", Args("", {})).args for base in cls.__mro__[1:])


# -- old names refused with the new one, on each kind of surface ------------------------------------------


def _refusal(call: Any) -> str:
    with pytest.raises((SpecError, SpecErrors)) as refused:
        call()
    return str(refused.value)


def test_a_hook_method_refuses_an_old_name_naming_the_new_one() -> None:
    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
    from airflow_provider_jetstream.hooks.streams import JetStreamStreamsHook

    hook = JetStreamStreamsHook("unused")
    message = _refusal(lambda: hook.purge_stream(name="orders", up_to_sequence=5, timeout=3))
    assert "name='orders' is not allowed: renamed stream" in message
    assert "up_to_sequence=5 is not allowed: renamed up_to_seq" in message
    assert "timeout=3 is not allowed: renamed request_timeout" in message
    combined = JetStreamHook("unused")
    assert "renamed consumer" in _refusal(lambda: combined.delete_consumer("orders", name="dur"))
    assert "renamed object_name" in _refusal(lambda: combined.object_info("files", name="a.csv"))
    message = _refusal(lambda: combined.check_key("config", "k", min_revision=3))
    assert "min_revision=3 is not allowed: renamed after_revision (strictly above" in message


def test_an_operator_refuses_an_old_name_when_the_dag_is_parsed() -> None:
    from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
    from airflow_provider_jetstream.operators.streams import JetStreamCreateMirrorOperator

    message = _refusal(
        lambda: JetStreamCreateMirrorOperator(task_id="m", name="copy", source_stream="orders", source_domain="leaf")
    )
    assert "name='copy' is not allowed: renamed stream" in message
    assert "source_stream='orders' is not allowed: renamed origin" in message
    assert "source_domain='leaf' is not allowed: renamed origin_domain" in message
    message = _refusal(
        lambda: JetStreamPublishOperator(task_id="p", subject="a", messages_callable=list, max_in_flight=10)
    )
    assert "messages_callable=<class 'list'> is not allowed: renamed messages_function" in message
    assert "max_in_flight=10 is not allowed: moved into options=PublishOptions(max_in_flight=10)" in message


def test_the_spark_operator_refuses_old_names_and_the_spark_connection_id() -> None:
    pytest.importorskip("airflow.providers.apache.spark")
    from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitOperator

    message = _refusal(
        lambda: JetStreamSparkSubmitOperator(
            task_id="s", stream="a", output_path="/x", checkpoint_bucket="c", conn_id="spark", end_sequence=9
        )
    )
    assert "conn_id='spark' is not allowed: renamed spark_conn_id" in message
    assert "end_sequence=9 is not allowed: renamed end_seq" in message
    # SparkSubmitOperator's own arguments go on as they are (its ``name`` is the Spark application's).
    operator = JetStreamSparkSubmitOperator(
        task_id="s", stream="a", output_path="/x", checkpoint_bucket="c", name="copy-orders"
    )
    assert operator.name == "copy-orders"


def test_a_sensor_refuses_an_old_name_when_the_dag_is_parsed() -> None:
    from airflow_provider_jetstream.sensors.consumer_lag import JetStreamConsumerLagSensor
    from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor

    message = _refusal(
        lambda: JetStreamConsumerLagSensor(task_id="c", stream="s", consumer="d", max_pending=0, max_ack_pending=1)
    )
    assert "max_pending=0 is not allowed: renamed max_unprocessed" in message
    assert "max_ack_pending=1 is not allowed: renamed max_outstanding_acks" in message
    message = _refusal(lambda: JetStreamReplicationLagSensor(task_id="r", stream="s", sources=["a"], max_lag=2))
    assert "sources=['a'] is not allowed: renamed origins" in message
    assert "max_lag=2 is not allowed: moved into options=ReplicationOptions(max_lag=2)" in message


def test_a_trigger_refuses_an_old_name_in_its_kwargs() -> None:
    from airflow_provider_jetstream.triggers.kv import JetStreamKeyValueTrigger

    message = _refusal(
        lambda: JetStreamKeyValueTrigger(
            jetstream_conn_id="c", bucket="b", key="k", min_revision=2, rewatch_interval=30
        )
    )
    assert "min_revision=2 is not allowed: renamed after_revision" in message
    assert "rewatch_interval=30 is not allowed: renamed poll_interval" in message


def test_spark_options_refuse_an_old_name_in_any_case() -> None:
    from airflow_provider_jetstream.spark.options import ReadOptions, WriteOptions

    options = {"stream": "orders", "servers": "nats://127.0.0.1:4222"}
    message = _refusal(lambda: ReadOptions.parse({**options, "startingsequence": "5", "filterSubject": "a"}))
    assert "startingsequence='5' is not allowed: renamed startSeq" in message
    assert "filterSubject='a' is not allowed: renamed filterSubjects" in message
    written = {"servers": "nats://127.0.0.1:4222", "subject": "a", "stream": "orders"}
    assert "renamed expectedStream" in _refusal(lambda: WriteOptions.parse(written, ["data"]))


def test_the_packaged_job_refuses_an_old_flag() -> None:
    from airflow_provider_jetstream.spark.jobs.stream_to_parquet import parse_args

    message = _refusal(
        lambda: parse_args(["--stream", "a", "--output=/x", "--checkpoint-bucket", "c", "--starting-sequence", "3"])
    )
    assert "--output='/x' is not allowed: renamed --output-path" in message
    assert "--starting-sequence='3' is not allowed: renamed --start-seq" in message


def test_typed_options_are_a_class_or_a_dict_each_field_checked_at_its_place() -> None:
    from airflow_provider_jetstream.core.signatures.options import PublishOptions
    from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator

    as_dict = JetStreamPublishOperator(task_id="d", subject="a", messages=["m"], options={"max_in_flight": 10})
    as_class = JetStreamPublishOperator(
        task_id="c", subject="a", messages=["m"], options=PublishOptions(max_in_flight=10)
    )
    assert as_dict.checked_arguments()["options"] == as_class.checked_arguments()["options"]
    message = _refusal(
        lambda: JetStreamPublishOperator(task_id="p", subject="a", messages=["m"], options={"max_in_flight": 0})
    )
    assert "options.max_in_flight=0 is not allowed" in message
