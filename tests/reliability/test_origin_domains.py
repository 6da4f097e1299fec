"""A copy of an origin domain that does not answer, on real servers: a domain never seen (a typo) is refused before
anything is created, unless asked for; a known leaf that is away is declared with a warning; and the double-store
check that a wrong copy blocks names that copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_jetstream.core.errors import (
    DoubleStoreUnreachableError,
    JetStreamDomainUnavailableError,
    UnknownOriginDomainError,
    is_refusal,
)
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.kv import JetStreamCreateKeyValueOperator
from airflow_provider_jetstream.operators.streams import JetStreamCreateMirrorOperator
from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import Raw, uid

TYPO = "leaff"


def _hub(jetstream_conn: Callable[..., str], topology: LocalTopology) -> str:
    return jetstream_conn(host=f"127.0.0.1:{topology.hub.port}", login="acc", password="acc")


@pytest.mark.parametrize(
    "declare",
    [
        pytest.param(
            lambda hook, name: hook.ensure_stream({"name": name, "mirror": {"name": "x", "domain": TYPO}}), id="mirror"
        ),
        pytest.param(
            lambda hook, name: hook.ensure_stream(
                {"name": name, "subjects": [f"{name}.>"], "sources": [{"name": "x", "domain": TYPO}]}
            ),
            id="source",
        ),
        pytest.param(
            lambda hook, name: hook.ensure_key_value({"bucket": name, "mirror": {"bucket": "x", "domain": TYPO}}),
            id="kv-mirror",
        ),
        pytest.param(
            lambda hook, name: hook.ensure_object_store({"bucket": name, "sources": [{"bucket": "x", "domain": TYPO}]}),
            id="object-store-source",
        ),
        pytest.param(
            lambda hook, name: hook.ensure_stream(
                {"name": name, "mirror": {"name": "x", "domain": TYPO}}, dry_run=True
            ),
            id="dry-run",
        ),
    ],
)
def test_a_copy_of_a_domain_that_never_answered_is_refused_before_anything_is_created(
    hub_leaf: LocalTopology, hub_conn: str, declare: Callable[[JetStreamHook, str], Any]
) -> None:
    name = uid("typo")
    hook = JetStreamHook(hub_conn, domain="hub")
    with pytest.raises(UnknownOriginDomainError) as err:
        declare(hook, name)
    message = str(err.value)
    assert f"origin domain {TYPO!r} does not answer" in message, message
    assert "a wrong domain name?" in message and "allow_unreachable_origins=True" in message, message
    assert "nothing was changed" in message and is_refusal(err.value)
    streams = Raw(hub_leaf).api("hub", "STREAM.NAMES")["streams"] or []
    assert not [s for s in streams if name in s], f"created: {streams}"


def test_the_operator_refuses_it_too_and_declares_it_when_asked(
    hub_leaf: LocalTopology, hub_conn: str, airflow_db: Any
) -> None:
    from airflow_provider_jetstream.compat import AirflowFailException

    name = uid("typoop")
    mirror = {"task_id": "m", "jetstream_conn_id": hub_conn, "domain": "hub", "stream": name, "origin": "x"}
    with pytest.raises(AirflowFailException, match="does not answer"):
        JetStreamCreateMirrorOperator(**mirror, origin_domain=TYPO).execute({})
    assert Raw(hub_leaf).info("hub", name) is None

    asked = JetStreamCreateMirrorOperator(
        **mirror, origin_domain=TYPO, options={"allow_unreachable_origins": True}
    ).execute({})
    try:
        assert asked["action"] == "created"
        assert any(f"origin domain {TYPO!r}" in note and "allow_unreachable_origins" in note for note in asked["notes"])
    finally:
        JetStreamHook(hub_conn, domain="hub").delete_stream(name)


def test_a_known_leaf_that_is_away_is_declared_with_a_warning(
    make_topology: Callable[..., LocalTopology], jetstream_conn: Callable[..., str], airflow_db: Any
) -> None:
    topology = make_topology()
    conn = _hub(jetstream_conn, topology)
    leaf, hub = JetStreamHook(conn, domain="leaf"), JetStreamHook(conn, domain="hub")
    leaf.ensure_stream({"name": "readings", "subjects": ["readings.>"]})
    leaf.ensure_key_value({"bucket": "config"})
    hub.ensure_stream({"name": "readings-copy", "mirror": {"name": "readings", "domain": "leaf"}})
    topology.disconnect_leaf("leaf")

    # Seen before: the hub copies from it already. A leaf away is normal at the edge: declared, with a warning.
    made = JetStreamCreateKeyValueOperator(
        task_id="kv",
        jetstream_conn_id=conn,
        domain="hub",
        bucket={"bucket": "config-copy", "mirror": {"bucket": "config", "domain": "leaf"}},
    ).execute({})
    assert made["action"] == "created"
    (note,) = [n for n in made["notes"] if "origin domain 'leaf'" in n]
    assert "it is known" in note and "'readings-copy'" in note, note
    # The same declaration again is unchanged: nothing asked of the leaf.
    again = hub.ensure_key_value({"bucket": "config-copy", "mirror": {"bucket": "config", "domain": "leaf"}})
    assert again["action"] == "unchanged"

    # Named in peer_domains: known too.
    other = make_topology(leaf_domains=["edge"], hub_domain="hub")
    other_conn = _hub(jetstream_conn, other)
    other.disconnect_leaf("edge")
    named = JetStreamHook(other_conn, domain="hub").ensure_stream(
        {"name": "c", "mirror": {"name": "readings", "domain": "edge"}}, peer_domains=["edge"]
    )
    assert named["action"] == "created" and "peer_domains names it" in " ".join(named["notes"])


def test_the_double_store_refusal_names_the_copy_to_fix(
    make_topology: Callable[..., LocalTopology], jetstream_conn: Callable[..., str]
) -> None:
    topology = make_topology()
    conn = _hub(jetstream_conn, topology)
    hub = JetStreamHook(conn, domain="hub")
    hub.ensure_stream({"name": "typo-copy", "mirror": {"name": "x", "domain": TYPO}}, allow_unreachable_origins=True)
    hub.ensure_key_value(
        {"bucket": "typo-kv", "mirror": {"bucket": "x", "domain": TYPO}}, allow_unreachable_origins=True
    )
    hub.ensure_stream({"name": "orders", "subjects": ["orders.>"]}, allow_double_store=True)

    with pytest.raises(DoubleStoreUnreachableError) as err:
        hub.publish("orders.a", [b"1"])
    message = str(err.value)
    assert f"domain {TYPO!r} is the origin of " in message, message
    assert "stream 'typo-copy'" in message and "KV bucket 'typo-kv' (stream 'KV_typo-kv')" in message, message
    assert "in domain 'hub'" in message and "fix or delete that copy" in message, message

    # Fixed as it says: the publishes go again.
    hub.delete_stream("typo-copy")
    hub.delete_stream("KV_typo-kv")
    assert hub.publish("orders.a", [b"1"])["stored"] == 1


def test_a_durable_source_of_a_domain_never_seen_is_refused_before_anything_is_sent(
    hub_leaf: LocalTopology, hub_conn: str
) -> None:
    copy = uid("dtypo")
    hook = JetStreamHook(hub_conn)
    with pytest.raises(UnknownOriginDomainError, match=f"origin domain {TYPO!r} does not answer"):
        hook.ensure_durable_source({"name": uid("wq"), "subjects": [f"{copy}.>"]}, TYPO, copy, domain="hub")
    # A known domain that is away (here: asked for) cannot be declared either: waited for, not refused.
    with pytest.raises(JetStreamDomainUnavailableError, match="nothing can be declared before it is linked") as err:
        hook.ensure_durable_source(
            {"name": uid("wq"), "subjects": [f"{copy}.>"]}, TYPO, copy, domain="hub", allow_unreachable_origins=True
        )
    assert not is_refusal(err.value)
    assert Raw(hub_leaf).info("hub", copy) is None
