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
    # A generated object ``destination`` is a relative path: files it names land in the world's directory.
    cwd = os.getcwd()
    os.chdir(fuzz.workdir)
    try:
        yield fuzz
    finally:
        os.chdir(cwd)
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


if PROFILE == "fuzz":  # ``make fuzz`` only (a test CI would skip proves nothing: it is not collected there)

    @pytest.mark.parametrize(("entry", "arg"), CASES, ids=[f"{e.name}-{a}" for e, a in CASES])
    def test_every_fixed_attack(world: FuzzWorld, entry: Entry, arg: str) -> None:
        found = []
        for value in FIXED:
            for mode in _modes(entry, arg):
                problems = attempt(entry, world, arg, value, mode)
                if problems:
                    found.append(describe(entry, arg, value, mode, problems))
        assert not found, "\n".join(found)


# -- what the harness found: one case each ----------------------------------------------------------

#: ``(entry point, argument, value, how it reaches the entry point, what happened on the code it ran on)``:
#: one case per entry point, argument and kind of failure the sweep of every fixed attack found (``make fuzz``).
#: Kinds: an empty ``domain`` / ``api_prefix`` acting in the connection's own domain (the hub); NaN or an
#: infinity in a duration (spec fields, sensor and trigger timeouts) raising a raw ``ValueError`` /
#: ``OverflowError``; streams accepted on reserved subjects (``$KV.``, ``_INBOX.>``, ``JS.acc@hub.API.``);
#: a 100,000-character subject that breaks the hub-leaf link (a stream) or hangs (a publish); the
#: connection's ``port`` not checked; Spark and job numbers beyond int64 accepted; job arguments starting
#: with ``-`` that the job's command line cannot take; ``logger`` / ``nc`` objects not checked; refusals
#: that name another field than the one given.
FOUND: list[tuple[str, str, Any, str, str]] = [
    (
        "JetStreamCreateConsumerOperator",
        "domain",
        "",
        LITERAL,
        "changed hub/fz_target/fz_newdur (created), which it was not asked to",
    ),
    (
        "JetStreamCreateConsumerOperator",
        "consumer.ack_wait",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamCreateConsumerOperator",
        "consumer.ack_wait",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamCreateConsumerOperator",
        "consumer.max_expires",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamCreateConsumerOperator",
        "consumer.max_expires",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamCreateConsumerOperator",
        "consumer.inactive_threshold",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamCreateConsumerOperator",
        "consumer.inactive_threshold",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamCreateConsumerOperator",
        "consumer.pinned_ttl",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamCreateConsumerOperator",
        "consumer.pinned_ttl",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamCreateKeyValueOperator",
        "domain",
        "",
        LITERAL,
        "changed hub/KV_fznewkv (created), which it was not asked to",
    ),
    (
        "JetStreamCreateKeyValueOperator",
        "bucket.ttl",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamCreateKeyValueOperator",
        "bucket.ttl",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamCreateKeyValueOperator",
        "bucket.limit_marker_ttl",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamCreateKeyValueOperator",
        "bucket.limit_marker_ttl",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamCreateMirrorOperator",
        "domain",
        "",
        LITERAL,
        "changed hub/fz_newmirror (created), which it was not asked to",
    ),
    (
        "JetStreamCreateMirrorOperator",
        "stream_overrides",
        {"a": 1},
        LITERAL,
        "refused without naming 'stream_overrides': 'stream.a: unknown field; known fields: ...<534 chars>",
    ),
    (
        "JetStreamCreateSourcedStreamOperator",
        "domain",
        "",
        LITERAL,
        "changed hub/fz_newsourced (created), which it was not asked to",
    ),
    (
        "JetStreamCreateSourcedStreamOperator",
        "subjects",
        "a" * 100_000,
        LITERAL,
        "broke the hub-leaf link: the leaf's JetStream no longer answers through the hub",
    ),
    (
        "JetStreamCreateSourcedStreamOperator",
        "subjects",
        "$KV.b.k",
        LITERAL,
        "leaf/fz_newsourced listens on reserved subjects ['$KV.b.k']",
    ),
    (
        "JetStreamCreateSourcedStreamOperator",
        "stream_overrides",
        {"a": 1},
        LITERAL,
        "refused without naming 'stream_overrides': 'stream.a: unknown field; known fields: ...<534 chars>",
    ),
    ("JetStreamCreateStreamOperator", "domain", "", LITERAL, "changed hub/fz_new (created), which it was not asked to"),
    (
        "JetStreamCreateStreamOperator",
        "stream.subjects",
        "a" * 100_000,
        LITERAL,
        "broke the hub-leaf link: the leaf's JetStream no longer answers through the hub",
    ),
    (
        "JetStreamCreateStreamOperator",
        "stream.subjects",
        "$KV.b.k",
        LITERAL,
        "leaf/fz_new listens on reserved subjects ['$KV.b.k']",
    ),
    (
        "JetStreamCreateStreamOperator",
        "stream.max_age",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamCreateStreamOperator",
        "stream.max_age",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamCreateStreamOperator",
        "stream.duplicate_window",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamCreateStreamOperator",
        "stream.duplicate_window",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamCreateStreamOperator",
        "stream.subject_delete_marker_ttl",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamCreateStreamOperator",
        "stream.subject_delete_marker_ttl",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    ("JetStreamPublishOperator", "subject", "a" * 100_000, LITERAL, "hang: still running after 20 s"),
    ("JetStreamSparkSubmitOperator", "stream", -math.inf, RENDERED, "raw SystemExit: '2'"),
    ("JetStreamSparkSubmitOperator", "output_path", -math.inf, RENDERED, "raw SystemExit: '2'"),
    ("JetStreamSparkSubmitOperator", "checkpoint_bucket", -math.inf, RENDERED, "raw SystemExit: '2'"),
    ("JetStreamSparkSubmitOperator", "options.checkpoint_key", -math.inf, RENDERED, "raw SystemExit: '2'"),
    ("JetStreamSparkSubmitOperator", "options.checkpoint_domain", -math.inf, RENDERED, "raw SystemExit: '2'"),
    ("JetStreamSparkSubmitOperator", "domain", -math.inf, RENDERED, "raw SystemExit: '2'"),
    ("JetStreamSparkSubmitOperator", "api_prefix", -math.inf, RENDERED, "raw SystemExit: '2'"),
    ("JetStreamSparkSubmitOperator", "filter_subjects", -math.inf, RENDERED, "raw SystemExit: '2'"),
    (
        "JetStreamConsumerLagSensor",
        "unreachable_timeout",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamConsumerLagSensor",
        "unreachable_timeout",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamKeyValueSensor",
        "unreachable_timeout",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamKeyValueSensor",
        "unreachable_timeout",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamReplicationLagSensor",
        "unreachable_timeout",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamReplicationLagSensor",
        "unreachable_timeout",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamReplicationLagSensor",
        "options.max_inactive",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamReplicationLagSensor",
        "options.max_inactive",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamReplicationLagSensor",
        "options.error_grace",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamReplicationLagSensor",
        "options.error_grace",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.aaccount_info",
        "nc",
        0,
        LITERAL,
        "raw AttributeError: \"'int' object has no attribute 'request'\"",
    ),
    (
        "JetStreamHook.adelete_consumer",
        "logger",
        -1,
        LITERAL,
        "raw AttributeError: \"'int' object has no attribute 'info'\"",
    ),
    (
        "JetStreamHook.adelete_stream",
        "logger",
        -1,
        LITERAL,
        "raw AttributeError: \"'int' object has no attribute 'info'\"",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "consumer",
        0,
        LITERAL,
        "refused without naming 'spec': 'consumer=0 is not allowed: a consumer is a dict of fields'",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "consumer.ack_wait",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "consumer.ack_wait",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "consumer.max_expires",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "consumer.max_expires",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "consumer.inactive_threshold",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "consumer.inactive_threshold",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "consumer.pinned_ttl",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "consumer.pinned_ttl",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "domain",
        "",
        LITERAL,
        "changed hub/fz_target/fz_newdur (created), which it was not asked to",
    ),
    (
        "JetStreamHook.aensure_consumer",
        "logger",
        -1,
        LITERAL,
        "raw AttributeError: \"'int' object has no attribute 'info'\"",
    ),
    (
        "JetStreamHook.aensure_key_value",
        "bucket",
        0,
        LITERAL,
        "refused without naming 'spec': 'bucket=0 is not allowed: a bucket is a dict of fields'",
    ),
    (
        "JetStreamHook.aensure_key_value",
        "bucket.ttl",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.aensure_key_value",
        "bucket.ttl",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.aensure_key_value",
        "bucket.limit_marker_ttl",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.aensure_key_value",
        "bucket.limit_marker_ttl",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.aensure_key_value",
        "domain",
        "",
        LITERAL,
        "changed hub/KV_fznewkv (created), which it was not asked to",
    ),
    (
        "JetStreamHook.aensure_key_value",
        "logger",
        -1,
        LITERAL,
        "raw AttributeError: \"'int' object has no attribute 'info'\"",
    ),
    (
        "JetStreamHook.aensure_stream",
        "stream",
        0,
        LITERAL,
        "refused without naming 'spec': 'stream=0 is not allowed: a stream is a dict of fields'",
    ),
    (
        "JetStreamHook.aensure_stream",
        "stream.subjects",
        "a" * 100_000,
        LITERAL,
        "broke the hub-leaf link: the leaf's JetStream no longer answers through the hub",
    ),
    (
        "JetStreamHook.aensure_stream",
        "stream.subjects",
        "$KV.b.k",
        LITERAL,
        "leaf/fz_new listens on reserved subjects ['$KV.b.k']",
    ),
    (
        "JetStreamHook.aensure_stream",
        "stream.max_age",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.aensure_stream",
        "stream.max_age",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.aensure_stream",
        "stream.duplicate_window",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.aensure_stream",
        "stream.duplicate_window",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.aensure_stream",
        "stream.subject_delete_marker_ttl",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.aensure_stream",
        "stream.subject_delete_marker_ttl",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    ("JetStreamHook.aensure_stream", "domain", "", LITERAL, "changed hub/fz_new (created), which it was not asked to"),
    (
        "JetStreamHook.aensure_stream",
        "logger",
        -1,
        LITERAL,
        "raw AttributeError: \"'int' object has no attribute 'info'\"",
    ),
    (
        "JetStreamHook.ajetstream",
        "api_prefix",
        "$JS.hub.API.STREAM.DELETE.x",
        LITERAL,
        "raw TimeoutError: 'nats: timeout'",
    ),
    ("JetStreamHook.apublish", "subject", "a" * 100_000, LITERAL, "hang: still running after 20 s"),
    ("JetStreamHook.apublish", "logger", -1, LITERAL, "raw AttributeError: \"'int' object has no attribute 'info'\""),
    (
        "JetStreamHook.apurge_stream",
        "logger",
        -1,
        LITERAL,
        "raw AttributeError: \"'int' object has no attribute 'info'\"",
    ),
    (
        "JetStreamHook.areplication_status",
        "max_inactive",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.areplication_status",
        "max_inactive",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamHook.areplication_status",
        "error_grace",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamHook.areplication_status",
        "error_grace",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamConsumerLagTrigger",
        "unreachable_timeout",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamConsumerLagTrigger",
        "unreachable_timeout",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamKeyValueEventTrigger",
        "bucket",
        "a" * 100_000,
        LITERAL,
        "refused without naming 'bucket': \"stream='KV_aaaaaaaaaaaaaaaaaaaaaaaaaaaa...<232 chars>",
    ),
    (
        "JetStreamKeyValueTrigger",
        "unreachable_timeout",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamKeyValueTrigger",
        "unreachable_timeout",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamMessageTrigger",
        "opt_start_seq",
        1e30,
        LITERAL,
        "refused without naming 'opt_start_seq': \"consumer.start_seq=10000000000000000198...<127 chars>",
    ),
    (
        "JetStreamMessageTrigger",
        "domain",
        "",
        LITERAL,
        "changed hub/fz_target/fz_evdur (created), which it was not asked to",
    ),
    (
        "JetStreamReplicationLagTrigger",
        "options.max_inactive",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamReplicationLagTrigger",
        "options.max_inactive",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamReplicationLagTrigger",
        "options.error_grace",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamReplicationLagTrigger",
        "options.error_grace",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "JetStreamReplicationLagTrigger",
        "unreachable_timeout",
        math.inf,
        LITERAL,
        "raw OverflowError: 'cannot convert float infinity to integer'",
    ),
    (
        "JetStreamReplicationLagTrigger",
        "unreachable_timeout",
        math.nan,
        LITERAL,
        "raw ValueError: 'cannot convert float NaN to integer'",
    ),
    (
        "spark read",
        "startSeq",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: starting_sequence=1000000000000000019884624838656",
    ),
    (
        "spark read",
        "endSeq",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: ending_sequence=1000000000000000019884624838656",
    ),
    (
        "spark read",
        "minPartitions",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: min_partitions=1000000000000000019884624838656",
    ),
    (
        "spark read",
        "maxMessagesPerPartition",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: max_messages_per_partition=1000000000000000019884624838656",
    ),
    (
        "spark read",
        "servers",
        "",
        LITERAL,
        "refused without naming 'servers': \"jetstream connection options: connectio...<156 chars>",
    ),
    (
        "spark read",
        "nkeySeed",
        0,
        LITERAL,
        "refused without naming 'nkeySeed': \"jetstream connection options: connectio...<118 chars>",
    ),
    (
        "spark read",
        "tlsCertFile",
        0,
        LITERAL,
        "refused without naming 'tlsCertFile': \"jetstream connection options: connectio...<140 chars>",
    ),
    (
        "spark read",
        "tlsKeyFile",
        0,
        LITERAL,
        "refused without naming 'tlsKeyFile': \"jetstream connection options: connectio...<140 chars>",
    ),
    (
        "spark read",
        "tlsVerify",
        -1,
        LITERAL,
        "refused without naming 'tlsVerify': \"jetstream connection options: connectio...<111 chars>",
    ),
    (
        "spark read",
        "tlsHandshakeFirst",
        -1,
        LITERAL,
        "refused without naming 'tlsHandshakeFirst': \"jetstream connection options: connectio...<120 chars>",
    ),
    (
        "spark read",
        "connectTimeout",
        0,
        LITERAL,
        "refused without naming 'connectTimeout': \"jetstream connection options: connectio...<122 chars>",
    ),
    (
        "spark readStream",
        "startSeq",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: starting_sequence=1000000000000000019884624838656",
    ),
    (
        "spark readStream",
        "minPartitions",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: min_partitions=1000000000000000019884624838656",
    ),
    (
        "spark readStream",
        "maxMessagesPerPartition",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: max_messages_per_partition=1000000000000000019884624838656",
    ),
    (
        "spark readStream",
        "maxMessagesPerTrigger",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: max_messages_per_trigger=1000000000000000019884624838656",
    ),
    (
        "spark readStream",
        "servers",
        "",
        LITERAL,
        "refused without naming 'servers': \"jetstream connection options: connectio...<156 chars>",
    ),
    (
        "spark readStream",
        "nkeySeed",
        0,
        LITERAL,
        "refused without naming 'nkeySeed': \"jetstream connection options: connectio...<118 chars>",
    ),
    (
        "spark readStream",
        "tlsCertFile",
        0,
        LITERAL,
        "refused without naming 'tlsCertFile': \"jetstream connection options: connectio...<140 chars>",
    ),
    (
        "spark readStream",
        "tlsKeyFile",
        0,
        LITERAL,
        "refused without naming 'tlsKeyFile': \"jetstream connection options: connectio...<140 chars>",
    ),
    (
        "spark readStream",
        "tlsVerify",
        -1,
        LITERAL,
        "refused without naming 'tlsVerify': \"jetstream connection options: connectio...<111 chars>",
    ),
    (
        "spark readStream",
        "tlsHandshakeFirst",
        -1,
        LITERAL,
        "refused without naming 'tlsHandshakeFirst': \"jetstream connection options: connectio...<120 chars>",
    ),
    (
        "spark readStream",
        "connectTimeout",
        0,
        LITERAL,
        "refused without naming 'connectTimeout': \"jetstream connection options: connectio...<122 chars>",
    ),
    (
        "spark write",
        "maxInFlight",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: max_in_flight=1000000000000000019884624838656",
    ),
    (
        "spark write",
        "servers",
        "",
        LITERAL,
        "refused without naming 'servers': \"jetstream connection options: connectio...<156 chars>",
    ),
    (
        "spark write",
        "nkeySeed",
        0,
        LITERAL,
        "refused without naming 'nkeySeed': \"jetstream connection options: connectio...<118 chars>",
    ),
    (
        "spark write",
        "tlsCertFile",
        0,
        LITERAL,
        "refused without naming 'tlsCertFile': \"jetstream connection options: connectio...<140 chars>",
    ),
    (
        "spark write",
        "tlsKeyFile",
        0,
        LITERAL,
        "refused without naming 'tlsKeyFile': \"jetstream connection options: connectio...<140 chars>",
    ),
    (
        "spark write",
        "tlsVerify",
        -1,
        LITERAL,
        "refused without naming 'tlsVerify': \"jetstream connection options: connectio...<111 chars>",
    ),
    (
        "spark write",
        "tlsHandshakeFirst",
        -1,
        LITERAL,
        "refused without naming 'tlsHandshakeFirst': \"jetstream connection options: connectio...<120 chars>",
    ),
    (
        "spark write",
        "connectTimeout",
        0,
        LITERAL,
        "refused without naming 'connectTimeout': \"jetstream connection options: connectio...<122 chars>",
    ),
    (
        "stream_to_parquet command line",
        "--end-seq",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: end_sequence=1000000000000000019884624838656",
    ),
    (
        "stream_to_parquet command line",
        "--min-partitions",
        1e30,
        LITERAL,
        "accepted out-of-range numbers: min_partitions=1000000000000000019884624838656",
    ),
    (
        "stream_to_parquet command line",
        "--servers",
        [],
        LITERAL,
        "raw ValueError: \"'' does not appear to be an IPv4 or IPv6 address\"",
    ),
    (
        "jetstream connection",
        "port",
        0,
        LITERAL,
        "port=0 was accepted, but the connection uses 'nats://127.0.0.1:4222'",
    ),
    (
        "jetstream connection",
        "port",
        -1,
        LITERAL,
        "the connection uses the server 'nats://127.0.0.1:-1' (Port could not be cast to integer value as '-1')",
    ),
    (
        "jetstream connection",
        "port",
        2**64,
        LITERAL,
        "the connection uses the server 'nats://127.0.0.1:18446744073709551616' (Port out of range 0-65535)",
    ),
    (
        "jetstream connection",
        "port",
        1.5,
        LITERAL,
        "port=1.5 was accepted, but the connection uses 'nats://127.0.0.1:1'",
    ),
    (
        "jetstream connection",
        "port",
        True,
        LITERAL,
        "port=True was accepted, but the connection uses 'nats://127.0.0.1:1'",
    ),
]


@pytest.mark.parametrize(
    ("name", "arg", "value", "mode", "seen"),
    FOUND,
    ids=[f"{n}-{a}-{v!r:.30}-{m}" for n, a, v, m, _ in FOUND],
)
def test_found_failures(world: FuzzWorld, name: str, arg: str, value: Any, mode: str, seen: str) -> None:
    (entry,) = [e for e in ENTRIES if e.name == name]
    problems = attempt(entry, world, arg, value, mode)
    assert not problems, describe(entry, arg, value, mode, problems)
