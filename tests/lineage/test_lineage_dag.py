"""Lineage of the management, publish and KV operators, run by a real task runner (``dag.test()``) on
the hub + leaf topology: the OpenLineage datasets the provider's ExtractorManager gets, edge -> hub,
and the asset events in the metadata DB that queue a DAG scheduled on the hub stream's asset."""

from __future__ import annotations

import uuid
from typing import Any

from airflow_provider_jetstream.testing.servers import USERS
from tests.support.lineage import alias_registered, asset_events, queued_for, sync_test_dags

NS = "jetstream://lineage-nats"


def acc_conn(jetstream_conn: Any, server: Any) -> str:
    user, password = USERS["ACC"]
    return jetstream_conn(host=f"127.0.0.1:{server.port}", login=user, password=password, asset_server="lineage-nats")


def test_edge_to_hub_lineage_and_the_downstream_dag_is_queued(
    airflow_db, hub_leaf, jetstream_conn, monkeypatch, lineage_capture
) -> None:
    from tests.dags.lineage_pipeline import upstream

    name = f"lin-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("JETSTREAM_LINEAGE_NAME", name)  # the downstream DAG's schedule, when parsed
    edge, hub = acc_conn(jetstream_conn, hub_leaf.leaves["leaf"]), acc_conn(jetstream_conn, hub_leaf.hub)
    sync_test_dags()
    # A mapped task's alias is registered with the DAG, before any instance runs (two instances succeeding at
    # once would otherwise both insert it, and one would fail).
    assert alias_registered("jetstream:lineage_edge_to_hub.put_keys")

    run = upstream.test(run_conf={"edge_conn": edge, "hub_conn": hub, "name": name})

    assert run.state == "success"
    lineage = lineage_capture
    # The edge stream: declared on the leaf (its domain asked from the server), written by the
    # publish (the domain its PubAcks name), read by the hub's mirror: one dataset all along.
    assert lineage.datasets("create_edge", "outputs") == [(NS, f"leaf/{name}")]
    assert lineage.datasets("create_edge", "inputs") == []
    assert lineage.datasets("publish_edge", "outputs") == [(NS, f"leaf/{name}")]
    assert lineage.datasets("mirror_to_hub", "inputs") == [(NS, f"leaf/{name}")]
    assert lineage.datasets("mirror_to_hub", "outputs") == [(NS, f"hub/{name}-hub")]
    # A bucket is its KV_ stream, in the hub's domain.
    assert lineage.datasets("create_bucket", "outputs") == [(NS, f"hub/KV_{name}_cfg")]
    assert lineage.datasets("put_key", "outputs") == [(NS, f"hub/KV_{name}_cfg")]

    # Asset events, through each task's AssetAlias outlet.
    hub_uri = f"{NS}/hub/{name}-hub"
    assert [(e["task_id"], e["extra"]["action"]) for e in asset_events(hub_uri)] == [("mirror_to_hub", "created")]
    published = asset_events(f"{NS}/leaf/{name}")
    assert [e["task_id"] for e in published] == ["create_edge", "publish_edge"]
    assert published[1]["extra"] == {"subject": f"{name}.reading", "first_seq": 1, "last_seq": 3}
    kv = asset_events(f"{NS}/hub/KV_{name}_cfg")
    assert [e["task_id"] for e in kv] == ["create_bucket", "put_key", "put_keys", "put_keys"]
    assert kv[1]["extra"] == {"key": "k", "revision": 1}
    assert sorted(e["extra"]["key"] for e in kv[2:]) == ["a", "b"]
    # The DAG scheduled on Asset("jetstream://lineage-nats/hub/<name>-hub") is queued.
    assert queued_for("lineage_downstream") == [hub_uri]

    # A second run changes nothing: the declarations emit no event (unchanged), the publish does.
    again = upstream.test(run_conf={"edge_conn": edge, "hub_conn": hub, "name": name})
    assert again.state == "success"
    assert len(asset_events(hub_uri)) == 1
    assert [e["task_id"] for e in asset_events(f"{NS}/leaf/{name}")] == ["create_edge", "publish_edge", "publish_edge"]
    assert lineage.datasets("mirror_to_hub", "inputs") == [(NS, f"leaf/{name}")]
