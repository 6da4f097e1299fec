"""Stream operators against real servers (hub + leaf): every reconcile outcome, sources, API levels."""

from __future__ import annotations

import pytest

from airflow_provider_jetstream.core.errors import (
    DoubleStoreError,
    JetStreamApiError,
    JetStreamConfigError,
    ReconcileError,
    SpecErrors,
)
from airflow_provider_jetstream.operators.streams import (
    JetStreamCreateMirrorOperator,
    JetStreamCreateSourcedStreamOperator,
    JetStreamCreateStreamOperator,
    JetStreamDeleteStreamOperator,
    JetStreamPurgeStreamOperator,
)
from tests.support.management import ApiWatch, uid

S = 1_000_000_000


def create(conn: str, stream: dict, domain: str | None = "leaf", **kwargs) -> dict:
    op = JetStreamCreateStreamOperator(task_id=uid("t"), jetstream_conn_id=conn, domain=domain, stream=stream, **kwargs)
    return op.execute({})


def test_create_then_unchanged_costs_one_request(hub_conn, hub_leaf, raw) -> None:
    name = uid()
    spec = {
        "name": name,
        "subjects": [f"{name}.>"],
        "max_age": "1h",
        "duplicate_window": "1m",
        "max_msgs": -1,
        "storage": "file",
        "replicas": 1,
        "metadata": {"owner": "airflow"},
    }
    first = create(hub_conn, spec)
    assert first["action"] == "created" and first["domain"] == "leaf" and first["name"] == name
    assert first["state"]["messages"] == 0
    config = raw.info("leaf", name)["config"]
    assert config["max_age"] == 3600 * S and config["metadata"]["owner"] == "airflow"

    with ApiWatch(hub_leaf.hub.url) as watch:
        second = create(hub_conn, spec)
        # Every request of the operator's connection, seen on the server (not the client's own count).
        sent = watch.requests_of(lambda subject: subject == f"$JS.leaf.API.STREAM.INFO.{name}")
    assert second["action"] == "unchanged" and second["changes"] == {}
    assert second["requests"] == 1 and sent == [f"$JS.leaf.API.STREAM.INFO.{name}"]


def test_update_in_place_keeps_what_the_spec_does_not_name(hub_conn, raw) -> None:
    name = uid()
    raw.create("leaf", {"name": name, "subjects": [name], "max_msgs": 100, "description": "made by hand"})
    # A max_age where there was none may discard stored messages: applied only as asked.
    result = create(hub_conn, {"name": name, "subjects": [name], "max_age": "5m"}, options={"allow_data_loss": True})
    assert result["action"] == "updated"
    assert result["changes"] == {"max_age": {"old": "0", "new": "5m", "in_place": True, "note": "discards stored data"}}
    config = raw.info("leaf", name)["config"]
    assert config["max_age"] == 300 * S
    assert config["max_msgs"] == 100 and config["description"] == "made by hand"  # not reset


def test_replace_forcing_change_fails_listing_old_and_new(hub_conn, raw) -> None:
    name = uid()
    raw.create("leaf", {"name": name, "subjects": [name]})
    with pytest.raises(ReconcileError) as err:
        create(
            hub_conn, {"name": name, "subjects": [name], "storage": "memory", "retention": "workqueue", "max_age": "1m"}
        )
    text = str(err.value)
    assert "storage: 'file' -> 'memory'" in text and "retention: 'limits' -> 'workqueue'" in text
    assert "(also changing in place: max_age)" in text
    assert "if_exists='recreate' would delete the stream" in text and "nothing was changed" in text
    assert raw.info("leaf", name)["config"]["storage"] == "file"


def test_recreate_deletes_and_creates(hub_conn, raw) -> None:
    name = uid()
    raw.create("leaf", {"name": name, "subjects": [name]})
    raw.publish(name, [b"x"], server="leaf")
    result = create(hub_conn, {"name": name, "subjects": [name], "storage": "memory"}, if_exists="recreate")
    assert result["action"] == "recreated" and result["changes"]["storage"]["new"] == "'memory'"
    info = raw.info("leaf", name)
    assert info["config"]["storage"] == "memory" and info["state"]["messages"] == 0


def test_recreate_with_only_in_place_changes_updates(hub_conn, raw) -> None:
    name = uid()
    raw.create("leaf", {"name": name, "subjects": [name], "max_msgs": 5})
    raw.publish(name, [b"x"], server="leaf")
    result = create(hub_conn, {"name": name, "subjects": [name], "max_msgs": 10}, if_exists="recreate")
    assert result["action"] == "updated" and raw.info("leaf", name)["state"]["messages"] == 1


def test_skip_reports_drift_and_changes_nothing(hub_conn, raw) -> None:
    name = uid()
    raw.create("leaf", {"name": name, "subjects": [name]})
    result = create(hub_conn, {"name": name, "subjects": [name], "max_msgs": 5}, if_exists="skip")
    assert result["action"] == "unchanged" and result["skipped"] is True
    assert result["drift"]["max_msgs"]["new"] == "5"
    assert raw.info("leaf", name)["config"]["max_msgs"] == -1


def test_fail_if_exists(hub_conn, raw) -> None:
    name = uid()
    raw.create("leaf", {"name": name, "subjects": [name]})
    with pytest.raises(ReconcileError, match="already exists in domain 'leaf' and if_exists='fail'"):
        create(hub_conn, {"name": name, "subjects": [name]}, if_exists="fail")


def test_dry_run_plans_and_changes_nothing(hub_conn, raw) -> None:
    name = uid()
    planned = create(hub_conn, {"name": name, "subjects": [name]}, options={"dry_run": True})
    assert planned["action"] == "planned" and planned["plan"] == "create"
    assert raw.info("leaf", name) is None
    raw.create("leaf", {"name": name, "subjects": [name]})
    planned = create(hub_conn, {"name": name, "subjects": [name], "description": "d"}, options={"dry_run": True})
    assert planned["action"] == "planned" and planned["plan"] == "update" and "description" in planned["changes"]
    assert "description" not in raw.info("leaf", name)["config"]
    with pytest.raises(ReconcileError, match=r"^dry run: stream"):
        create(hub_conn, {"name": name, "subjects": [name], "storage": "memory"}, options={"dry_run": True})


def test_mirror_and_sourced_stream_across_domains(hub_conn, raw) -> None:
    origin, other = uid("origin"), uid("origin")
    raw.create("leaf", {"name": origin, "subjects": [origin]})
    raw.create("leaf", {"name": other, "subjects": [other]})
    raw.publish(origin, [b"one"], server="leaf")
    mirror = JetStreamCreateMirrorOperator(
        task_id="m",
        jetstream_conn_id=hub_conn,
        domain="hub",
        stream=uid("backup"),
        origin=origin,
        origin_domain="leaf",
        stream_overrides={"max_age": "1d"},
    ).execute({})
    assert mirror["action"] == "created" and mirror["domain"] == "hub"
    assert raw.wait_for("hub", mirror["name"], 1)["config"]["mirror"]["external"]["api"] == "$JS.leaf.API"

    agg = uid("aggregate")
    sourced = JetStreamCreateSourcedStreamOperator(
        task_id="s",
        jetstream_conn_id=hub_conn,
        domain="hub",
        stream=agg,
        sources=[{"name": origin, "domain": "leaf"}, {"name": other, "domain": "leaf"}],
    ).execute({})
    assert sourced["action"] == "created"
    assert raw.wait_for("hub", agg, 1)["state"]["messages"] == 1

    # Updating one source keeps the other (the server has both; the spec names one).
    changed = JetStreamCreateSourcedStreamOperator(
        task_id="s2",
        jetstream_conn_id=hub_conn,
        domain="hub",
        stream=agg,
        sources=[{"name": origin, "domain": "leaf", "filter_subject": origin}],
    ).execute({})
    assert changed["action"] == "updated" and list(changed["changes"]) == ["sources"]
    assert any("kept sources the spec does not name" in n for n in changed["notes"])
    names = sorted(s["name"] for s in raw.info("hub", agg)["config"]["sources"])
    assert names == sorted([origin, other])
    again = JetStreamCreateSourcedStreamOperator(
        task_id="s3",
        jetstream_conn_id=hub_conn,
        domain="hub",
        stream=agg,
        sources=[{"name": origin, "domain": "leaf", "filter_subject": origin}],
    ).execute({})
    assert again["action"] == "unchanged" and again["requests"] == 1
    pruned = JetStreamCreateSourcedStreamOperator(
        task_id="s4",
        jetstream_conn_id=hub_conn,
        domain="hub",
        stream=agg,
        options={"prune_sources": True},
        sources=[{"name": origin, "domain": "leaf", "filter_subject": origin}],
    ).execute({})
    assert pruned["action"] == "updated" and "removes" in pruned["changes"]["sources"]["note"]
    assert [s["name"] for s in raw.info("hub", agg)["config"]["sources"]] == [origin]


def test_field_too_new_for_the_target_is_refused_by_api_level(hub_conn, raw) -> None:
    name = uid()
    spec = {"name": name, "subjects": [name], "allow_msg_ttl": True}
    level = raw.level("leaf")
    if level >= 1:
        assert create(hub_conn, spec)["action"] == "created"
        assert raw.info("leaf", name)["config"]["allow_msg_ttl"] is True
        return
    with pytest.raises(ReconcileError) as err:
        create(hub_conn, spec)
    assert "stream.allow_msg_ttl needs nats-server >= 2.11; domain 'leaf' reports API level 0" in str(err.value)
    assert raw.info("leaf", name) is None
    # Why refuse: this server silently drops the field it does not know.
    raw.create("leaf", {"name": name, "subjects": [name], "allow_msg_ttl": True})
    assert not raw.info("leaf", name)["config"].get("allow_msg_ttl")


def test_strict_api_servers_reject_unknown_fields_and_we_send_none(hub_conn, raw) -> None:
    name = uid()
    reply = raw.api("leaf", f"STREAM.CREATE.{name}", {"name": name, "subjects": [name], "no_such_field": 1})
    if raw.level("leaf") >= 2:
        assert "unknown field" in reply["error"]["description"]
    # Every kind of field the target supports goes through create, update and unchanged.
    spec = {
        "name": name,
        "subjects": [name],
        "description": "d",
        "discard": "new",
        "max_msgs_per_subject": 3,
        "discard_new_per_subject": True,
        "allow_rollup": True,
        "allow_direct": True,
        "compression": "s2",
        "republish": {"src": name, "dest": f"re.{name}"},
        "subject_transform": {"src": name, "dest": name},
        "consumer_limits": {"max_ack_pending": 50},
        "metadata": {"k": "v"},
        "first_seq": 10,
        "placement": {"tags": []},
    }
    if raw.info("leaf", name):  # a lenient (older) server created it, without the limit: it is set in place
        assert create(hub_conn, spec, if_exists="recreate", options={"allow_data_loss": True})["action"] in (
            "recreated",
            "updated",
            "unchanged",
        )
    else:
        assert create(hub_conn, spec)["action"] == "created"
    assert create(hub_conn, spec)["action"] == "unchanged"
    assert create(hub_conn, {**spec, "max_msgs_per_subject": 4})["action"] == "updated"


def test_sealed_is_applied_by_an_update(hub_conn, raw) -> None:
    name = uid()
    result = create(hub_conn, {"name": name, "subjects": [name], "sealed": True})
    assert result["action"] == "created" and raw.info("leaf", name)["config"]["sealed"] is True


def test_validation_fails_before_any_request(hub_conn, quiet_conn, quiet_server) -> None:
    with pytest.raises(SpecErrors, match=r"did you mean 'subjects'"):
        JetStreamCreateStreamOperator(task_id="bad", jetstream_conn_id=hub_conn, stream={"name": "x", "subject": []})
    with pytest.raises(JetStreamConfigError, match="if_exists='replace' is not allowed"):
        JetStreamCreateStreamOperator(task_id="bad", stream={"name": "x"}, if_exists="replace")
    with pytest.raises(JetStreamConfigError, match="both given"):
        JetStreamCreateStreamOperator(task_id="bad", stream={"name": "x"}, domain="hub", api_prefix="JS.acc@hub.API")
    # A templated spec is checked once rendered, before anything is sent: the server, which
    # nothing else uses, accepts no connection and receives no message.
    op = JetStreamCreateStreamOperator(
        task_id="tpl", jetstream_conn_id=quiet_conn, stream={"name": "{{ bad }}", "max_msgs": -7}
    )
    op.stream = {"name": "ok", "max_msgs": -7}
    before = quiet_server.traffic()
    with pytest.raises(SpecErrors, match=r"stream\.max_msgs=-7"):
        op.execute({})
    assert quiet_server.traffic() == before


def test_double_store_refused_unless_opted_in(hub_conn, raw) -> None:
    subject = uid("shared")
    create(hub_conn, {"name": uid(), "subjects": [subject]}, domain="hub")
    name = uid()
    with pytest.raises(DoubleStoreError) as err:
        create(hub_conn, {"name": name, "subjects": [f"{subject}"]}, domain="leaf")
    text = str(err.value)
    assert f"listens on '{subject}'" in text and "stored in both domains" in text
    assert "use different subjects in each domain or use different accounts in each domain" in text
    assert "allow_double_store=True" in text
    assert raw.info("leaf", name) is None
    assert (
        create(hub_conn, {"name": name, "subjects": [subject]}, options={"allow_double_store": True})["action"]
        == "created"
    )
    # Wildcards overlap too; and connected through the leaf, the hub is found via peer_domains.
    with pytest.raises(DoubleStoreError):
        create(
            hub_conn,
            {"name": uid(), "subjects": [f"{subject}.>", "*"]},
            domain="hub",
            options={"peer_domains": ["leaf"]},
        )


def test_delete_and_purge(hub_conn, raw) -> None:
    name = uid()
    raw.create("leaf", {"name": name, "subjects": [f"{name}.*"]})
    raw.publish(f"{name}.a", [b"1", b"2", b"3"], server="leaf")
    raw.publish(f"{name}.b", [b"1", b"2"], server="leaf")
    purged = JetStreamPurgeStreamOperator(
        task_id="p", jetstream_conn_id=hub_conn, domain="leaf", stream=name, subject=f"{name}.a", keep=1
    ).execute({})
    assert purged["purged"] == 2 and raw.info("leaf", name)["state"]["messages"] == 3
    with pytest.raises(SpecErrors, match="give keep or up_to_seq"):
        JetStreamPurgeStreamOperator(task_id="p2", stream=name, keep=1, up_to_seq=3)
    delete = JetStreamDeleteStreamOperator(task_id="d", jetstream_conn_id=hub_conn, domain="leaf", stream=name)
    assert delete.execute({})["deleted"] is True
    assert delete.execute({})["deleted"] is False
    strict = JetStreamDeleteStreamOperator(
        task_id="d2", jetstream_conn_id=hub_conn, domain="leaf", stream=name, ignore_missing=False
    )
    with pytest.raises(JetStreamApiError, match="stream not found"):
        strict.execute({})
