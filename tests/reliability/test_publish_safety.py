"""No data destroyed by ordinary input: publishing into the JetStream API (or any reserved subject
space) is refused before anything is sent, by the publish operator, the shared publish engine and
the Spark writer; and the writer checks which stream and domain stored each row."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from airflow_provider_jetstream.testing.servers import USERS
from tests.support import spark as spark_streams
from tests.support.management import uid


def _operator(conn: str, subject: str, **kwargs) -> JetStreamPublishOperator:
    kwargs.setdefault("msg_id", "run-1/{index}")
    kwargs.setdefault("messages", ["x"])
    return JetStreamPublishOperator(task_id=uid("pub"), jetstream_conn_id=conn, subject=subject, **kwargs)


@pytest.mark.parametrize(
    "subject",
    [
        "$JS.API.STREAM.DELETE.victim",
        "$JS.leaf.API.STREAM.PURGE.victim",
        "$JS.ACK.s.c.1.1.1.1.0",
        "$KV.bucket.key",
        "$O.store.chunk",
        "$SYS.REQ.SERVER.PING",
        "_INBOX.abc",
        "a b",
        "a..b",
        ".a",
        "a.",
        "",
        "orders.*",
        "orders.>",
    ],
)
def test_reserved_and_non_literal_subjects_are_refused_when_the_dag_is_parsed(subject: str) -> None:
    with pytest.raises(JetStreamConfigError, match="subject="):
        JetStreamPublishOperator(task_id="p", subject=subject, messages=["x"])


def test_the_operators_api_prefix_is_reserved_too_and_ordinary_subjects_pass() -> None:
    with pytest.raises(JetStreamConfigError, match=r"JetStream API"):
        JetStreamPublishOperator(
            task_id="p", subject="JS.acc@hub.API.STREAM.DELETE.x", messages=["x"], api_prefix="JS.acc@hub.API"
        )
    from airflow_provider_jetstream.core.arguments.names import delivery_subject_problem

    for subject in ("orders.created", "JS.other", "KV.x", "$JSX.a", "inbox.a"):
        assert delivery_subject_problem(subject, ["JS.acc@hub.API"]) is None, subject


def test_publish_operator_to_the_stream_delete_api_is_refused_and_the_stream_survives(hub_conn, raw, api_watch) -> None:
    victim = uid("victim")
    raw.create("hub", {"name": victim, "subjects": [f"{victim}.>"]})
    raw.publish(f"{victim}.a", [b"1", b"2"])
    for subject in (f"$JS.API.STREAM.DELETE.{victim}", f"$JS.hub.API.STREAM.DELETE.{victim}"):
        with pytest.raises(JetStreamConfigError, match="reserved subject space"):
            _operator(hub_conn, subject)
    # A templated subject is only known once rendered: refused at execute, before anything is sent.
    op = _operator(hub_conn, "{{ params.target }}", params={"target": f"$JS.hub.API.STREAM.DELETE.{victim}"})
    op.render_template_fields({"params": {"target": f"$JS.hub.API.STREAM.DELETE.{victim}"}})
    assert op.subject == f"$JS.hub.API.STREAM.DELETE.{victim}"
    before = len(api_watch.flush())
    with pytest.raises(JetStreamConfigError, match="reserved subject space"):
        op.execute({})
    seen = [subject for subject, _ in api_watch.flush()[before:]]
    assert not [s for s in seen if victim in s], "no request naming the stream reached the JetStream API"
    info = raw.info("hub", victim)
    assert info is not None and info["state"]["messages"] == 2, "the stream and its messages survive"


def test_the_connections_configured_api_prefix_is_refused(hub_leaf, jetstream_conn) -> None:
    user, password = USERS["ACC"]
    conn = jetstream_conn(f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password, api_prefix="JS.acc@hub.API")
    op = _operator(conn, "{{ 'JS.acc@hub.API.STREAM.DELETE.x' }}")
    op.render_template_fields({})
    with pytest.raises(JetStreamConfigError, match=r"JetStream API"):
        op.execute({})


def test_the_shared_engine_refuses_before_sending(hub_leaf, raw) -> None:
    import nats

    from airflow_provider_jetstream.core.publish.engine import publish_messages

    victim = uid("victim")
    raw.create("leaf", {"name": victim, "subjects": [f"{victim}.>"]})
    raw.publish(f"{victim}.a", [b"1"], server="leaf")

    async def go() -> None:
        user, password = USERS["ACC"]
        nc = await nats.connect(hub_leaf.hub.url, user=user, password=password)
        try:
            await publish_messages(nc, [(f"$JS.leaf.API.STREAM.PURGE.{victim}", b"", None)])
        finally:
            await nc.close()

    with pytest.raises(JetStreamConfigError, match=r"\$JS\.> is a reserved subject space"):
        asyncio.run(go())
    assert raw.info("leaf", victim)["state"]["messages"] == 1


@pytest.mark.parametrize(
    "headers",
    [["a", "b"], "k=v", {"k": 1}, {"": "v"}, {"a b": "v"}, {"k:": "v"}, {"k": "line\nbreak"}, {1: "v"}],
)
def test_headers_must_be_a_mapping_of_strings(headers) -> None:
    with pytest.raises(JetStreamConfigError, match="headers"):
        JetStreamPublishOperator(task_id="p", subject="a.b", messages=["x"], headers=headers)
    JetStreamPublishOperator(task_id="p", subject="a.b", messages=["x"], headers={"k": "v", "Nats-Msg-Id": "1"})


def test_rendered_headers_that_are_not_strings_are_refused_before_sending(hub_conn, raw) -> None:
    target = uid("hdr")
    raw.create("hub", {"name": target, "subjects": [f"{target}.>"]})
    op = _operator(hub_conn, f"{target}.a", headers={"count": "{{ 3 }}"})
    op.headers = {"count": 3}  # what a native-rendering DAG (render_template_as_native_obj) hands over
    with pytest.raises(JetStreamConfigError, match=r"headers\['count'\]=3 is not allowed"):
        op.execute({})
    assert raw.info("hub", target)["state"]["messages"] == 0, "nothing was published"


# -- the Spark writer ------------------------------------------------------------------------------


def _stream_state(stream) -> dict:
    async def go():
        nc = await spark_streams.hub_client(stream.topology)
        try:
            info = await nc.jsm(prefix=stream.api_prefix).stream_info(stream.name)
            return {"messages": info.state.messages, "first": info.state.first_seq, "last": info.state.last_seq}
        finally:
            await nc.close()

    return spark_streams.run(go())


@pytest.mark.spark
def test_spark_writer_refuses_rows_addressed_to_the_jetstream_api(spark, make_stream) -> None:
    victim = make_stream("leaf")
    spark_streams.publish_many(victim, 5)
    rows = [
        (f"{victim.prefix}.ok", "fine"),
        (f"$JS.leaf.API.STREAM.PURGE.{victim.name}", "{}"),
    ]
    df = spark.createDataFrame(rows, "subject string, data string").coalesce(1)
    with pytest.raises(Exception) as refused:
        df.write.format("jetstream").options(**victim.write_options()).mode("append").save()
    state = _stream_state(victim)
    assert state["first"] == 1 and state["messages"] >= 5, f"the stream was purged: {state}"
    assert "reserved subject space" in str(refused.value)
    purge_hub = spark.createDataFrame([(f"$JS.API.STREAM.PURGE.{victim.name}", "{}")], "subject string, data string")
    with pytest.raises(Exception, match="reserved subject space"):
        purge_hub.write.format("jetstream").options(**victim.write_options()).mode("append").save()
    # The subject option is refused on the driver, before any task.
    with pytest.raises(Exception, match=r"jetstream option subject='_INBOX\.x' is not allowed"):
        spark.createDataFrame([("x",)], "data string").write.format("jetstream").options(
            **victim.write_options(subject="_INBOX.x")
        ).mode("append").save()
    state = _stream_state(victim)
    assert state["first"] == 1 and state["messages"] >= 5


@pytest.mark.spark
def test_spark_writer_checks_the_domain_that_stored_each_row(spark, make_stream) -> None:
    leaf = make_stream("leaf")
    df = spark.createDataFrame([(f"{leaf.prefix}.x", f"m{i}") for i in range(6)], "subject string, data string")
    # Aimed at domain 'hub', but the only stream listening is in the leaf: every ack says so.
    with pytest.raises(Exception, match="stored outside domain 'hub': 6 by stream"):
        df.coalesce(1).write.format("jetstream").options(**{**leaf.write_options(), "domain": "hub"}).mode(
            "append"
        ).save()
    # Aimed at the leaf: stored, and checked.
    df.coalesce(1).write.format("jetstream").options(**leaf.write_options()).mode("append").save()
    assert _stream_state(leaf)["messages"] == 12
