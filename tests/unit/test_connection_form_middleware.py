"""What the connection-form middleware changes, and what it leaves alone (pure logic; the UI test clicks)."""

from __future__ import annotations

import json

from airflow_provider_jetstream.core.connection.fields import EXTRA_FIELDS
from airflow_provider_jetstream.ui.connection_form import connections_response, without_list_port_zero


def test_the_lists_port_zero_means_no_port_for_jetstream_only() -> None:
    body = {"conn_type": "jetstream", "connection_id": "c", "host": "nats://a:4222,nats://b:4222", "port": 0}
    assert "port" not in without_list_port_zero(body)
    assert without_list_port_zero({**body, "port": 4222})["port"] == 4222
    other = {**body, "conn_type": "http"}
    assert without_list_port_zero(other) is other


def test_reads_list_every_jetstream_field_and_keep_what_is_stored() -> None:
    stored = {"conn_type": "jetstream", "extra": json.dumps({"token": "***", "domain": "leaf"})}
    http = {"conn_type": "http", "extra": '{"a": 1}'}
    page = connections_response({"connections": [stored, http], "total_entries": 2})
    extra = json.loads(page["connections"][0]["extra"])
    assert list(extra) == list(EXTRA_FIELDS)
    assert extra["token"] == "***" and extra["domain"] == "leaf" and extra["tls_ca_file"] is None
    assert page["connections"][1] == http
    assert json.loads(connections_response({**stored, "extra": None})["extra"]) == dict.fromkeys(EXTRA_FIELDS)
    assert connections_response({**stored, "extra": "not json"})["extra"] == "not json"
