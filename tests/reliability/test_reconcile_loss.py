"""Nothing lost by ordinary input: a reconcile changes only what the spec names, and a change that
discards stored data in place (a limit lowered, or set where there was none) needs ``allow_data_loss``.

Regression cases: a bucket made with ``history: 5`` and reconciled with ``{"bucket": b, "description":
"x"}`` (or just ``bucket=b``) went ``max_msgs_per_subject 5 -> 1`` and lost 4 revisions of every key;
``max_msgs: 5`` on a stream of 20 messages dropped 15 of them with only a line in the change list.
"""

from __future__ import annotations

import base64

import pytest

from airflow_provider_jetstream.core.errors import ReconcileError
from airflow_provider_jetstream.core.manage.specs import STREAM, KeyValueSpec, StreamSpec, diff_config
from airflow_provider_jetstream.core.manage.specs.kv import KV, STREAM_FIELDS
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.kv import JetStreamCreateKeyValueOperator
from airflow_provider_jetstream.operators.streams import JetStreamCreateStreamOperator
from tests.support.management import Raw, uid
from tests.support.reconcile_dags import run_bucket, run_stream, xcom
from tests.support.waiting import wait_until

S = 1_000_000_000


def create_stream(conn: str, spec: dict, **kwargs) -> dict:
    return JetStreamCreateStreamOperator(
        task_id=uid("t"), jetstream_conn_id=conn, domain="leaf", stream=spec, **kwargs
    ).execute({})


def create_bucket(conn: str, spec, **kwargs) -> dict:
    return JetStreamCreateKeyValueOperator(
        task_id=uid("b"), jetstream_conn_id=conn, domain="leaf", bucket=spec, **kwargs
    ).execute({})


def stream_with_messages(raw: Raw, config: dict, count: int = 20) -> str:
    """A leaf stream (``config`` + a fresh name) holding ``count`` messages on one subject."""
    name = uid("loss")
    raw.create("leaf", {"name": name, "subjects": [name], **config})
    raw.publish(name, [b"m%03d" % i for i in range(count)], server="leaf")
    assert raw.info("leaf", name)["state"]["messages"] == count
    return name


def messages(raw: Raw, stream: str) -> int:
    return raw.info("leaf", stream)["state"]["messages"]


def revisions(raw: Raw, bucket: str, seqs: list[int]) -> list[bytes]:
    """The values stored at ``seqs`` in the bucket's stream (a revision no longer stored is left out)."""
    out = []
    for seq in seqs:
        reply = raw.api("leaf", f"STREAM.MSG.GET.KV_{bucket}", {"seq": seq})
        if "message" in reply:
            out.append(base64.b64decode(reply["message"]["data"]))
    return out


def bucket_with_history(conn: str, raw: Raw, spec: dict | None = None) -> tuple[str, list[int]]:
    """A leaf bucket with ``history: 5`` (and ``spec``'s other fields) whose key ``k`` holds 5 revisions."""
    name = uid("kv")
    assert create_bucket(conn, {"bucket": name, "history": 5, **(spec or {})})["action"] == "created"
    hook = JetStreamHook(conn)
    seqs = [hook.kv_put(name, "k", f"v{i}", domain="leaf") for i in range(5)]
    assert revisions(raw, name, seqs) == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    return name, seqs


# -- a reconcile changes only what the spec names ------------------------------------------------------


def test_a_bucket_spec_without_history_keeps_every_revision(hub_conn, raw) -> None:
    name, seqs = bucket_with_history(hub_conn, raw)
    described = create_bucket(hub_conn, {"bucket": name, "description": "x"})
    assert described["action"] == "updated" and list(described["changes"]) == ["description"]
    assert create_bucket(hub_conn, name)["action"] == "unchanged"
    assert JetStreamHook(hub_conn).ensure_key_value(name, domain="leaf")["action"] == "unchanged"
    config = raw.info("leaf", f"KV_{name}")["config"]
    assert config["max_msgs_per_subject"] == 5 and config["description"] == "x"
    assert revisions(raw, name, seqs) == [b"v0", b"v1", b"v2", b"v3", b"v4"]


def test_a_bucket_spec_naming_few_fields_keeps_the_others(hub_conn, raw) -> None:
    name = uid("kv")
    full = {
        "bucket": name,
        "history": 3,
        "ttl": "1h",
        "max_value_size": 1024,
        "max_bytes": 1_000_000,
        "compression": True,
        "republish": {"src": f"$KV.{name}.>", "dest": f"re.{name}.>"},
        "metadata": {"owner": "ops"},
        "limit_marker_ttl": "5s",
    }
    if raw.level("leaf") < 1:  # limit_marker_ttl needs nats-server 2.11
        del full["limit_marker_ttl"]
    create_bucket(hub_conn, full)
    before = raw.info("leaf", f"KV_{name}")["config"]
    for spec in (name, {"bucket": name}, {"bucket": name, "replicas": 1}, {"bucket": name, "description": "x"}):
        create_bucket(hub_conn, spec)
    after = raw.info("leaf", f"KV_{name}")["config"]
    assert after.pop("description") == "x"
    assert after == before


def test_a_stream_made_by_hand_keeps_what_the_spec_does_not_name(hub_conn, raw) -> None:
    name = stream_with_messages(raw, {"max_msgs": 50, "max_age": 3600 * S, "discard": "new"})
    result = create_stream(hub_conn, {"name": name, "description": "x"})
    assert result["action"] == "updated" and list(result["changes"]) == ["description"]
    config = raw.info("leaf", name)["config"]
    assert (config["max_msgs"], config["max_age"], config["discard"]) == (50, 3600 * S, "new")
    assert messages(raw, name) == 20


# -- lowering a limit in place is refused unless allow_data_loss ----------------------------------------


@pytest.mark.parametrize(
    ("config", "spec", "line", "left"),
    [
        ({}, {"max_msgs": 5}, "max_msgs: unlimited -> 5", lambda n: n == 5),
        ({"max_msgs": 20}, {"max_msgs": 5}, "max_msgs: 20 -> 5", lambda n: n == 5),
        ({}, {"max_msgs_per_subject": 5}, "max_msgs_per_subject: unlimited -> 5", lambda n: n == 5),
        ({}, {"max_bytes": 512}, "max_bytes: unlimited -> 512", lambda n: 0 < n < 20),
        # The duplicate window may not be longer than max_age: the spec lowers both.
        ({"max_age": 3600 * S}, {"max_age": "1s", "duplicate_window": "1s"}, "max_age: 1h -> 1s", lambda n: n == 0),
    ],
    ids=["max_msgs-unlimited", "max_msgs-20", "max_msgs_per_subject", "max_bytes", "max_age"],
)
def test_lowering_a_stream_limit_is_refused_unless_allowed(hub_conn, raw, config, spec, line, left) -> None:
    name = stream_with_messages(raw, config)
    before = raw.info("leaf", name)["config"]
    lower = {"name": name, "subjects": [name], **spec}
    with pytest.raises(ReconcileError) as refused:
        create_stream(hub_conn, lower)
    text = str(refused.value)
    assert line in text and "allow_data_loss=True" in text and "dry_run=True" in text, text
    assert "nothing was changed" in text
    # The dry run reports the same refusal; with the flag it shows the plan. Nothing changes either way.
    with pytest.raises(ReconcileError, match=r"^dry run: stream .*discard stored data"):
        create_stream(hub_conn, lower, options={"dry_run": True})
    planned = create_stream(hub_conn, lower, options={"dry_run": True, "allow_data_loss": True})
    assert planned["action"] == "planned" and planned["plan"] == "update"
    field = next(iter(spec))
    assert planned["changes"][field]["note"] == "discards stored data"
    # if_exists="recreate" with no change needing a new stream is an update: the same rule applies.
    with pytest.raises(ReconcileError, match="allow_data_loss=True"):
        create_stream(hub_conn, lower, if_exists="recreate")
    assert messages(raw, name) == 20 and raw.info("leaf", name)["config"] == before

    assert create_stream(hub_conn, lower, options={"allow_data_loss": True})["action"] == "updated"
    wait_until(lambda: messages(raw, name), left, 30, f"{name} after {line}")


def test_raising_a_limit_or_changing_other_fields_needs_no_flag(hub_conn, raw) -> None:
    name = stream_with_messages(raw, {"max_msgs": 20, "max_age": 60 * S, "max_bytes": 1_000_000})
    raised = {"name": name, "max_msgs": -1, "max_age": "1h", "max_bytes": 2_000_000, "description": "x"}
    assert create_stream(hub_conn, raised)["action"] == "updated"
    config = raw.info("leaf", name)["config"]
    assert (config["max_msgs"], config["max_age"], config["max_bytes"]) == (-1, 3600 * S, 2_000_000)
    assert messages(raw, name) == 20


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        ({"history": 2}, "max_msgs_per_subject (history): 5 -> 2"),
        ({"ttl": "1h"}, "max_age (ttl): 0 -> 1h"),
        ({"max_bytes": 4096}, "max_bytes: unlimited -> 4096"),
    ],
    ids=["history", "ttl", "max_bytes"],
)
def test_lowering_a_bucket_limit_is_refused_unless_allowed(hub_conn, raw, spec, line) -> None:
    name, seqs = bucket_with_history(hub_conn, raw)
    with pytest.raises(ReconcileError) as refused:
        create_bucket(hub_conn, {"bucket": name, **spec})
    text = str(refused.value)
    assert f"bucket {name!r}" in text and line in text and "allow_data_loss=True" in text, text
    with pytest.raises(ReconcileError, match=r"^dry run: bucket"):
        JetStreamHook(hub_conn).ensure_key_value({"bucket": name, **spec}, domain="leaf", dry_run=True)
    assert revisions(raw, name, seqs) == [b"v0", b"v1", b"v2", b"v3", b"v4"]

    assert create_bucket(hub_conn, {"bucket": name, **spec}, options={"allow_data_loss": True})["action"] == "updated"
    if "history" in spec:
        assert revisions(raw, name, seqs) == [b"v3", b"v4"]


# -- in a real Airflow run ------------------------------------------------------------------------------


def test_refusal_and_opt_in_through_dag_test(airflow_db, hub_conn, raw, capfd) -> None:
    name = stream_with_messages(raw, {})
    capfd.readouterr()
    refused = run_stream({"name": name, "subjects": [name], "max_msgs": 5}, hub_conn)
    assert refused.state == "failed"
    logged = capfd.readouterr().out
    assert "max_msgs: unlimited -> 5" in logged and "allow_data_loss=True" in logged, logged[-3000:]
    assert messages(raw, name) == 20

    allowed = run_stream({"name": name, "subjects": [name], "max_msgs": 5}, hub_conn, allow_data_loss=True)
    assert allowed.state == "success" and xcom(allowed)["action"] == "updated"
    wait_until(lambda: messages(raw, name), lambda n: n == 5, 30, name)

    bucket, seqs = bucket_with_history(hub_conn, raw)
    described = run_bucket({"bucket": bucket, "description": "x"}, hub_conn)
    assert described.state == "success" and xcom(described)["action"] == "updated"
    assert raw.info("leaf", f"KV_{bucket}")["config"]["max_msgs_per_subject"] == 5
    assert revisions(raw, bucket, seqs) == [b"v0", b"v1", b"v2", b"v3", b"v4"]


# -- pure logic -----------------------------------------------------------------------------------------


def test_every_bucket_field_says_which_stream_fields_it_sets() -> None:
    assert set(STREAM_FIELDS) == {f.name for f in KV.fields}
    assert set(KeyValueSpec.from_dict("cfg").stream_spec().named_values()) == {"name"}
    named = KeyValueSpec.from_dict({"bucket": "cfg", "ttl": "1m", "compression": False}).stream_spec().named_values()
    assert named == {"name": "KV_cfg", "max_age": 60 * S, "duplicate_window": 60 * S, "compression": "none"}


def test_which_changes_discard_stored_data() -> None:
    server = {"name": "s", "max_msgs": 20, "max_bytes": -1, "max_age": 0, "max_msgs_per_subject": 3, "max_msg_size": 9}

    def discarding(**spec) -> list[str]:
        diff = diff_config(STREAM, StreamSpec.from_dict({"name": "s", **spec}).named_values(), server)
        return [c.field for c in diff.discarding]

    assert discarding(max_msgs=5, max_bytes=100, max_age="1h", max_msgs_per_subject=2) == [
        "max_msgs",
        "max_bytes",
        "max_age",
        "max_msgs_per_subject",
    ]
    assert discarding(max_msgs=-1, max_bytes=0, max_age=0, max_msgs_per_subject=4) == []  # raised or unlimited
    assert discarding(max_msgs=20, max_msg_size=1, description="x") == []  # unchanged, or not a stored limit
