"""A stream deleted and created again under the same name is never read as the old one.

Found: the exactly-once job's checkpoint said ``seq 40``; after the stream was recreated it reported
"nothing new" while the new stream held 25 messages, and once the new stream passed the old end it
copied only what lay beyond it: the first 40 messages of the new stream were never written, without
an error. Every position the provider keeps now records the stream's identity (``STREAM.INFO``'s
``created``) beside its sequence, and each place that resumes from one compares it
(:func:`airflow_provider_jetstream.core.read.identity.same_stream`): a recreated stream fails with an
error naming the stream and both creation times, or with ``failOnDataLoss=false`` is read from its
first sequence. Each test below failed on the code before the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid

import pytest
from nats.js.api import ExternalStream, StreamConfig, StreamSource

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.durable import DurablePuller, ensure_consumer
from airflow_provider_jetstream.core.errors import StreamRecreatedError
from airflow_provider_jetstream.core.manage.specs.consumer import ConsumerSpec
from airflow_provider_jetstream.core.read.identity import same_stream, stream_identity
from airflow_provider_jetstream.core.status.replication import ReplicationWatch
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.spark.jobs.stream_to_parquet import StreamToParquetJob, parse_args
from airflow_provider_jetstream.testing.servers import NatsServer
from tests.support import spark as spark_streams
from tests.support.natsutil import LEAF_API, connect, leaf_stream_with_messages, unique
from tests.support.waiting import scaled, wait_until

GHOST_API = ExternalStream(api="$JS.ghost.API")  # a domain no server has: it never answers


def _recreate(stream) -> None:
    """Delete the stream and create it again under the same name and subjects (it starts again at 1)."""

    async def go() -> None:
        nc = await spark_streams.hub_client(stream.topology)
        try:
            js = nc.jetstream(domain=stream.domain)
            await js.delete_stream(stream.name)
            await js.add_stream(StreamConfig(name=stream.name, subjects=[f"{stream.prefix}.>"]))
        finally:
            await nc.close()

    spark_streams.run(go())


def _created(stream) -> str:
    async def go() -> str:
        nc = await spark_streams.hub_client(stream.topology)
        try:
            msg = await nc.request(f"{stream.api_prefix}.STREAM.INFO.{stream.name}", b"", timeout=5)
            return json.loads(msg.data)["created"]
        finally:
            await nc.close()

    return spark_streams.run(go())


# -- the one rule -------------------------------------------------------------------------------------------


def test_the_rule_accepts_the_same_or_an_unknown_identity_and_refuses_or_warns_on_another(caplog) -> None:
    a, b = "2026-01-01T00:00:00.123456789Z", "2026-01-01T00:00:00.123456790Z"  # a nanosecond apart
    for recorded, current in ((a, a), (None, a), (a, None)):
        assert same_stream("S", recorded, current, position="p")
    with pytest.raises(StreamRecreatedError, match=f"stream 'S' was deleted and created again: p .*{a}.*{b}.* Do X"):
        same_stream("S", a, b, position="p", remedy="Do X")
    with caplog.at_level(logging.WARNING):
        assert not same_stream("S", a, b, position="p", fail_on_data_loss=False, restart="from 1")
    assert any(b in r.getMessage() and r.getMessage().endswith("going on from 1") for r in caplog.records)


# -- the exactly-once job's checkpoint -----------------------------------------------------------------


def _job(spark, stream, output, bucket, *extra: str) -> StreamToParquetJob:
    args = parse_args(
        [
            *("--stream", stream.name, "--domain", stream.domain, "--output-path", str(output)),
            *("--checkpoint-bucket", bucket, "--min-partitions", "2", "--partition-by", "subject", *extra),
        ]
    )
    return StreamToParquetJob(spark, args)


def _rows(spark, output) -> list[tuple[str, int]]:
    """``(seq_range, seq)`` of every row in the output."""
    return sorted((r.seq_range, r.seq) for r in spark.read.parquet(str(output)).select("seq_range", "seq").collect())


@pytest.mark.spark
def test_the_job_refuses_a_recreated_stream_and_copies_all_of_it_once_told_to(spark, make_stream, tmp_path) -> None:
    stream = make_stream("leaf")
    bucket, output = f"identity_{uuid.uuid4().hex[:8]}", tmp_path / "out"
    spark_streams.publish_many(stream, 40)
    first = _job(spark, stream, output, bucket).run()
    assert (first.start, first.end, first.outcome) == (1, 40, "written")
    old_created = _created(stream)

    _recreate(stream)
    spark_streams.publish_many(stream, 25)  # sequences 1-25 of another stream
    new_created = _created(stream)
    assert new_created != old_created

    with pytest.raises(StreamRecreatedError) as refused:
        _job(spark, stream, output, bucket).run()
    message = str(refused.value)
    assert stream.name in message and old_created in message and new_created in message
    assert "--fail-on-data-loss false" in message
    assert [seq for _, seq in _rows(spark, output)] == list(range(1, 41)), "nothing written by the refused run"

    told = _job(spark, stream, output, bucket, "--fail-on-data-loss", "false").run()
    assert (told.start, told.end, told.outcome) == (1, 25, "written")
    rows = _rows(spark, output)
    old = [seq for name, seq in rows if not name.endswith(".1")]
    new = [seq for name, seq in rows if name.endswith(".1")]
    assert old == list(range(1, 41)), "the old stream's copy is kept"
    assert new == list(range(1, 26)), "every message of the new stream, once"

    # The new identity is recorded: later runs go on from it without failing.
    spark_streams.publish_many(stream, 5)
    later = _job(spark, stream, output, bucket).run()
    assert (later.start, later.end, later.outcome) == (26, 30, "written")
    assert sorted(seq for name, seq in _rows(spark, output) if name.endswith(".1")) == list(range(1, 31))


@pytest.mark.spark
def test_a_checkpoint_without_identity_is_accepted_and_upgraded(spark, make_stream, tmp_path) -> None:
    stream = make_stream("leaf")
    bucket, output = f"identity_{uuid.uuid4().hex[:8]}", tmp_path / "out"
    spark_streams.publish_many(stream, 10)
    job = _job(spark, stream, output, bucket)
    job.run()
    # What an earlier version wrote: the sequence, no identity.
    job.created = None
    job._put({"seq": 10}, job.read_checkpoint().revision)
    assert job.read_checkpoint().created is None

    spark_streams.publish_many(stream, 5)
    result = _job(spark, stream, output, bucket).run()
    assert (result.start, result.end, result.outcome) == (11, 15, "written")
    assert job.read_checkpoint().created == _created(stream)


# -- the streaming source's offsets ----------------------------------------------------------------------


def _available_now(spark, options, output, checkpoint):
    from pyspark.errors import StreamingQueryException

    query = (
        spark.readStream.format("jetstream")
        .options(**options)
        .load()
        .selectExpr("seq", "data")
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):  # the test reads query.exception()
        query.awaitTermination(180)
    return query


@pytest.mark.spark
def test_a_streaming_query_refuses_a_recreated_stream_and_reads_all_of_it_once_told_to(
    spark, make_stream, tmp_path
) -> None:
    stream = make_stream("leaf")
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    spark_streams.publish_many(stream, 30)
    query = _available_now(spark, stream.options(), output, checkpoint)
    assert query.exception() is None
    old_created = _created(stream)

    _recreate(stream)
    spark_streams.publish_many(stream, 20)
    new_created = _created(stream)

    refused = _available_now(spark, stream.options(), output, checkpoint)
    error = str(refused.exception())
    assert "StreamRecreatedError" in error and stream.name in error
    assert old_created in error and new_created in error and "failOnDataLoss=false" in error
    assert spark.read.parquet(str(output)).count() == 30, "nothing of the new stream was read"

    told = _available_now(spark, stream.options(failOnDataLoss="false"), output, checkpoint)
    assert told.exception() is None
    ends = [json.loads(p["sources"][0]["endOffset"]) for p in told.recentProgress if p["numInputRows"]]
    assert ends == [{"seq": 20, "created": new_created, "first": 1}], "the new identity is recorded"
    rows = sorted((r.seq, r.data.decode()) for r in spark.read.parquet(str(output)).collect())
    expected = [(i, f"m{i}") for i in range(1, 31)] + [(i, f"m{i}") for i in range(1, 21)]
    assert rows == sorted(expected), "every message of the new stream, once, beside the old stream's"


@pytest.mark.spark
def test_a_streaming_offset_without_identity_is_accepted_and_the_next_one_records_it(make_stream) -> None:
    """Offsets in a checkpoint of an earlier version are ``{"seq": N}``: the query goes on from N."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from airflow_provider_jetstream.spark.options import ReadOptions
    from airflow_provider_jetstream.spark.source import JetStreamStreamReader

    stream = make_stream("leaf")
    spark_streams.publish_many(stream, 8)
    reader = JetStreamStreamReader(ReadOptions.parse(stream.options(), streaming=True), 2)
    end = reader.latestOffset({"seq": 5}, ReadAllAvailable())
    assert end == {"seq": 8, "created": _created(stream)}
    assert [(p.start, p.end) for p in reader.partitions({"seq": 5}, end)] == [(6, 7), (8, 8)]


# -- the replication watch ---------------------------------------------------------------------------------


def _check(conn_id: str, watch: ReplicationWatch):
    """One check of the replication sensor (the watch carries what earlier checks remembered)."""
    return JetStreamHook(conn_id, domain="hub").check_replication(watch)


def test_a_recreated_origin_fails_the_replication_check_instead_of_comparing_another_streams_sequences(
    hub_leaf, hub_conn
) -> None:
    origin = unique("idorig")
    mirror = f"{origin}_mirror"

    async def setup() -> None:
        await leaf_stream_with_messages(hub_leaf.url("leaf"), origin, 5)
        hub = await connect(hub_leaf.url("hub"))
        await hub.jetstream().add_stream(StreamConfig(name=mirror, mirror=StreamSource(name=origin, external=LEAF_API)))
        await hub.close()

    asyncio.run(setup())
    watch = ReplicationWatch(mirror)
    first = wait_until(lambda: _check(hub_conn, watch), lambda c: c.caught_up, what="the mirror caught up")
    assert first.verdicts[0].origin_last_seq == 5

    async def created() -> str:
        leaf = await connect(hub_leaf.url("leaf"))
        info = json.loads((await leaf.request(f"$JS.API.STREAM.INFO.{origin}", b"")).data)
        await leaf.close()
        return info["created"]

    async def recreate() -> None:
        leaf = await connect(hub_leaf.url("leaf"))
        await leaf.jetstream().delete_stream(origin)
        await leaf.close()
        await leaf_stream_with_messages(hub_leaf.url("leaf"), origin, 2)

    old_created = asyncio.run(created())
    asyncio.run(recreate())
    new_created = asyncio.run(created())
    # The mirror still holds the old origin's 5 sequences; the new origin's last is 2: "5 >= 2" says nothing.
    with pytest.raises(StreamRecreatedError) as refused:
        _check(hub_conn, watch)
    message = str(refused.value)
    assert origin in message and new_created in message and old_created in message
    assert f"recreate {mirror!r}" in message


def test_a_recreated_stream_is_watched_as_a_new_copy_not_with_the_old_ones_timers(hub_leaf, hub_conn, caplog) -> None:
    copy = unique("idcopy")
    config = StreamConfig(name=copy, sources=[StreamSource(name="gone", external=GHOST_API)])

    async def create(delete: bool) -> None:
        hub = await connect(hub_leaf.url("hub"))
        if delete:
            await hub.jetstream().delete_stream(copy)
        await hub.jetstream().add_stream(config)
        await hub.close()

    async def delete() -> None:
        # A source in a domain that never answers would make the shared topology's double-store checks refuse.
        hub = await connect(hub_leaf.url("hub"))
        await hub.jetstream().delete_stream(copy)
        await hub.close()

    asyncio.run(create(delete=False))
    try:
        watch = ReplicationWatch(copy, unreachable_timeout=600)
        first = _check(hub_conn, watch)
        assert first.verdicts[0].unreachable and first.failed is None
        # What the sensor hands on after the origin of the old copy stayed unreachable for over an hour.
        state = watch.state()
        state["unreachable_since"] = {key: since - 3600 for key, since in state["unreachable_since"].items()}
        watch.restore(state)

        asyncio.run(create(delete=True))  # the copy is deleted and created again: a new copy
        with caplog.at_level(logging.WARNING):
            second = _check(hub_conn, watch)
        assert second.failed is None, "the old copy's unreachable timer was carried over to the new one"
        assert second.verdicts[0].unreachable
        assert any(copy in r.getMessage() and "deleted and created again" in r.getMessage() for r in caplog.records)
    finally:
        asyncio.run(delete())


# -- the event triggers' puller ------------------------------------------------------------------------------


def test_an_event_trigger_whose_stream_is_recreated_fails_clearly_and_its_restart_fires_for_every_new_message(
    hub_leaf,
) -> None:
    """The event triggers pull a durable consumer (:class:`DurablePuller`), which is deleted with its stream.

    Found: a trigger holding the messages it handed out (its window full) while the stream was deleted and
    created again then pulled the gone consumer for ever, each pull answered 503 as if the leaf were
    unreachable, while the new stream filled up: no event, no error."""
    name = unique("idevents")
    spec = ConsumerSpec.from_dict({"name": "watcher", "ack_policy": "explicit"})

    async def scenario() -> tuple[str, str, BaseException | None, list[bytes]]:
        nc = await connect(hub_leaf.url("leaf"))
        js = nc.jetstream()
        api = JetStreamApi(nc, "$JS.API")
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        for i in range(3):
            await js.publish(f"{name}.a", b"old%d" % i)
        old = await stream_identity(api, name)
        await ensure_consumer(api, name, spec)
        puller = DurablePuller(nc, api, name, "watcher", max_in_flight=3, expires=1.0, heartbeat=0.5)
        deliveries = puller.deliveries()
        held = [await anext(deliveries) for _ in range(3)]  # handed to Airflow, being stored

        await js.delete_stream(name)
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        for i in range(3):
            await js.publish(f"{name}.a", b"new%d" % i)
        new = await stream_identity(api, name)
        await puller.settle([(ticket, "ack") for ticket in held])
        failure = None
        try:
            await asyncio.wait_for(anext(deliveries), scaled(20))
        except (StreamRecreatedError, asyncio.TimeoutError) as err:
            failure = err
        await deliveries.aclose()

        # The trigger starting again: its consumer is created on the new stream, which fires for every message.
        await ensure_consumer(api, name, spec)
        restarted = DurablePuller(nc, api, name, "watcher", expires=1.0, heartbeat=0.5)
        again = restarted.deliveries()
        fired = [(await asyncio.wait_for(anext(again), scaled(20))).delivery.data for _ in range(3)]
        await again.aclose()
        await js.delete_stream(name)
        await nc.close()
        return old, new, failure, fired

    old, new, failure, fired = asyncio.run(scenario())
    assert isinstance(failure, StreamRecreatedError), f"no clear error: {failure!r}"
    assert name in str(failure) and old in str(failure) and new in str(failure)
    assert fired == [b"new0", b"new1", b"new2"]


def test_a_user_who_may_not_read_the_origins_info_still_gets_the_exact_check_and_is_not_asked_again(
    tmp_path, jetstream_conn
) -> None:
    """The origin's identity is read with ``STREAM.INFO``; a user refused it keeps the exact rule, and later
    checks do not wait for that refusal again."""
    denied = json.dumps(["$JS.API.STREAM.INFO.orig"])
    body = (
        f"jetstream {{ store_dir: {json.dumps(str(tmp_path / 'store'))} }}\n"
        "accounts { A: { jetstream: enabled, users: [\n"
        "  {user: full, password: fullpass},\n"
        f"  {{user: noinfo, password: noinfopass, permissions: {{publish: {{deny: {denied}}}}}}}\n"
        "] } }\n"
    )
    server = NatsServer(name="identity-noinfo", workdir=tmp_path, body=body).start()
    try:

        async def setup() -> None:
            nc = await connect(f"nats://full:fullpass@127.0.0.1:{server.port}")
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name="orig", subjects=["orig.>"]))
            await js.publish("orig.in", b"m")
            await js.add_stream(StreamConfig(name="orig_copy", mirror=StreamSource(name="orig")))
            await nc.close()

        asyncio.run(setup())
        conn_id = jetstream_conn(f"127.0.0.1:{server.port}", login="noinfo", password="noinfopass")
        watch = ReplicationWatch("orig_copy")
        hook = JetStreamHook(conn_id)
        first = wait_until(
            lambda: hook.check_replication(watch, request_timeout=1.0), lambda c: c.caught_up, what="caught up"
        )
        assert [v.check for v in first.verdicts] == ["exact"]
        assert watch.state()["identity_refused"] == ["mirror:orig:"], "the refusal is remembered"
        second = hook.check_replication(watch, request_timeout=1.0)
        assert second.caught_up and [v.check for v in second.verdicts] == ["exact"]
    finally:
        server.stop()
