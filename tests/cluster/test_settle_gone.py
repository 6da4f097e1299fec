"""Settles that nobody takes, on a 3-node hub: answered in moments, not waited out as the hub's own failover.

A settle after its consumer was deleted gets no responders; the consumer's ``CONSUMER.INFO`` says it is gone:
:class:`ConsumerDeletedError` naming the message, the consumer, the stream and the domain. A settle to a leaf
cut from the hub gets no responders in another domain: that domain being away, not a failover.
"""

from __future__ import annotations

import time

import pytest

from airflow_provider_jetstream.core.errors import ConsumerDeletedError, JetStreamAckError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import uid
from tests.support.waiting import scaled

pytestmark = pytest.mark.timeout(180)


def _one_message(hook: JetStreamHook, name: str, replicas: int):
    hook.ensure_stream({"name": name, "subjects": [f"{name}.>"], "num_replicas": replicas})
    hook.ensure_consumer(name, {"name": "work", "ack_policy": "explicit", "num_replicas": replicas})
    hook.publish(f"{name}.a", [b"one"])
    (message,) = hook.fetch(name, "work", batch_size=1, max_wait=5)
    return message


def test_an_ack_after_the_consumer_was_deleted_names_it_within_moments(cluster_conn: str) -> None:
    name = uid("settlegone")
    hub = JetStreamHook(cluster_conn, domain="hub")
    message = _one_message(hub, name, 3)
    hub.delete_consumer(name, "work")

    started = time.monotonic()
    with pytest.raises(ConsumerDeletedError) as err:
        message.ack()
    took = time.monotonic() - started
    assert took < scaled(10), f"the ack took {took:.1f}s: the deleted consumer was waited out as a failover"
    said = str(err.value)
    for part in ("stream sequence 1", "consumer 'work'", f"stream {name!r}", "domain 'hub'", "was deleted"):
        assert part in said, said
    assert not message.confirmed and message.verdict is None


def test_an_ack_into_a_cut_leaf_fails_within_moments(hub_cluster: LocalTopology, cluster_conn: str) -> None:
    name = uid("settlecut")
    leaf = JetStreamHook(cluster_conn, domain="leaf")
    message = _one_message(leaf, name, 1)
    hub_cluster.disconnect_leaf("leaf")

    started = time.monotonic()
    with pytest.raises(JetStreamAckError, match=rf"message 1 of consumer 'work' on stream '{name}'") as err:
        message.ack()
    took = time.monotonic() - started
    assert took < scaled(10), f"the ack took {took:.1f}s: the cut leaf was waited out as a hub failover"
    assert not isinstance(err.value, ConsumerDeletedError), err.value  # away, not deleted
