"""JetStreamPublishOperator: bounded in-flight publish, one Nats-Msg-Id per message, ack checks."""

from __future__ import annotations

import pytest

from airflow_provider_jetstream.core.errors import DoubleStoreError, JetStreamConfigError, JetStreamPublishError
from airflow_provider_jetstream.core.publish.messages import msg_id_parts
from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from tests.support.management import uid


def publish(conn: str, subject: str, **kwargs) -> dict:
    kwargs.setdefault("msg_id", "run-1/{index}")
    return JetStreamPublishOperator(task_id=uid("pub"), jetstream_conn_id=conn, subject=subject, **kwargs).execute({})


def test_publish_counts_and_retry_stores_nothing_twice(hub_conn, raw) -> None:
    name = uid()
    raw.create("leaf", {"name": name, "subjects": [f"{name}.>"]})
    messages = [{"i": i} for i in range(500)] + ["text", b"bytes"]
    first = publish(hub_conn, f"{name}.x", messages=messages, domain="leaf", options={"max_in_flight": 64})
    assert first["count"] == 502 and first["stored"] == 502 and first["duplicates"] == 0
    assert (first["first_seq"], first["last_seq"]) == (1, 502)
    assert first["stream"] == name and first["domain"] == "leaf"
    retry = publish(hub_conn, f"{name}.x", messages=messages, domain="leaf")
    assert retry["duplicates"] == 502 and retry["stored"] == 0
    assert raw.info("leaf", name)["state"]["messages"] == 502
    generated = publish(
        hub_conn,
        f"{name}.y",
        messages_function=lambda n: (str(i) for i in range(n)),
        messages_function_kwargs={"n": 10},
        msg_id="gen/{index}",
        domain="leaf",
    )
    assert generated["stored"] == 10 and generated["first_seq"] == 503


def test_publish_checks_the_domain_and_the_guard(hub_conn, raw) -> None:
    name = uid()
    raw.create("hub", {"name": name, "subjects": [name]})
    with pytest.raises(DoubleStoreError, match=f"stream '{name}' in domain 'hub' listens on '{name}'"):
        publish(hub_conn, name, messages=["a"], domain="leaf")
    # Forced past the guard, every ack is still checked: they come from the wrong domain.
    with pytest.raises(JetStreamPublishError, match=f"stored outside domain 'leaf': 3 by stream '{name}' in domain"):
        publish(hub_conn, name, messages=["a", "b", "c"], domain="leaf", options={"allow_double_store": True})
    twin = uid()
    raw.create("leaf", {"name": twin, "subjects": [name]})
    with pytest.raises(DoubleStoreError, match="stored in both domains"):
        publish(hub_conn, name, messages=["a"], domain="hub", options={"peer_domains": ["leaf"]})
    # A hub stream that mirrors from the leaf tells the guard the leaf is connected.
    raw.create("hub", {"name": uid("m"), "mirror": {"name": twin, "external": {"api": "$JS.leaf.API"}}})
    with pytest.raises(DoubleStoreError, match=f"stream '{twin}' in domain 'leaf'"):
        publish(hub_conn, name, messages=["a"], domain="hub")
    with pytest.raises(JetStreamPublishError, match="no stream listens on it"):
        publish(hub_conn, uid("nobody"), messages=["a"], domain="leaf")


def test_msg_id_template_and_arguments() -> None:
    assert msg_id_parts("{{ x }}/{index}/end") == ("{{ x }}/", "/end")
    assert msg_id_parts("fixed") == ("fixed/", "")
    with pytest.raises(JetStreamConfigError, match="exactly one"):
        JetStreamPublishOperator(task_id="p", subject="a")
    with pytest.raises(Exception, match="no wildcards"):
        JetStreamPublishOperator(task_id="p", subject="a.*", messages=["x"])
