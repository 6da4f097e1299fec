"""The 3-node hub cluster fixture: R3 streams, a leader that can be killed, a leaf linked to every node."""

from __future__ import annotations

import pytest

from airflow_provider_jetstream.core.errors import JetStreamNotFoundError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import uid


def test_an_r3_stream_survives_its_leaders_death_and_the_leaf_is_linked_to_every_node(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    name = uid("r3")
    hook = JetStreamHook(cluster_conn, domain="hub")
    assert hook.ensure_stream({"name": name, "subjects": [f"{name}.>"], "num_replicas": 3})["action"] == "created"
    hook.publish(f"{name}.a", [b"1", b"2"])
    leader = hub_cluster.stream_leader(name)
    hub_cluster.kill_hub_node(leader)
    assert hub_cluster.stream_leader(name) != leader
    assert hook.stream_info(name)["state"]["messages"] == 2
    # The leaf's domain answers through the surviving nodes (its remotes list every node).
    with pytest.raises(JetStreamNotFoundError, match="does not exist in domain 'leaf'"):
        JetStreamHook(cluster_conn, domain="leaf").stream_info(uid("absent"))
