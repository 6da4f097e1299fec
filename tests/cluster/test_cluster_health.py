"""What an operator sees of a clustered stream: its leader and each replica current, lagging or offline."""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.manage.cluster import cluster_health
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.streams import JetStreamCreateStreamOperator
from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import uid
from tests.support.waiting import wait_until


def states(health: dict[str, Any] | None) -> dict[str, str]:
    """``{replica name: state}`` of a health summary ({} on a single server)."""
    return {r["name"]: r["state"] for r in (health or {}).get("replicas", [])}


def test_the_health_of_a_cluster_block_and_of_a_single_server() -> None:
    """Pure logic: the one reading of ``STREAM.INFO``'s ``cluster`` block."""
    block = {
        "name": "c",
        "leader": "n1",
        "replicas": [
            {"name": "n2", "current": True, "active": 1_500_000},
            {"name": "n3", "current": False, "active": 4_000_000_000, "lag": 7},
            {"name": "n4", "current": False, "offline": True, "active": 900_000},
            # Not heard from for 6 s > SILENT_AFTER: offline before the servers flag it so.
            {"name": "n5", "current": True, "active": 6_000_000_000},
        ],
    }
    health = cluster_health(block)
    assert health is not None
    assert states(health) == {"n2": "current", "n3": "lagging", "n4": "offline", "n5": "offline"}
    assert (health["leader"], health["current"], health["lagging"], health["offline"]) == ("n1", 1, 1, 2)
    assert health["healthy"] is False and health["replicas"][1] == {
        "name": "n3",
        "state": "lagging",
        "lag": 7,
        "active_s": 4.0,
    }
    assert health["summary"] == "leader n1; replicas n2 current, n3 lagging (lag 7), n4 offline, n5 offline"
    # No leader elected: said so, never an error.
    assert (
        cluster_health({"replicas": [{"name": "n1", "offline": True}]})["summary"] == "no leader; replicas n1 offline"
    )
    # A single server, or a stream of one replica: nothing to report.
    assert cluster_health(None) is None
    assert cluster_health({"name": "c", "leader": "n1"}) is None
    assert cluster_health({"leader": "n1", "replicas": []}) is None


def test_an_r3_stream_created_by_the_operator_shows_its_leader_and_two_current_replicas(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    name = uid("r3h")
    spec = {"name": name, "subjects": [f"{name}.>"], "replicas": 3}

    def create() -> dict[str, Any]:
        op = JetStreamCreateStreamOperator(task_id=uid("t"), jetstream_conn_id=cluster_conn, domain="hub", stream=spec)
        return op.execute({})

    first = create()
    assert first["action"] == "created"
    health = first["state"]["cluster"]
    assert health["name"] == "hub-cluster"
    assert health["leader"] in {node.name for node in hub_cluster.hubs}
    assert len(health["replicas"]) == 2 and health["leader"] not in states(health)
    # Replicas catch up with the new leader a moment after the create: the next run (unchanged) says so.
    again = wait_until(
        create, lambda xcom: set(states(xcom["state"]["cluster"]).values()) == {"current"}, what="2 current replicas"
    )
    assert again["action"] == "unchanged" and again["state"]["cluster"]["healthy"] is True


def test_a_killed_node_shows_offline_in_the_replication_status_then_current_after_its_restart(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    origin, aggregate = uid("edge"), uid("agg")
    leaf = JetStreamHook(cluster_conn, domain="leaf")
    hub = JetStreamHook(cluster_conn, domain="hub")
    leaf.ensure_stream({"name": origin, "subjects": [f"{origin}.>"]})
    hub.ensure_stream({"name": aggregate, "sources": [{"name": origin, "domain": "leaf"}], "num_replicas": 3})
    leaf.publish(f"{origin}.a", [b"1", b"2", b"3"])

    def status() -> dict[str, Any]:
        return hub.replication_status(aggregate).to_xcom()

    ready = wait_until(
        status,
        lambda x: x["caught_up"] and set(states(x.get("cluster")).values()) == {"current"},
        what="caught up with every replica current",
    )
    leader = ready["cluster"]["leader"]
    victim = next(i for i, node in enumerate(hub_cluster.hubs) if node.name != leader)
    victim_name = hub_cluster.hubs[victim].name
    hub_cluster.kill_hub_node(victim)

    down = wait_until(
        status, lambda x: states(x.get("cluster")).get(victim_name) == "offline", what=f"{victim_name} offline"
    )
    assert down["cluster"]["healthy"] is False and down["cluster"]["offline"] == 1
    check = hub.replication_status(aggregate)
    assert f"{victim_name} offline" in check.table().splitlines()[-1]  # the sensor's logged table

    hub_cluster.start_hub_node(victim)
    back = wait_until(
        status, lambda x: states(x.get("cluster")).get(victim_name) == "current", what=f"{victim_name} current again"
    )
    assert back["caught_up"] is True


def test_a_single_server_shows_nothing_extra(hub_leaf: LocalTopology, hub_conn: str) -> None:
    name = uid("r1")
    op = JetStreamCreateStreamOperator(
        task_id=uid("t"), jetstream_conn_id=hub_conn, domain="hub", stream={"name": name, "subjects": [f"{name}.>"]}
    )
    assert "cluster" not in op.execute({})["state"]
