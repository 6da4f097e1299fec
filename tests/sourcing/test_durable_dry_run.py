"""A durable source's dry run for a new origin (nats-server 2.14+), on real servers: the plan of what would be
created on the leaf and on the hub, and nothing created."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.streams import JetStreamCreateDurableSourceOperator
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from tests.support.management import Raw, uid
from tests.support.natsutil import server_version

DURABLE_SOURCING = (2, 14)


def _conn(jetstream_conn: Callable[..., str], topology: LocalTopology) -> str:
    user, password = USERS["ACC"]
    return jetstream_conn(host=f"127.0.0.1:{topology.hub.port}", login=user, password=password)


def test_a_dry_run_for_a_new_origin_plans_every_object_and_creates_none(
    make_topology: Callable[..., LocalTopology], jetstream_conn: Callable[..., str], airflow_db: Any
) -> None:
    topology = make_topology()
    assert server_version(topology.hub) >= DURABLE_SOURCING, "durable sourcing needs nats-server 2.14+"
    conn, raw = _conn(jetstream_conn, topology), Raw(topology)
    origin, copy = uid("wq"), uid("copy")
    spec = {"name": origin, "subjects": [f"{origin}.>"]}
    hook = JetStreamHook(conn)

    plan = hook.ensure_durable_source(spec, "leaf", copy, domain="hub", dry_run=True)
    assert plan["action"] == "planned"
    for part, domain in (("origin", "leaf"), ("consumer", "leaf"), ("stream", "hub")):
        assert (plan[part]["action"], plan[part]["plan"], plan[part]["domain"]) == ("planned", "create", domain), plan
    assert plan["consumer"]["name"] == f"sourcing-{copy}"
    assert plan["deliver_subject"] == f"_sourcing.{copy}.leaf.{origin}"
    assert raw.info("leaf", origin) is None and raw.info("hub", copy) is None

    # The operator's dry run says the same; then the declaration itself creates what was planned.
    operator = JetStreamCreateDurableSourceOperator(
        task_id="d",
        jetstream_conn_id=conn,
        domain="hub",
        origin=spec,
        origin_domain="leaf",
        stream=copy,
        options={"dry_run": True},
    )
    assert operator.execute({})["action"] == "planned"
    assert raw.info("leaf", origin) is None and raw.info("hub", copy) is None
    made = hook.ensure_durable_source(spec, "leaf", copy, domain="hub")
    assert [made[part]["action"] for part in ("origin", "consumer", "stream")] == ["created"] * 3
    # Declared, the same dry run asks the servers: nothing to change.
    again = hook.ensure_durable_source(spec, "leaf", copy, domain="hub", dry_run=True)
    assert again["action"] == "unchanged", again
