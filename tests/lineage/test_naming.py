"""The lineage naming (stream and path -> asset URI, OpenLineage namespace and name), the default
server of a connection, outlets given by the DAG author, and the operators run directly on the hub."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from airflow.sdk import Asset, AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_jetstream.assets.lineage import (
    kv_location,
    operator_lineage,
    path_location,
    server_of,
    stream_location,
)
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from airflow_provider_jetstream.operators.streams import (
    JetStreamCreateSourcedStreamOperator,
    JetStreamDeleteStreamOperator,
    JetStreamPurgeStreamOperator,
)
from tests.support.management import Raw, uid


def config(host: str, **extra: Any) -> JetStreamConnectionConfig:
    return JetStreamConnectionConfig.from_fields(conn_id="c", host=host, login="u", password="secret-pw", extra=extra)


@pytest.mark.parametrize(
    ("path", "uri", "namespace", "name"),
    [
        ("/data/out/", "file:///data/out", "file", "/data/out"),
        ("file:///data/out", "file:///data/out", "file", "/data/out"),
        ("s3a://lake/copies/orders/", "s3://lake/copies/orders", "s3://lake", "copies/orders"),
        ("s3://lake/orders", "s3://lake/orders", "s3://lake", "orders"),
        ("gs://lake/orders", "gs://lake/orders", "gs://lake", "orders"),
        (
            "hdfs://namenode:8020/warehouse/orders",
            "hdfs://namenode:8020/warehouse/orders",
            "hdfs://namenode:8020",
            "/warehouse/orders",
        ),
        (
            "abfss://data@acct.dfs.core.windows.net/orders",
            "abfss://data@acct.dfs.core.windows.net/orders",
            "abfss://data@acct.dfs.core.windows.net",
            "orders",
        ),
    ],
)
def test_paths_follow_the_openlineage_naming(path: str, uri: str, namespace: str, name: str) -> None:
    location = path_location(path)
    assert (location.uri, location.namespace, location.name) == (uri, namespace, name)
    assert Asset(uri=location.uri).uri == location.asset().uri == uri
    assert (location.dataset().namespace, location.dataset().name) == (namespace, name)


def test_a_relative_path_is_made_absolute_and_a_bad_one_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert path_location("out").name == str(tmp_path / "out")
    for bad in ("", "hdfs:///no-namenode"):
        with pytest.raises(ValueError, match="is not allowed"):
            path_location(bad)


def test_streams_are_named_by_server_domain_and_stream() -> None:
    hub = stream_location("Hub:4222", "hub", "ORDERS")
    assert (hub.uri, hub.namespace, hub.name) == ("jetstream://hub/hub/ORDERS", "jetstream://hub", "hub/ORDERS")
    assert hub.asset() == Asset("jetstream://hub/hub/ORDERS")  # the asset a DAG author writes by URI
    assert stream_location("h:5222", None, "S").uri == "jetstream://h:5222/_/S"
    assert kv_location("h", "leaf", "config").name == "leaf/KV_config"
    with pytest.raises(ValueError, match=r"stream='a\.b' is not allowed"):
        stream_location("h", None, "a.b")


def test_the_server_is_the_first_host_without_credentials_or_the_asset_server() -> None:
    assert server_of(config("nats://EDGE-1:4222,nats://edge-2:4222")) == "edge-1"
    assert server_of(config("tls://[::1]:7422")) == "[::1]:7422"
    assert server_of(config("ws://edge:8080")) == "edge:8080"
    assert server_of(config("edge-1", asset_server="nats-hub")) == "nats-hub"
    for bad in ("nats://hub", "user@hub", "hub/x", "hub:99999", " "):
        with pytest.raises(JetStreamConfigError, match=r"asset_server=.* is not allowed"):
            config("edge-1", asset_server=bad)


def test_without_the_openlineage_provider_the_facets_are_none(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.extractors", None)
    assert operator_lineage([], [path_location("/x")]) is None


def test_outlets_given_by_the_dag_author_are_kept_as_given() -> None:
    given = [Asset("jetstream://nats-hub/leaf/orders")]
    op = JetStreamPublishOperator(task_id="p", subject="orders.x", messages=["a"], outlets=given)
    assert op.outlets == given and op.lineage_alias is None
    default = JetStreamPublishOperator(task_id="p", subject="orders.x", messages=["a"])
    assert default.outlets == [AssetAlias("jetstream:p")] == [default.lineage_alias]


def test_operators_run_directly_name_the_connections_first_server(hub_leaf, hub_conn) -> None:
    """No asset_server: the server is the connection's host:port; the hub connection has no domain,
    so the domain is the one the hub's JetStream reports."""
    server = f"jetstream://127.0.0.1:{hub_leaf.hub.port}"
    origin = uid("lin-origin")
    Raw(hub_leaf).create("leaf", {"name": origin, "subjects": [f"{origin}.>"]})
    name = uid("lin-agg")
    op = JetStreamCreateSourcedStreamOperator(
        task_id="agg", jetstream_conn_id=hub_conn, stream=name, sources=[{"name": origin, "domain": "leaf"}]
    )
    events = OutletEventAccessors()
    assert op.execute({"outlet_events": events})["action"] == "created"
    facets = op.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in facets.inputs] == [(server, f"leaf/{origin}")]
    assert [(d.namespace, d.name) for d in facets.outputs] == [(server, f"hub/{name}")]
    emitted = events[op.lineage_alias].asset_alias_events
    assert [(e.dest_asset_key.uri, e.extra) for e in emitted] == [(f"{server}/hub/{name}", {"action": "created"})]
    # Published from the hub into the leaf's stream: the PubAcks name stream and domain.
    publish = JetStreamPublishOperator(
        task_id="pub", jetstream_conn_id=hub_conn, subject=f"{origin}.x", messages=["a", "b"], domain="leaf"
    )
    publish.execute({})  # no outlet_events (a bare call): lineage is still recorded
    outputs = publish.get_openlineage_facets_on_complete(None).outputs
    assert [(d.namespace, d.name) for d in outputs] == [(server, f"leaf/{origin}")]
    # Purge and delete: the stream is an output whose lifecycle changed; no alias, no asset event.
    for op, change in (
        (
            JetStreamPurgeStreamOperator(task_id="purge", jetstream_conn_id=hub_conn, stream=origin, domain="leaf"),
            "TRUNCATE",
        ),
        (
            JetStreamDeleteStreamOperator(task_id="delete", jetstream_conn_id=hub_conn, stream=origin, domain="leaf"),
            "DROP",
        ),
    ):
        assert op.outlets == []
        op.execute({})
        (dataset,) = op.get_openlineage_facets_on_complete(None).outputs
        assert (dataset.namespace, dataset.name) == (server, f"leaf/{origin}")
        assert dataset.facets["lifecycleStateChange"].lifecycleStateChange.value == change


def test_partial_is_for_operator_classes_as_airflow_has_it() -> None:
    mapped = JetStreamPublishOperator.partial(task_id="mapped_publish", subject="s").expand(messages=[["m"]])
    assert mapped.operator_class is JetStreamPublishOperator
    task = JetStreamPublishOperator(task_id="direct_publish", subject="s", messages=["m"])
    with pytest.raises(TypeError, match="partial can only be called on Operator classes"):
        task.partial(task_id="again")
