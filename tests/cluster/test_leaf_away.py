"""A cut leaf seen from a 3-node hub: answered at once, not waited out as the hub's own failover, on real servers.

Nobody answering in another domain (``$JS.leaf.API`` through a leaf link) is that domain being away: a
replication check against a cut leaf answers in moments, as on a single server. Nobody answering in the hub's
own domain still is a failover, asked again until a new leader is elected.
"""

from __future__ import annotations

import asyncio
import time

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamDomainUnavailableError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import uid
from tests.support.natsutil import connect_cluster
from tests.support.waiting import scaled, wait_until


def test_a_replication_check_against_a_cut_leaf_answers_within_moments(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    origin, copy = uid("awayorig"), uid("awaycopy")
    leaf = JetStreamHook(cluster_conn, domain="leaf")
    hub = JetStreamHook(cluster_conn, domain="hub")
    leaf.ensure_stream({"name": origin, "subjects": [f"{origin}.>"]})
    hub.ensure_stream({"name": copy, "num_replicas": 3, "sources": [{"name": origin, "domain": "leaf"}]})
    leaf.publish(f"{origin}.a", [b"1", b"2"])
    wait_until(lambda: hub.replication_status(copy).caught_up, bool, what="caught up before the cut")

    hub_cluster.disconnect_leaf("leaf")
    started = time.monotonic()
    check = hub.replication_status(copy, request_timeout=5)
    took = time.monotonic() - started
    assert took < scaled(3), f"the check took {took:.1f}s: the cut leaf was waited out as a hub failover"
    assert not check.caught_up and not check.done
    assert "leaf" in check.table(), check.table()


def test_the_hubs_own_domain_is_still_asked_again_across_a_leader_kill(hub_cluster: LocalTopology) -> None:
    """A request in the hub's domain that meets a dying stream leader is asked again until a node answers it (the
    answer may come before the new leader is elected, on a busy machine: it says so with no leader)."""
    stream = uid("awayr3")

    async def scenario() -> dict:
        nc = await connect_cluster(hub_cluster)
        try:
            api = JetStreamApi(nc, "$JS.hub.API", timeout=2)
            await api.request(
                f"STREAM.CREATE.{stream}", {"name": stream, "subjects": [f"{stream}.>"], "num_replicas": 3}
            )
            leader = await hub_cluster._stream_leader(stream, "ACC", 30)
            await asyncio.to_thread(hub_cluster.kill_hub_node, leader)
            return await api.request(f"STREAM.INFO.{stream}")  # across the election
        finally:
            await nc.close()

    info = asyncio.run(scenario())
    assert info["config"]["name"] == stream and info["state"]["messages"] == 0


def test_a_request_into_a_cut_leaf_fails_at_once_naming_the_leaf(hub_cluster: LocalTopology) -> None:
    hub_cluster.disconnect_leaf("leaf")

    async def ask() -> tuple[float, BaseException | None]:
        nc = await connect_cluster(hub_cluster)
        try:
            started = time.monotonic()
            try:
                await JetStreamApi(nc, "$JS.leaf.API", timeout=5).stream_info("anything")
            except JetStreamDomainUnavailableError as err:
                return time.monotonic() - started, err
            return time.monotonic() - started, None
        finally:
            await nc.close()

    took, error = asyncio.run(ask())
    assert error is not None and took < scaled(2), (took, error)
    assert "domain 'leaf'" in str(error) and "a leaf that is offline" in str(error), error
