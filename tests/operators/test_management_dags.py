"""The management operators through ``dag.test()``: the docs' seed scenario, cross-account access,
every reconcile outcome, validation errors and the double-store refusal."""

from __future__ import annotations

import asyncio
import base64

import nats

from airflow_provider_jetstream.testing.servers import USERS
from tests.dags.management_seed import dag as seed_dag
from tests.support.management import Raw, uid
from tests.support.reconcile_dags import run_bucket, run_stream, xcom

CREATE_TASKS = [
    "stream_test_leaf",
    "stream_test_hub",
    "backup_test_leaf",
    "aggregate_test_leaf",
    "consumer_dur",
    "aggregate_test_leaf_from_acc",
]


def conn_for(jetstream_conn, server, account: str = "ACC") -> str:
    user, password = USERS[account]
    return jetstream_conn(host=f"127.0.0.1:{server.port}", login=user, password=password)


def test_seed_scenario_and_cross_account_access(airflow_db, make_topology, jetstream_conn) -> None:
    topology = make_topology()  # private: the seed's names (test, dur...) are fixed by accounts.conf
    raw = Raw(topology)
    conn = conn_for(jetstream_conn, topology.hub)
    mirror_conn = conn_for(jetstream_conn, topology.hub, "IMPORT_MIRROR")
    params = {"conn_id": conn, "import_mirror_conn_id": mirror_conn}

    first = seed_dag.test(run_conf=params)
    assert first.state == "success"
    assert {t: xcom(first, t)["action"] for t in CREATE_TASKS} == dict.fromkeys(CREATE_TASKS, "created")
    published = xcom(first, "publish_once")
    assert published["count"] == 1 and published["duplicates"] == 0
    # The docs' demonstration: one publish, stored by `test` in both domains.
    assert raw.wait_for("leaf", "test", 1)["state"]["messages"] == 1
    assert raw.wait_for("hub", "test", 1)["state"]["messages"] == 1
    assert raw.wait_for("hub", "backup-test-leaf", 1)["state"]["messages"] == 1
    assert raw.wait_for("hub", "aggregate-test-leaf", 1)["state"]["messages"] == 1
    from_acc = raw.request("$JS.hub.API.STREAM.INFO.aggregate-test-leaf-from-acc", account="IMPORT_MIRROR")
    assert from_acc["config"]["mirror"]["external"] == {
        "api": "JS.acc@hub.API",
        "deliver": "deliver.acc.hub.import_mirror.hub.aggregate-test-leaf-from-acc",
    }

    # The cross-account mirror carries the data: IMPORT_MIRROR's stream holds the published message.
    mirrored = raw.wait_for("hub", "aggregate-test-leaf-from-acc", 1, account="IMPORT_MIRROR")
    assert mirrored["state"]["messages"] == 1
    assert stored_message(raw, "aggregate-test-leaf-from-acc", 1, "IMPORT_MIRROR") == ("test", b"hello world")

    # Cross-account pull: IMPORT_CLIENT, attached to the leaf, pulls `dur` through JS.acc@hub.API.
    async def pull_from_leaf() -> bytes:
        user, password = USERS["IMPORT_CLIENT"]
        nc = await nats.connect(topology.leaves["leaf"].url, user=user, password=password)
        try:
            js = nc.jetstream(prefix="JS.acc@hub.API")
            sub = await js.pull_subscribe_bind("dur", "aggregate-test-leaf")
            msg = (await sub.fetch(1, timeout=30))[0]
            await msg.ack()
            return msg.data
        finally:
            await nc.close()

    assert asyncio.run(pull_from_leaf()) == b"hello world"

    second = seed_dag.test(run_conf=params)
    assert second.state == "success"
    for task_id in CREATE_TASKS:
        result = xcom(second, task_id)
        assert (result["action"], result["changes"], result["requests"]) == ("unchanged", {}, 1), (task_id, result)
    assert raw.wait_for("hub", "backup-test-leaf", 2)["state"]["messages"] == 2  # the second run's publish
    assert raw.wait_for("hub", "aggregate-test-leaf-from-acc", 2, account="IMPORT_MIRROR")["state"]["messages"] == 2
    assert stored_message(raw, "aggregate-test-leaf-from-acc", 2, "IMPORT_MIRROR") == ("test", b"hello world")


def stored_message(raw: Raw, stream: str, seq: int, account: str) -> tuple[str, bytes]:
    """``(subject, data)`` of message ``seq`` of a hub stream, read in ``account``."""
    reply = raw.request(f"$JS.hub.API.STREAM.MSG.GET.{stream}", {"seq": seq}, account=account)
    assert "error" not in reply, reply
    return reply["message"]["subject"], base64.b64decode(reply["message"]["data"])


def test_every_reconcile_outcome_through_dag_test(airflow_db, hub_conn, raw, capfd) -> None:
    name = uid("dag")
    spec = {"name": name, "subjects": [name], "max_age": "1h"}
    outcomes = []
    for params, expected in [
        ({"spec": spec, "dry_run": True}, "planned"),
        ({"spec": spec}, "created"),
        ({"spec": spec}, "unchanged"),
        ({"spec": {**spec, "max_age": "2h"}}, "updated"),
        ({"spec": {**spec, "max_msgs": 5}, "if_exists": "skip"}, "unchanged"),
        ({"spec": {**spec, "max_age": "2h", "storage": "memory"}, "if_exists": "recreate"}, "recreated"),
    ]:
        run = run_stream(conn=hub_conn, **params)
        assert run.state == "success", params
        result = xcom(run)
        outcomes.append(result["action"])
        assert result["action"] == expected, (params, result)
        if expected == "unchanged" and "if_exists" not in params:
            assert result["requests"] == 1
    assert raw.info("leaf", name)["config"]["storage"] == "memory"

    for params, message in [
        ({"spec": {**spec, "storage": "file"}}, "storage: 'memory' -> 'file'"),
        ({"spec": spec, "if_exists": "fail"}, "if_exists='fail'"),
        ({"spec": {"name": name, "subjets": [name]}}, "did you mean 'subjects'"),
        ({"spec": {"name": "bad name"}}, "stream.name='bad name' is not allowed"),
        ({"spec": {"name": name, "max_msgs": -3}}, "stream.max_msgs=-3 is not allowed"),
        ({"spec": {"name": name, "mirror": {"name": "x"}, "subjects": ["y"]}}, "a mirror has no subjects"),
    ]:
        capfd.readouterr()
        run = run_stream(conn=hub_conn, **params)
        assert run.state == "failed", params
        logged = capfd.readouterr().out
        assert message in logged, (message, logged[-3000:])


def test_double_store_refusal_through_dag_test(airflow_db, hub_conn, raw, capfd) -> None:
    name = uid("kv")
    hub_run = run_bucket({"bucket": name}, hub_conn, domain="hub")
    assert hub_run.state == "success" and xcom(hub_run)["action"] == "created"
    capfd.readouterr()
    leaf_run = run_bucket({"bucket": name}, hub_conn)
    assert leaf_run.state == "failed"
    logged = capfd.readouterr().out
    assert f"bucket {name!r} also exists in 'hub'" in logged
    assert "use different subjects in each domain or use different accounts" in logged
    assert raw.info("leaf", f"KV_{name}") is None
    forced = run_bucket({"bucket": name}, hub_conn, allow_double_store=True)
    assert forced.state == "success" and xcom(forced)["action"] == "created"


def test_server_too_old_through_dag_test(airflow_db, hub_conn, raw, capfd) -> None:
    name = uid("ttl")
    capfd.readouterr()
    run = run_stream({"name": name, "subjects": [name], "allow_msg_ttl": True}, hub_conn)
    if raw.level("leaf") >= 1:
        assert run.state == "success" and xcom(run)["action"] == "created"
    else:
        assert run.state == "failed"
        logged = capfd.readouterr().out
        assert "stream.allow_msg_ttl needs nats-server >= 2.11; domain 'leaf' reports API level 0" in logged
