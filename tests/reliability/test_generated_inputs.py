"""Attacks generated, not listed (issue #24, section 4): every argument of every entry point, generated values.

The entry points and their arguments are enumerated from their declarations (:mod:`tests.support.generated`):
operators and sensors (each value as given, and as a template rendering to it, text and native),
hook methods, trigger kwargs, connection fields, Spark options and the packaged job's command line.
Each argument gets empty, None, whitespace, NaN, infinities, huge and negative numbers, floats, booleans,
unicode, control characters, 100,000 characters, reserved and wildcard subjects, and Hypothesis-generated
values. Against a hub + leaf of this module's own, each call must either be refused before anything reaches
a server (a ``JetStreamConfigError`` naming the argument; never a raw ``TypeError``, ``ValueError``...,
never a hang), or change exactly what it was asked to: every other stream, consumer and bucket of both
domains is compared before and after.

The run is fixed (derandomized) and short; ``make fuzz`` runs the same tests with many more examples
(``HYPOTHESIS_PROFILE=fuzz``). :data:`FOUND` holds the failures the harness found, one case each.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_jetstream.testing.servers import USERS
from tests.support.fuzzworld import FuzzWorld
from tests.support.generated import (
    CONN_ID,
    FIXED,
    LITERAL,
    NATIVE,
    RENDERED,
    RESERVED,
    WILDCARDS,
    Entry,
    attempt,
    describe,
    entries,
)

_COMMON = {
    "deadline": None,
    "database": None,
    "suppress_health_check": list(HealthCheck),
}
settings.register_profile("ci", max_examples=6, derandomize=True, **_COMMON)
settings.register_profile("fuzz", max_examples=300, **_COMMON)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

ENTRIES = entries()
CASES = [(entry, arg) for entry in ENTRIES for arg in entry.args]

#: Generated values: the fixed attacks, and values Hypothesis makes (text with any character, numbers,
#: reserved and wildcard subjects with a generated tail).
VALUES = st.one_of(
    st.sampled_from(FIXED),
    st.text(max_size=40),
    st.integers(),
    st.floats(),
    st.sampled_from(RESERVED + WILDCARDS).flatmap(lambda s: st.text(max_size=8).map(lambda t: s + t)),
    st.lists(st.one_of(st.none(), st.text(max_size=10), st.integers()), max_size=3),
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzWorld]:
    """This module's hub + leaf, seeded; connection ``fz_conn`` reaches the hub as user ``acc``."""
    import json

    fuzz = FuzzWorld(tmp_path_factory.mktemp("generated")).start()
    user, password = USERS["ACC"]
    variable = f"AIRFLOW_CONN_{CONN_ID.upper()}"
    os.environ[variable] = json.dumps(
        {
            "conn_type": "jetstream",
            "host": fuzz.hub_address,
            "login": user,
            "password": password,
            "extra": {"connect_timeout": 2},
        }
    )
    try:
        yield fuzz
    finally:
        os.environ.pop(variable, None)
        fuzz.stop()


def _modes(entry: Entry, arg: str) -> list[str]:
    if entry.kind in ("operator", "sensor") and arg.split(".", 1)[0] in entry.templated:
        return [LITERAL, RENDERED, NATIVE]
    return [LITERAL]


def test_every_entry_point_is_enumerated() -> None:
    """A new operator, sensor, hook method or trigger is covered without editing the harness."""
    kinds = {entry.kind for entry in ENTRIES}
    assert kinds == {"operator", "sensor", "hook", "trigger", "connection", "spark", "job"}
    names = {entry.name for entry in ENTRIES}
    for expected in (
        "JetStreamPurgeStreamOperator",
        "JetStreamPublishOperator",
        "JetStreamSparkSubmitOperator",
        "JetStreamKeyValueSensor",
        "JetStreamHook.apurge_stream",
        "JetStreamHook.apublish",
        "JetStreamMessageTrigger",
        "JetStreamKeyValueEventTrigger",
    ):
        assert expected in names
    assert len(CASES) > 300


@pytest.mark.parametrize(("entry", "arg"), CASES, ids=[f"{e.name}-{a}" for e, a in CASES])
def test_generated_values_are_refused_or_do_only_what_was_asked(world: FuzzWorld, entry: Entry, arg: str) -> None:
    modes = _modes(entry, arg)

    @settings(settings.get_profile(PROFILE))
    @given(value=VALUES, mode=st.sampled_from(modes))
    def check(value: Any, mode: str) -> None:
        problems = attempt(entry, world, arg, value, mode)
        assert not problems, describe(entry, arg, value, mode, problems)

    check()


#: ``make fuzz``: also every fixed attack, in every way it can reach the argument, each problem reported.
SWEEP = CASES if PROFILE == "fuzz" else []


@pytest.mark.parametrize(("entry", "arg"), SWEEP, ids=[f"{e.name}-{a}" for e, a in SWEEP])
def test_every_fixed_attack(world: FuzzWorld, entry: Entry, arg: str) -> None:
    found = []
    for value in FIXED:
        for mode in _modes(entry, arg):
            problems = attempt(entry, world, arg, value, mode)
            if problems:
                found.append(describe(entry, arg, value, mode, problems))
    assert not found, "\n".join(found)


# -- what the harness found: one case each ----------------------------------------------------------

#: ``(entry point, argument, value, how it reaches the entry point, what happened on the code it ran on)``.
FOUND: list[tuple[str, str, Any, str, str]] = []


@pytest.mark.parametrize(
    ("name", "arg", "value", "mode", "seen"),
    FOUND,
    ids=[f"{n}-{a}-{v!r:.30}-{m}" for n, a, v, m, _ in FOUND],
)
def test_found_failures(world: FuzzWorld, name: str, arg: str, value: Any, mode: str, seen: str) -> None:
    (entry,) = [e for e in ENTRIES if e.name == name]
    problems = attempt(entry, world, arg, value, mode)
    assert not problems, describe(entry, arg, value, mode, problems)


_ = math  # NaN and infinities appear in FOUND
