"""Specs without a server: parsing, every validation error, API levels, normalisation and diff."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_provider_jetstream.core.arguments.names import subjects_collide
from airflow_provider_jetstream.core.errors import SpecErrors
from airflow_provider_jetstream.core.manage.specs import (
    STREAM,
    ConsumerSpec,
    KeyValueSpec,
    StreamSpec,
    consumer_server_view,
    diff_config,
    format_duration,
    parse_duration,
    parse_instant,
)
from airflow_provider_jetstream.core.manage.specs.consumer import CONSUMER

S = 1_000_000_000


# -- durations and instants ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        (30, 30 * S),
        (0.5, S // 2),
        ("30", 30 * S),
        ("5m", 300 * S),
        ("1h30m", 5400 * S),
        ("250ms", 250_000_000),
        ("2d", 2 * 86400 * S),
        ("PT5M", 300 * S),
        ("P1DT2H", 26 * 3600 * S),
        ("PT0.5S", S // 2),
        (dt.timedelta(minutes=2), 120 * S),
    ],
)
def test_durations(text, nanos) -> None:
    assert parse_duration(text, "x") == nanos


@pytest.mark.parametrize("bad", ["5 minutes", "m5", "", "P", "PT", True, [1], "-5m", -1])
def test_bad_durations_name_the_field(bad) -> None:
    with pytest.raises(SpecErrors if False else Exception, match=r"stream\.max_age=") as err:
        StreamSpec.from_dict({"name": "s", "max_age": bad})
    assert "5m" in str(err.value) or "non-negative" in str(err.value)


def test_format_duration_round_trips() -> None:
    for text in ("5m", "1h30m", "250ms", "2d", "0"):
        assert format_duration(parse_duration(text, "x")) == text


def test_instants_are_rfc3339_utc() -> None:
    assert parse_instant("2026-01-01T01:00:00+01:00", "x") == "2026-01-01T00:00:00Z"
    assert parse_instant(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "x") == "2026-01-01T00:00:00Z"
    with pytest.raises(Exception, match="ISO-8601"):
        parse_instant("yesterday", "x")


# -- stream specs ---------------------------------------------------------------------------------


def test_every_documented_stream_field_is_known() -> None:
    documented = {
        "name",
        "subjects",
        "retention",
        "storage",
        "discard",
        "discard_new_per_subject",
        "max_consumers",
        "max_msgs",
        "max_bytes",
        "max_age",
        "max_msgs_per_subject",
        "max_msg_size",
        "duplicate_window",
        "replicas",
        "no_ack",
        "placement",
        "mirror",
        "sources",
        "sealed",
        "deny_delete",
        "deny_purge",
        "allow_rollup",
        "republish",
        "allow_direct",
        "mirror_direct",
        "subject_transform",
        "compression",
        "first_seq",
        "metadata",
        "consumer_limits",
        "allow_msg_ttl",
        "subject_delete_marker_ttl",
        "allow_atomic",
        "allow_batched",
        "allow_msg_counter",
        "allow_msg_schedules",
        "description",
    }
    assert documented <= set(STREAM.by_key())


def test_full_stream_spec_to_wire() -> None:
    spec = StreamSpec.from_dict(
        {
            "name": "orders",
            "subjects": "orders.>",
            "retention": "work_queue",
            "storage": "MEMORY",
            "max_age": "7d",
            "replicas": "1",
            "allow_rollup": "true",
            "placement": {"cluster": "c1", "tags": ["az:a"]},
            "republish": {"src": "orders.>", "dest": "copy.>"},
            "consumer_limits": {"inactive_threshold": "1h", "max_ack_pending": 100},
            "metadata": {"team": "data"},
            "duplicate_window": "PT1M",
        }
    )
    wire = spec.wire()
    assert wire["subjects"] == ["orders.>"]
    assert wire["retention"] == "workqueue" and wire["storage"] == "memory"
    assert wire["max_age"] == 7 * 86400 * S and wire["num_replicas"] == 1 and wire["allow_rollup_hdrs"] is True
    assert wire["consumer_limits"] == {"inactive_threshold": 3600 * S, "max_ack_pending": 100}
    assert wire["duplicate_window"] == 60 * S
    assert "discard" not in wire  # never a field the user did not set


def test_sources_name_domain_or_api_prefix() -> None:
    spec = StreamSpec.from_dict(
        {
            "name": "agg",
            "sources": [
                {"name": "test", "domain": "leaf", "filter_subject": "test"},
                {"name": "x", "api_prefix": "JS.acc@hub.API.", "deliver_prefix": "deliver.acc.hub.x", "start_seq": 3},
            ],
        }
    )
    assert spec.wire()["sources"] == [
        {"name": "test", "filter_subject": "test", "external": {"api": "$JS.leaf.API"}},
        {"name": "x", "opt_start_seq": 3, "external": {"api": "JS.acc@hub.API", "deliver": "deliver.acc.hub.x"}},
    ]
    assert spec.listen_subjects() == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "a b"}, r"stream\.name='a b' is not allowed: a stream name .* without whitespace"),
        ({"name": "a.b"}, r"stream\.name='a\.b'"),
        ({"name": "a*"}, r"stream\.name='a\*'"),
        ({"name": "a>"}, r"stream\.name='a>'"),
        ({"name": "a/b"}, r"stream\.name='a/b'"),
        ({"name": "a\\b"}, r"stream\.name="),
        ({"name": "s", "subjects": ["a..b"]}, r"stream\.subjects\[0\]='a\.\.b' .* no empty tokens"),
        ({"name": "s", "subjects": ["a.b*"]}, r"wildcard '\*' or '>' is a whole token"),
        ({"name": "s", "subjects": ["a.>.b"]}, r"'>' may only be the last token"),
        ({"name": "s", "subjects": ["a b"]}, r"no whitespace"),
        ({"name": "s", "subjects": ["a", "a"]}, r"each subject once"),
        (
            {"name": "m", "subjects": ["x"], "mirror": {"name": "o"}},
            r"stream\.subjects=\['x'\] is not allowed: a mirror has no subjects",
        ),
        (
            {"name": "m", "sources": [{"name": "o", "filter_subject": "a", "subject_transforms": [{"dest": "b"}]}]},
            r"give filter_subject or subject_transforms, not both",
        ),
        (
            {"name": "m", "mirror": {"name": "o", "domain": "leaf", "api_prefix": "JS.acc@hub.API"}},
            r"stream\.mirror\.domain='leaf' is not allowed: give domain or api_prefix, not both",
        ),
        ({"name": "m", "mirror": {"name": "o", "deliver_prefix": "d.x"}}, r"delivery prefix goes with"),
        ({"name": "s", "max_msgs": -5}, r"stream\.max_msgs=-5 is not allowed: use an integer >= -1"),
        ({"name": "s", "max_bytes": -2}, r"stream\.max_bytes=-2"),
        ({"name": "s", "replicas": 0}, r"stream\.replicas=0 is not allowed: use an integer from 1 to 5"),
        ({"name": "s", "max_age": "-1s"}, r"stream\.max_age='-1s'"),
        ({"name": "s", "subjets": ["x"]}, r"stream\.subjets: unknown field; did you mean 'subjects'\?"),
        ({"name": "s", "max_mesages": 1}, r"did you mean 'max_msgs'\?"),
        ({"name": "s", "retention": "forever"}, r"use one of 'interest', 'limits', 'workqueue'"),
        ({"name": "s", "allow_rollup": True, "deny_purge": True}, r"rollup purges"),
        ({"name": "s", "discard_new_per_subject": True}, r"needs discard 'new'"),
        ({"name": "s", "subject_delete_marker_ttl": "5m"}, r"need allow_msg_ttl"),
        ({"name": "s", "mirror_direct": True}, r"mirror_direct is for mirrors only"),
        ({"subjects": ["x"]}, r"stream\.name=None .* needs a name"),
        ({"name": "s", "metadata": {"_nats.level": "1"}}, r"belong to the server"),
    ],
)
def test_stream_validation_errors(spec, message) -> None:
    with pytest.raises(SpecErrors, match=message):
        StreamSpec.from_dict(spec)


def test_all_errors_reported_at_once() -> None:
    with pytest.raises(SpecErrors) as err:
        StreamSpec.from_dict({"name": "a b", "max_msgs": -9, "subjcts": ["x"]})
    assert len(err.value.errors) == 3
    assert str(err.value).startswith("3 invalid fields:")


def test_api_level_requirements() -> None:
    spec = StreamSpec.from_dict({"name": "s", "allow_msg_ttl": True, "subject_delete_marker_ttl": "5m"})
    needs = {(r.path, r.level, r.since) for r in spec.requirements()}
    assert needs == {("stream.allow_msg_ttl", 1, "2.11"), ("stream.subject_delete_marker_ttl", 1, "2.11")}
    assert spec.requirements()[0].message("domain 'leaf'", 0) == (
        "stream.allow_msg_ttl needs nats-server >= 2.11; domain 'leaf' reports API level 0"
    )
    # Explicitly off needs nothing; counters need 2.12.
    assert StreamSpec.from_dict({"name": "s", "allow_msg_ttl": False}).requirements() == []
    assert StreamSpec.from_dict({"name": "s", "allow_msg_counter": True}).requirements()[0].level == 2


# -- consumers ------------------------------------------------------------------------------------


def test_consumer_spec() -> None:
    spec = ConsumerSpec.from_dict(
        {
            "name": "dur",
            "ack_wait": "PT30S",
            "max_deliver": 5,
            "filter_subject": "orders.>",
            "start_time": "2026-01-01T00:00:00Z",
            "max_ack_pending": 100,
            "inactive_threshold": "1h",
            "metadata": {"owner": "airflow"},
        }
    )
    wire = spec.wire()
    assert wire["durable_name"] == "dur" and wire["ack_wait"] == 30 * S
    assert wire["deliver_policy"] == "by_start_time" and wire["opt_start_time"] == "2026-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "d.x"}, r"consumer\.name='d\.x' .* a consumer name"),
        ({"name": "d", "filter_subject": "a", "filter_subjects": ["b"]}, "give filter_subject or filter_subjects"),
        ({"name": "d", "start_seq": 3, "deliver_policy": "new"}, "goes with deliver_policy 'by_start_sequence'"),
        ({"name": "d", "deliver_policy": "by_start_sequence"}, "needs start_seq"),
        ({"name": "d", "backoff": ["1s", "5s"], "max_deliver": 2}, "max_deliver must be > 2"),
        ({"name": "d", "max_ack_pending": 0}, "0 would mean the server default"),
        ({"name": "d", "deliver_subject": "x"}, "push consumers are not managed here"),
        ({"name": "d", "ack_polcy": "all"}, "did you mean 'ack_policy'"),
        ({"name": "d", "ack_wait": "soon"}, r"consumer\.ack_wait='soon'"),
    ],
)
def test_consumer_validation_errors(spec, message) -> None:
    with pytest.raises(SpecErrors, match=message):
        ConsumerSpec.from_dict(spec)


def test_consumer_pause_until_needs_211() -> None:
    spec = ConsumerSpec.from_dict({"name": "d", "pause_until": "2030-01-01T00:00:00Z"})
    assert [(r.path, r.since) for r in spec.requirements()] == [("consumer.pause_until", "2.11")]


# -- KV buckets -----------------------------------------------------------------------------------


def test_kv_bucket_follows_the_kv_stream_conventions() -> None:
    wire = (
        KeyValueSpec.from_dict({"bucket": "cfg", "history": 5, "ttl": "1m", "compression": True}).stream_spec().wire()
    )
    assert wire["name"] == "KV_cfg" and wire["subjects"] == ["$KV.cfg.>"]
    assert wire["max_msgs_per_subject"] == 5 and wire["max_age"] == 60 * S and wire["duplicate_window"] == 60 * S
    assert wire["allow_rollup_hdrs"] and wire["deny_delete"] and wire["allow_direct"] and wire["discard"] == "new"
    assert wire["compression"] == "s2"


def test_kv_mirror_and_sources_across_domains() -> None:
    mirror = KeyValueSpec.from_dict({"bucket": "cfg-copy", "mirror": {"bucket": "cfg", "domain": "leaf"}})
    wire = mirror.stream_spec().wire()
    assert "subjects" not in wire and wire["mirror_direct"] is True
    # As nats.go / nats.js create it (ADR-8): the origin's subjects kept, no transform.
    assert wire["mirror"] == {"name": "KV_cfg", "external": {"api": "$JS.leaf.API"}}
    same = KeyValueSpec.from_dict({"bucket": "cfg", "sources": [{"bucket": "cfg", "domain": "leaf"}, {"bucket": "b"}]})
    sources = same.stream_spec().wire()["sources"]
    assert "subject_transforms" not in sources[0]  # same bucket from another domain: same subjects
    assert sources[1]["subject_transforms"] == [{"src": "$KV.b.>", "dest": "$KV.cfg.>"}]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"bucket": "a.b"}, r"bucket\.bucket='a\.b' .* letters, digits"),
        ({"bucket": "a", "history": 65}, r"bucket\.history=65 .* from 1 to 64"),
        ({"bucket": "a", "mirror": {"bucket": "b"}, "sources": [{"bucket": "c"}]}, "give mirror or sources"),
        ({"bucket": "a", "ttl": "forever"}, r"bucket\.ttl='forever'"),
        ({"bucket": "a", "histroy": 2}, "did you mean 'history'"),
    ],
)
def test_kv_validation_errors(spec, message) -> None:
    with pytest.raises(SpecErrors, match=message):
        KeyValueSpec.from_dict(spec)


# -- normalisation and diff -----------------------------------------------------------------------

SERVER_212 = {
    "name": "agg",
    "subjects": ["b", "a"],
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 120 * S,
    "sources": [
        {"name": "test", "external": {"api": "$JS.leaf.API", "deliver": ""}},
        {"name": "other", "external": {"api": "$JS.leaf2.API", "deliver": ""}},
    ],
    "compression": "none",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "consumer_limits": {},
    "allow_msg_ttl": False,
    "metadata": {"_nats.level": "3", "_nats.req.level": "0", "_nats.ver": "2.12.8", "team": "x"},
}


def test_unchanged_spec_with_server_defaults_is_unchanged() -> None:
    spec = StreamSpec.from_dict(
        {
            "name": "agg",
            "subjects": ["a", "b"],
            "max_msgs": 0,
            "max_age": 0,
            "storage": "file",
            "replicas": 1,
            "duplicate_window": "2m",
            "compression": "none",
            "metadata": {"team": "x"},
            "sources": [{"name": "test", "domain": "leaf"}],
            "consumer_limits": {},
            "allow_msg_ttl": False,
        }
    )
    diff = diff_config(STREAM, spec.values, SERVER_212)
    assert diff.unchanged, diff.lines()
    assert any("kept sources the spec does not name: 'other' in domain 'leaf2'" in n for n in diff.notes)


def test_updating_one_source_keeps_the_others() -> None:
    spec = StreamSpec.from_dict(
        {"name": "agg", "sources": [{"name": "test", "domain": "leaf", "filter_subject": "t.>"}]}
    )
    diff = diff_config(STREAM, spec.values, SERVER_212)
    assert [c.field for c in diff.changes] == ["sources"] and diff.changes[0].in_place
    sent = diff.update_config["sources"]
    assert [s["name"] for s in sent] == ["test", "other"] and sent[0]["filter_subject"] == "t.>"
    pruned = diff_config(STREAM, spec.values, SERVER_212, prune_sources=True)
    assert [s["name"] for s in pruned.update_config["sources"]] == ["test"]
    assert "removes 'other' in domain 'leaf2'" in pruned.changes[0].note


def test_replace_forcing_changes_listed_old_to_new() -> None:
    spec = StreamSpec.from_dict({"name": "agg", "storage": "memory", "retention": "interest", "max_age": "1h"})
    diff = diff_config(STREAM, spec.values, SERVER_212)
    lines = {c.field: (c.line(), c.in_place) for c in diff.changes}
    assert lines["storage"] == ("storage: 'file' -> 'memory'", False)
    assert lines["retention"] == ("retention: 'limits' -> 'interest'", False)
    assert lines["max_age"] == ("max_age: 0 -> 1h (discards stored data)", True)
    # Everything the spec does not name is sent back as the server has it.
    assert diff.update_config["metadata"]["team"] == "x" and diff.update_config["max_age"] == 3600 * S


def test_enable_only_fields() -> None:
    on = diff_config(STREAM, {"allow_msg_ttl": True}, SERVER_212)
    assert on.changes[0].in_place
    off = diff_config(STREAM, {"allow_msg_ttl": False}, {**SERVER_212, "allow_msg_ttl": True})
    assert not off.changes[0].in_place


def test_consumer_filter_forms_compare_equal() -> None:
    server = {"durable_name": "d", "filter_subjects": ["a.>"], "ack_wait": 30 * S, "max_deliver": -1}
    spec = ConsumerSpec.from_dict({"name": "d", "filter_subject": "a.>", "ack_wait": "30s", "max_deliver": 0})
    diff = diff_config(CONSUMER, spec.values, server, server_view=consumer_server_view)
    assert diff.unchanged, diff.lines()
    changed = diff_config(
        CONSUMER,
        ConsumerSpec.from_dict({"name": "d", "filter_subject": "b"}).values,
        server,
        server_view=consumer_server_view,
    )
    assert changed.update_config["filter_subject"] == "b" and "filter_subjects" not in changed.update_config


def test_subjects_collide() -> None:
    assert subjects_collide("test", "test")
    assert subjects_collide("orders.*", "orders.1")
    assert subjects_collide("orders.>", "orders.a.b")
    assert subjects_collide(">", "x")
    assert not subjects_collide("orders.>", "orders")
    assert not subjects_collide("a.*", "a.b.c")
    assert not subjects_collide("a", "b")
