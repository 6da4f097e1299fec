"""A durable source's ``deliver_subject`` is a delivery subject (issue #36): ``$JS.hub.API.STREAM.PURGE.victim``
was accepted (every push purged the hub stream ``victim``), ``$JS.API.x`` and ``_INBOX.x`` too, and ``""`` silently
became the default. Each is refused, naming the argument, before anything is created; ``victim`` keeps its data."""

from __future__ import annotations

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError, UnsafeSubjectError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.streams import JetStreamCreateDurableSourceOperator
from tests.support.management import Raw, uid

ATTACKS = [
    "$JS.hub.API.STREAM.PURGE.victim",
    "$JS.API.STREAM.PURGE.victim",
    "$JS.leaf.API.STREAM.DELETE.victim",
    "JS.acc@hub.API.STREAM.PURGE.victim",
    "_INBOX.x",
    "$SYS.REQ.SERVER.PING",
    "$KV.config.key",
    "deliver.*",
    "",
]


@pytest.fixture
def victim(hub_leaf) -> tuple[Raw, str]:
    raw, name = Raw(hub_leaf), uid("victim")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    raw.publish(f"{name}.a", [b"1", b"2", b"3"], server="hub")
    raw.wait_for("hub", name, 3)
    return raw, name


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_unsafe_deliver_subject_is_refused_before_anything_is_created(hub_conn, victim, attack: str) -> None:
    raw, name = victim
    subject = attack.replace("victim", name)
    origin, copy = uid("wq"), uid("copy")
    spec = {"name": origin, "subjects": [f"{origin}.>"]}
    with pytest.raises(JetStreamConfigError, match=r"deliver_subject=.* is not allowed") as hook_err:
        JetStreamHook(hub_conn).ensure_durable_source(spec, "leaf", copy, domain="hub", deliver_subject=subject)
    with pytest.raises(JetStreamConfigError, match=r"options.deliver_subject=.* is not allowed"):
        JetStreamCreateDurableSourceOperator(
            task_id="d",
            jetstream_conn_id=hub_conn,
            domain="hub",
            origin=spec,
            origin_domain="leaf",
            stream=copy,
            options={"deliver_subject": subject},
        )
    if attack:
        assert any(isinstance(e, UnsafeSubjectError) for e in getattr(hook_err.value, "errors", [hook_err.value]))
    assert raw.info("leaf", origin) is None and raw.info("hub", copy) is None, "nothing was created"
    assert raw.info("hub", name)["state"]["messages"] == 3, "the stream the subject names keeps its messages"


def test_a_durable_source_filter_outside_its_origin_is_refused(hub_conn, hub_leaf) -> None:
    raw, origin, copy = Raw(hub_leaf), uid("wq"), uid("copy")
    spec = {"name": origin, "subjects": [f"{origin}.>"]}
    with pytest.raises(JetStreamConfigError, match=r"consumer.filter_subject='zzz\.>' is not allowed: .*overlaps none"):
        JetStreamHook(hub_conn).ensure_durable_source(
            spec, "leaf", copy, domain="hub", consumer={"filter_subject": "zzz.>"}
        )
    assert raw.info("leaf", origin) is None and raw.info("hub", copy) is None
