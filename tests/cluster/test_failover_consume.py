"""The consume operator across the death of its consumer's leader on a 3-node hub: nothing lost, the task goes on.

An R3 stream and an R3 durable pull consumer; the operator's function kills the node leading the consumer
a third of the way through. The election (a few seconds) is waited out as any hub node away is: the task
succeeds, every message was processed, and the consumer is left with nothing pending or unacknowledged.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest

from airflow_provider_jetstream.core.consume.deliveries import Delivery
from airflow_provider_jetstream.operators.consume import JetStreamConsumeOperator
from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import Raw, uid
from tests.support.natsutil import connect_cluster
from tests.support.waiting import wait_until

COUNT = 300

pytestmark = pytest.mark.timeout(240)


def hub_api(topology: LocalTopology, suffix: str) -> dict[str, Any]:
    """A JetStream API request to whichever hub node answers (the test kills one)."""

    async def request() -> dict[str, Any]:
        nc = await connect_cluster(topology)
        try:
            return json.loads((await nc.request(f"$JS.hub.API.{suffix}", b"", timeout=5)).data)
        except nats.errors.TimeoutError:
            return {"error": "no answer"}
        finally:
            await nc.close()

    return asyncio.run(request())


def test_the_consume_operator_goes_on_across_its_consumers_leader_kill(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    raw = Raw(hub_cluster)
    name = uid("consume_failover")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"], "num_replicas": 3})
    raw.publish(f"{name}.x", [b"%d" % i for i in range(COUNT)])
    body = {"stream_name": name, "config": {"durable_name": "work", "ack_policy": "explicit", "ack_wait": 30 * 10**9}}
    assert "error" not in raw.api("hub", f"CONSUMER.CREATE.{name}.work", body)
    seen: list[int] = []
    killed: list[int] = []

    def work(message: Delivery) -> int:
        seen.append(message.seq)
        if len(seen) == COUNT // 3 and not killed:
            leader = hub_api(hub_cluster, f"CONSUMER.INFO.{name}.work")["cluster"]["leader"]
            killed.append(hub_cluster.hub_node_named(leader))
            hub_cluster.kill_hub_node(killed[0])
        return message.seq

    result: dict[str, Any] = JetStreamConsumeOperator(
        task_id="consume_failover",
        jetstream_conn_id=cluster_conn,
        domain="hub",
        stream=name,
        consumer="work",
        apply_function=work,
        max_messages=2 * COUNT,
        batch_size=50,
        max_wait=2,
    ).execute({})

    assert killed, "the consumer's leader was never killed"
    assert set(seen) == set(range(1, COUNT + 1)), sorted(set(range(1, COUNT + 1)) - set(seen))[:10]
    # Each message acked once, confirmed by the consumer (one delivered again after the election counts twice).
    assert result["acked"] == result["processed"] >= COUNT, result
    info = wait_until(
        lambda: hub_api(hub_cluster, f"CONSUMER.INFO.{name}.work"),
        lambda info: "error" not in info and info["num_pending"] == 0 and info["num_ack_pending"] == 0,
        60,
        "the consumer drained on the surviving nodes",
    )
    assert info["delivered"]["stream_seq"] == COUNT
