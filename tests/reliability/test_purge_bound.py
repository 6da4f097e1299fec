"""A purge never renumbers a stream: ``up_to_seq`` past ``last_seq + 1`` is refused."""

from __future__ import annotations

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.operators.streams import JetStreamPurgeStreamOperator
from tests.support.management import uid


def _purge(conn: str, name: str, **kwargs) -> dict:
    return JetStreamPurgeStreamOperator(task_id=uid("purge"), jetstream_conn_id=conn, stream=name, **kwargs).execute({})


def test_a_purge_past_the_last_sequence_is_refused_and_the_numbering_stays(hub_conn, raw) -> None:
    name = uid("purge")
    raw.create("leaf", {"name": name, "subjects": [f"{name}.>"]})
    raw.publish(f"{name}.a", [b"1", b"2", b"3", b"4", b"5"], server="leaf")
    with pytest.raises(JetStreamConfigError, match=r"up_to_seq=1000000 is not allowed: use at most 6 .*renumber"):
        _purge(hub_conn, name, up_to_seq=1_000_000, domain="leaf")
    state = raw.info("leaf", name)["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (5, 1, 5), "nothing purged"
    assert raw.publish(f"{name}.a", [b"6"], server="leaf")[0]["seq"] == 6, "the numbering did not move"

    # last_seq + 1 purges everything and keeps the numbering.
    assert _purge(hub_conn, name, up_to_seq=7, domain="leaf")["purged"] == 6
    assert raw.publish(f"{name}.a", [b"7"], server="leaf")[0]["seq"] == 7
    # A templated bound is checked once rendered, the same way.
    op = JetStreamPurgeStreamOperator(
        task_id=uid("purge"), jetstream_conn_id=hub_conn, stream=name, domain="leaf", up_to_seq="{{ 9 }}"
    )
    op.render_template_fields({})
    with pytest.raises(JetStreamConfigError, match="use at most 8"):
        op.execute({})
    assert raw.info("leaf", name)["state"]["last_seq"] == 7
