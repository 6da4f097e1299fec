"""Durable sourcing's specs without a server: the source's ``consumer``, the flow-control consumer, the
one declaration of the three objects, and the API level (4, nats-server 2.14) each needs."""

from __future__ import annotations

import pytest

from airflow_provider_jetstream.core.errors import SpecErrors
from airflow_provider_jetstream.core.manage.durable_source import DurableSource
from airflow_provider_jetstream.core.manage.specs import ConsumerSpec, StreamSpec
from airflow_provider_jetstream.core.manage.specs.diff import diff_config
from airflow_provider_jetstream.core.manage.specs.stream import STREAM
from airflow_provider_jetstream.core.signatures.durable import ENSURE_DURABLE_SOURCE

CONSUMER = {"name": "sourcing-all", "deliver_subject": "_sourcing.all.leaf.readings"}


def refusals(error: SpecErrors) -> list[str]:
    return [str(e) for e in error.errors]


def test_a_source_names_its_durable_consumer_and_needs_api_level_4() -> None:
    spec = StreamSpec.from_dict(
        {"name": "all", "sources": [{"name": "readings", "domain": "leaf", "consumer": CONSUMER}]}
    )
    assert spec.wire()["sources"] == [{"name": "readings", "consumer": CONSUMER, "external": {"api": "$JS.leaf.API"}}]
    (needed,) = spec.requirements()
    assert (needed.path, needed.level, needed.since) == ("stream.sources[0].consumer", 4, "2.14")
    assert needed.top_field("stream") == "sources"


def test_a_source_with_a_consumer_refuses_what_the_consumer_decides() -> None:
    with pytest.raises(SpecErrors) as refused:
        StreamSpec.from_dict(
            {
                "name": "all",
                "sources": [
                    {"name": "r", "domain": "leaf", "consumer": CONSUMER, "filter_subject": "r.a", "start_seq": 5}
                ],
            }
        )
    found = refusals(refused.value)
    assert len(found) == 2
    assert found[0].startswith("stream.sources[0].filter_subject='r.a' is not allowed: with a durable consumer")
    assert found[1].startswith("stream.sources[0].start_seq=5 is not allowed: with a durable consumer")


def test_a_source_consumer_needs_its_name_and_deliver_subject() -> None:
    with pytest.raises(SpecErrors) as refused:
        StreamSpec.from_dict({"name": "all", "sources": [{"name": "r", "consumer": {"name": "c"}}]})
    assert refusals(refused.value) == [
        "stream.sources[0].consumer.deliver_subject=None is not allowed: durable sourcing needs the consumer's "
        "deliver_subject (where it pushes)"
    ]


def test_a_changed_source_consumer_is_an_in_place_change_of_sources() -> None:
    wanted = StreamSpec.from_dict({"name": "all", "sources": [{"name": "r", "domain": "leaf", "consumer": CONSUMER}]})
    server = {"name": "all", "sources": [{"name": "r", "external": {"api": "$JS.leaf.API", "deliver": ""}}]}
    diff = diff_config(STREAM, wanted.named_values(), server)
    assert list(diff.as_dict()) == ["sources"] and not diff.replace_forcing


def test_the_flow_control_consumer_is_refused_what_the_server_refuses() -> None:
    spec = ConsumerSpec.from_dict({"name": "c", "ack_policy": "flow_control", "deliver_subject": "d.x"})
    assert spec.wire() == {"durable_name": "c", "ack_policy": "flow_control", "deliver_subject": "d.x"}
    assert [(r.path, r.level) for r in spec.requirements()] == [("consumer.ack_policy", 4)]
    with pytest.raises(SpecErrors) as refused:
        ConsumerSpec.from_dict(
            {"name": "c", "ack_policy": "flow_control", "ack_wait": "5s", "max_deliver": 3, "max_ack_pending": -1}
        )
    assert [e.path for e in refused.value.errors] == [
        "consumer.deliver_subject",
        "consumer.ack_wait",
        "consumer.max_deliver",
        "consumer.max_ack_pending",
    ]
    with pytest.raises(SpecErrors) as push:
        ConsumerSpec.from_dict({"name": "c", "deliver_subject": "d.x"})
    assert "push consumers are not managed here, but for the flow-control consumer of durable sourcing" in str(
        push.value
    )


def test_one_declaration_builds_the_three_objects_with_their_defaults() -> None:
    plan = DurableSource.build(
        origin={"name": "readings", "subjects": ["sensors.a.>"]},
        origin_domain="leaf-a",
        name="readings-all",
        subject_transforms=[{"src": "sensors.a.>", "dest": "edge.a.>"}],
        stream_overrides={"max_age": "30d"},
    )
    assert plan.origin.wire() == {"name": "readings", "subjects": ["sensors.a.>"], "retention": "workqueue"}
    assert plan.consumer.wire() == {
        "durable_name": "sourcing-readings-all",
        "ack_policy": "flow_control",
        "deliver_subject": "_sourcing.readings-all.leaf-a.readings",
    }
    (source,) = plan.copy.wire()["sources"]
    assert source["consumer"] == {
        "name": "sourcing-readings-all",
        "deliver_subject": "_sourcing.readings-all.leaf-a.readings",
    }
    assert source["external"] == {"api": "$JS.leaf-a.API"}


def test_the_declaration_is_refused_at_once_for_a_limits_origin_or_fields_it_sets_itself() -> None:
    with pytest.raises(SpecErrors) as refused:
        ENSURE_DURABLE_SOURCE.check(
            {
                "origin": {"name": "readings", "retention": "limits"},
                "origin_domain": "leaf",
                "stream": "all",
                "consumer": {"ack_policy": "all"},
                "stream_overrides": {"sources": []},
            }
        )
    assert [e.path for e in refused.value.errors] == [
        "origin.retention",
        "consumer.ack_policy",
        "stream_overrides.sources",
    ]


def test_a_deliver_subject_the_origin_stream_listens_on_is_refused() -> None:
    with pytest.raises(SpecErrors) as refused:
        DurableSource.build(
            origin={"name": "readings", "subjects": ["sensors.>"]}, origin_domain="leaf", name="all",
            deliver_subject="sensors.copy",
        )  # fmt: skip
    assert str(refused.value) == (
        "deliver_subject='sensors.copy' is not allowed: a stream listens there (origin.subjects ('readings'): "
        "'sensors.>'): it would store every message the consumer pushes to the hub, a second copy; give a "
        "deliver_subject no stream listens on"
    )
