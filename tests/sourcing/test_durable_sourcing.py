"""Durable sourcing (nats-server 2.14+) against real servers: set up by one operator through ``dag.test()``,
each leaf message stored once in the hub and deleted on the leaf only once the hub has it, a cut leaf that
keeps its data while the sensor waits, and the refusal, before anything is sent, on older servers."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from airflow_provider_jetstream.core.errors import ReconcileError, SpecErrors
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from tests.dags import sensors_replication_lag as sensor_dags
from tests.dags.management_durable_source import dag as durable_dag
from tests.support.logs import captured_logs
from tests.support.management import Raw, uid
from tests.support.natsutil import server_version
from tests.support.reconcile_dags import xcom
from tests.support.waiting import Later, wait_until

DURABLE_SOURCING = (2, 14)


def _conn(jetstream_conn: Any, topology: LocalTopology) -> str:
    user, password = USERS["ACC"]
    return jetstream_conn(host=f"127.0.0.1:{topology.hub.port}", login=user, password=password)


def _origin(name: str) -> dict[str, Any]:
    return {"name": name, "subjects": [f"{name}.>"], "storage": "file"}


def _run(conn: str, name: str, origin: dict[str, Any], **params: Any) -> Any:
    return durable_dag.test(
        run_conf={
            "conn_id": conn,
            "name": name,
            "origin": origin,
            "origin_domain": "leaf",
            "unreachable_origins": "wait",
            **params,
        }
    )


def _durable_source(make_topology: Any, jetstream_conn: Any) -> tuple[LocalTopology, Raw, str, JetStreamHook, str, str]:
    """A hub and a leaf (2.14+), and a durable source of a new leaf work queue into a new hub stream: the
    topology, its raw client, the connection id, a hook on it, the origin's and the copy's names."""
    topology = make_topology()
    assert server_version(topology.hub) >= DURABLE_SOURCING, "durable sourcing needs nats-server 2.14+"
    origin, copy, conn = uid("wq"), uid("copy"), _conn(jetstream_conn, topology)
    hook = JetStreamHook(conn)
    hook.ensure_durable_source(_origin(origin), "leaf", copy, domain="hub")
    return topology, Raw(topology), conn, hook, origin, copy


def _leaf_info(raw: Raw, stream: str) -> dict[str, Any]:
    """The leaf stream's info asked of the leaf server itself (it answers while cut off)."""
    return raw.request(f"$JS.leaf.API.STREAM.INFO.{stream}", server="leaf")


def _hub_payloads(raw: Raw, stream: str) -> list[str]:
    info = raw.info("hub", stream) or {}
    state = info.get("state") or {}
    payloads = []
    for seq in range(int(state.get("first_seq") or 1), int(state.get("last_seq") or 0) + 1):
        reply = raw.api("hub", f"STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in reply:
            payloads.append(base64.b64decode(reply["message"].get("data") or "").decode())
    return payloads


def test_one_operator_sets_up_durable_sourcing_each_message_lands_once_and_the_leaf_drains(
    airflow_db, make_topology, jetstream_conn
) -> None:
    topology = make_topology()
    assert server_version(topology.hub) >= DURABLE_SOURCING, "durable sourcing needs nats-server 2.14+"
    raw, conn = Raw(topology), _conn(jetstream_conn, topology)
    origin, copy = uid("wq"), uid("copy")

    first = _run(conn, copy, _origin(origin))
    assert first.get_task_instance("durable_source").state == "success"
    made = xcom(first, "durable_source")
    assert (made["action"], made["origin"]["action"], made["consumer"]["action"], made["stream"]["action"]) == (
        "created",
        "created",
        "created",
        "created",
    )
    consumer = raw.request(f"$JS.leaf.API.CONSUMER.INFO.{origin}.sourcing-{copy}", server="leaf")["config"]
    assert (consumer["ack_policy"], consumer["deliver_subject"], consumer["flow_control"]) == (
        "flow_control",
        f"_sourcing.{copy}.leaf.{origin}",
        True,
    )
    assert _leaf_info(raw, origin)["config"]["retention"] == "workqueue"
    source = raw.info("hub", copy)["config"]["sources"][0]
    assert source["consumer"] == {"name": f"sourcing-{copy}", "deliver_subject": f"_sourcing.{copy}.leaf.{origin}"}

    sent = [f"reading-{i}" for i in range(200)]
    raw.publish(f"{origin}.site", [p.encode() for p in sent], server="leaf")
    raw.wait_for("hub", copy, len(sent))
    drained = wait_until(lambda: _leaf_info(raw, origin), lambda i: i["state"]["messages"] == 0, what="leaf drained")
    assert drained["state"]["last_seq"] == len(sent)
    assert _hub_payloads(raw, copy) == sent  # each once, in order

    # The same declaration again: nothing to change; the sensor's check says why the leaf counts as caught up.
    second = _run(conn, copy, _origin(origin))
    again = xcom(second, "durable_source")
    assert [again[k]["action"] for k in ("origin", "consumer", "stream")] == ["unchanged"] * 3
    report = xcom(second, "replicated")
    (verdict,) = report["origins"]
    assert (report["caught_up"], verdict["check"], verdict["consumer"]) == (True, "durable", f"sourcing-{copy}")
    assert "the origin's stream is drained" in verdict["reason"], verdict


def test_a_cut_leaf_keeps_its_data_the_sensor_waits_and_everything_arrives_once_after_the_link_is_back(
    airflow_db, make_topology, jetstream_conn
) -> None:
    topology, raw, conn, hook, origin, copy = _durable_source(make_topology, jetstream_conn)
    raw.publish(f"{origin}.a", [b"before-%d" % i for i in range(50)], server="leaf")
    raw.wait_for("hub", copy, 50)
    wait_until(lambda: _leaf_info(raw, origin), lambda i: i["state"]["messages"] == 0, what="leaf drained")

    topology.disconnect_leaf("leaf")
    raw.publish(f"{origin}.a", [b"during-%d" % i for i in range(70)], server="leaf")
    # While away the leaf deletes nothing the hub has not stored: all 70 wait on the leaf.
    assert _leaf_info(raw, origin)["state"]["messages"] == 70
    check = hook.replication_status(copy, domain="hub")
    (verdict,) = check.verdicts
    assert (check.caught_up, verdict.check) == (False, "unreachable")
    assert (raw.info("hub", copy) or {})["state"]["messages"] == 50

    async def relink_once_the_sensor_waits() -> None:
        await logs.wait_for(f"Stream {copy!r}: waiting:", timeout=60)
        await asyncio.to_thread(topology.reconnect_leaf, "leaf")

    with captured_logs() as logs:
        relinker = Later(relink_once_the_sensor_waits)
        relinker.start()
        run = sensor_dags.sensors_replication_lag_deferrable.test(
            run_conf={"conn_id": conn, "domain": "hub", "stream": copy}
        )
        relinker.finish()
    assert run.get_task_instance("wait_for_replication").state == "success"
    report = xcom(run, "wait_for_replication")
    assert report["caught_up"] is True and report["origins"][0]["check"] == "durable"
    assert _leaf_info(raw, origin)["state"]["messages"] == 0
    assert _hub_payloads(raw, copy) == [f"before-{i}" for i in range(50)] + [f"during-{i}" for i in range(70)]


def test_durable_sourcing_is_set_up_on_2_14_and_refused_before_anything_is_sent_on_older_servers(
    make_topology, jetstream_conn
) -> None:
    """On nats-server 2.14+ the three objects are created; on 2.10 and 2.12 the call is refused from the
    domain's API level, and neither domain holds anything of it (a 2.10 hub would silently drop the
    source's consumer and copy the work queue the ordinary way, losing what was not yet copied)."""
    topology = make_topology()
    raw, conn = Raw(topology), _conn(jetstream_conn, topology)
    origin, copy = uid("wq"), uid("copy")
    hook = JetStreamHook(conn)
    if server_version(topology.hub) >= DURABLE_SOURCING:
        result = hook.ensure_durable_source(_origin(origin), "leaf", copy, domain="hub")
        assert result["action"] == "created"
        assert raw.info("hub", copy)["config"]["sources"][0]["consumer"]["name"] == f"sourcing-{copy}"
        return
    level = raw.level("leaf")
    with pytest.raises(ReconcileError) as refused:
        hook.ensure_durable_source(_origin(origin), "leaf", copy, domain="hub")
    assert str(refused.value) == (
        f"consumer.ack_policy needs nats-server >= 2.14; domain 'leaf' reports API level {level} "
        "(API level 4 = nats-server 2.14); nothing was sent"
    )
    assert raw.info("leaf", origin) is None and raw.info("hub", copy) is None


def test_adding_a_durable_source_to_an_existing_stream_is_gated_like_creating_one(
    make_topology, jetstream_conn
) -> None:
    """An update that adds a source's ``consumer`` needs the hub's API level 4 as a create does: 2.14+ updates
    the stream in place; 2.10 and 2.12 are refused, naming the field, and the stream keeps its config."""
    topology = make_topology()
    raw, conn = Raw(topology), _conn(jetstream_conn, topology)
    copy = uid("copy")
    hook = JetStreamHook(conn)
    plain = {"name": copy, "sources": [{"name": "elsewhere", "domain": "leaf"}]}
    assert hook.ensure_stream(plain, domain="hub")["action"] == "created"
    consumer = {"name": "sourcing-x", "deliver_subject": f"_sourcing.{copy}"}
    durable = {"name": copy, "sources": [{"name": "orders", "domain": "leaf", "consumer": consumer}]}
    if server_version(topology.hub) >= DURABLE_SOURCING:
        assert hook.ensure_stream(durable, domain="hub")["action"] == "updated"
        sources = {s["name"]: s.get("consumer") for s in raw.info("hub", copy)["config"]["sources"]}
        assert sources == {"elsewhere": None, "orders": consumer}  # the other source kept
        return
    level = raw.level("hub")
    with pytest.raises(ReconcileError) as refused:
        hook.ensure_stream(durable, domain="hub")
    assert str(refused.value) == (
        f"stream.sources[0].consumer needs nats-server >= 2.14; domain 'hub' reports API level {level} "
        "(API level 4 = nats-server 2.14); nothing was sent"
    )
    assert [s["name"] for s in raw.info("hub", copy)["config"]["sources"]] == ["elsewhere"]


def test_an_interest_origin_is_caught_up_once_the_hub_stored_everything_and_keeps_what_its_own_consumer_needs(
    make_topology, jetstream_conn
) -> None:
    topology = make_topology()
    assert server_version(topology.hub) >= DURABLE_SOURCING, "durable sourcing needs nats-server 2.14+"
    raw, conn = Raw(topology), _conn(jetstream_conn, topology)
    origin, copy = uid("interest"), uid("copy")
    hook = JetStreamHook(conn)
    hook.ensure_durable_source({**_origin(origin), "retention": "interest"}, "leaf", copy, domain="hub")
    hook.ensure_consumer(origin, {"name": "local", "ack_policy": "explicit"}, domain="leaf")
    raw.publish(f"{origin}.a", [b"%d" % i for i in range(40)], server="leaf")
    raw.wait_for("hub", copy, 40)

    def verdict() -> Any:
        return hook.replication_status(copy, domain="hub").verdicts[0]

    caught = wait_until(verdict, lambda v: v.caught_up, what="durable source caught up")
    assert caught.check == "durable"
    assert caught.reason.endswith("the origin keeps them for its 1 other consumers"), caught.reason
    # The hub has them all; the leaf keeps them for its local consumer, which has not acknowledged them.
    assert _leaf_info(raw, origin)["state"]["messages"] == 40
    assert _hub_payloads(raw, copy) == [str(i) for i in range(40)]


def test_a_deliver_subject_a_hub_stream_listens_on_is_refused_before_anything_is_created(
    make_topology, jetstream_conn
) -> None:
    topology = make_topology()
    assert server_version(topology.hub) >= DURABLE_SOURCING, "durable sourcing needs nats-server 2.14+"
    raw, conn = Raw(topology), _conn(jetstream_conn, topology)
    origin, copy, catch_all = uid("wq"), uid("copy"), uid("catch")
    raw.create("hub", {"name": catch_all, "subjects": ["_sourcing.>"]})
    with pytest.raises(SpecErrors) as refused:
        JetStreamHook(conn).ensure_durable_source(_origin(origin), "leaf", copy, domain="hub")
    assert f"a stream listens there (stream {catch_all!r} in domain 'hub')" in str(refused.value)
    assert raw.info("leaf", origin) is None and raw.info("hub", copy) is None


def test_a_durable_mirror_copies_each_message_once_and_is_caught_up_only_once_the_leaf_is_drained(
    make_topology, jetstream_conn
) -> None:
    """A mirror that names a flow-control ``consumer`` (nats-server 2.14+): the hub mirror stores each leaf message
    once (same sequences), the leaf's work-queue stream drains as the hub acknowledges, and the replication
    check says caught up only when the leaf is drained (a cut leaf keeps what the hub has not stored)."""
    topology = make_topology()
    assert server_version(topology.hub) >= DURABLE_SOURCING, "durable mirrors need nats-server 2.14+"
    raw, conn = Raw(topology), _conn(jetstream_conn, topology)
    origin, copy = uid("wq"), uid("mirror")
    hook = JetStreamHook(conn)
    deliver = f"_sourcing.{copy}.leaf.{origin}"
    hook.ensure_stream({**_origin(origin), "retention": "workqueue"}, domain="leaf")
    consumer = {"name": f"sourcing-{copy}", "ack_policy": "flow_control", "deliver_subject": deliver}
    hook.ensure_consumer(origin, consumer, domain="leaf")
    mirror = {"name": origin, "domain": "leaf", "consumer": {"name": f"sourcing-{copy}", "deliver_subject": deliver}}
    assert hook.ensure_stream({"name": copy, "mirror": mirror}, domain="hub")["action"] == "created"
    assert raw.info("hub", copy)["config"]["mirror"]["consumer"] == mirror["consumer"]

    sent = [f"reading-{i}" for i in range(150)]
    raw.publish(f"{origin}.site", [p.encode() for p in sent], server="leaf")
    raw.wait_for("hub", copy, len(sent))
    wait_until(lambda: _leaf_info(raw, origin), lambda i: i["state"]["messages"] == 0, what="leaf drained")
    assert _hub_payloads(raw, copy) == sent
    assert raw.info("hub", copy)["state"]["last_seq"] == len(sent)  # a mirror keeps the origin's sequences
    verdict = wait_until(lambda: hook.replication_status(copy, domain="hub").verdicts[0], lambda v: v.caught_up)
    assert verdict.check == "durable" and "the origin's stream is drained" in verdict.reason, verdict
    assert hook.ensure_stream({"name": copy, "mirror": mirror}, domain="hub")["action"] == "unchanged"

    topology.disconnect_leaf("leaf")
    raw.publish(f"{origin}.site", [b"during-%d" % i for i in range(30)], server="leaf")
    assert _leaf_info(raw, origin)["state"]["messages"] == 30  # nothing deleted the hub has not stored
    assert hook.replication_status(copy, domain="hub").caught_up is False
    topology.reconnect_leaf("leaf")
    raw.wait_for("hub", copy, len(sent) + 30)
    wait_until(lambda: _leaf_info(raw, origin), lambda i: i["state"]["messages"] == 0, what="leaf drained again")
    caught = wait_until(lambda: hook.replication_status(copy, domain="hub"), lambda c: c.caught_up)
    assert caught.verdicts[0].check == "durable"
    assert _hub_payloads(raw, copy) == sent + [f"during-{i}" for i in range(30)]


def test_moving_a_durable_sources_deliver_subject_is_refused_before_anything_changes_and_the_copy_goes_on(
    make_topology, jetstream_conn
) -> None:
    """Measured on 2.15: the server refuses to move the consumer ("consumer name already in use") and takes the
    hub source's new deliver subject, after which the hub stops acknowledging and the leaf never drains. So a
    changed deliver subject is refused up front (the durable source, the stream's source, the consumer alike),
    nothing changes, and the copy goes on draining the leaf."""
    _, raw, _, hook, origin, copy = _durable_source(make_topology, jetstream_conn)
    old, new = f"_sourcing.{copy}.leaf.{origin}", f"_moved.{copy}"
    raw.publish(f"{origin}.a", [b"before-%d" % i for i in range(50)], server="leaf")
    raw.wait_for("hub", copy, 50)

    def state() -> tuple[Any, Any]:
        consumer = raw.request(f"$JS.leaf.API.CONSUMER.INFO.{origin}.sourcing-{copy}", server="leaf")["config"]
        return consumer["deliver_subject"], raw.info("hub", copy)["config"]["sources"][0]["consumer"]

    before = state()
    assert before == (old, {"name": f"sourcing-{copy}", "deliver_subject": old})
    with pytest.raises(ReconcileError) as refused:
        hook.ensure_durable_source(_origin(origin), "leaf", copy, domain="hub", deliver_subject=new)
    assert f"the origin's consumer 'sourcing-{copy}' pushes to {old!r}" in str(refused.value)
    assert f"it cannot move to consumer 'sourcing-{copy}' at {new!r} in place" in str(refused.value)
    assert "the origin would never drain; nothing was changed" in str(refused.value)
    moved = {"name": origin, "domain": "leaf", "consumer": {"name": f"sourcing-{copy}", "deliver_subject": new}}
    with pytest.raises(ReconcileError, match=r"(?s)cannot be changed in place.*\.consumer: sourcing-.* -> .*_moved"):
        hook.ensure_stream({"name": copy, "sources": [moved]}, domain="hub")
    consumer = {"name": f"sourcing-{copy}", "ack_policy": "flow_control", "deliver_subject": new}
    with pytest.raises(ReconcileError, match=r"(?s)cannot be changed in place.*deliver_subject"):
        hook.ensure_consumer(origin, consumer, domain="leaf")
    assert state() == before

    raw.publish(f"{origin}.a", [b"after-%d" % i for i in range(30)], server="leaf")
    raw.wait_for("hub", copy, 80)
    wait_until(lambda: _leaf_info(raw, origin), lambda i: i["state"]["messages"] == 0, what="leaf drained")
    assert wait_until(lambda: hook.replication_status(copy, domain="hub"), lambda c: c.caught_up).caught_up
    assert _hub_payloads(raw, copy) == [f"before-{i}" for i in range(50)] + [f"after-{i}" for i in range(30)]
