"""Time windows of the batch source (startTime, endTime) exact against the stream's sequences, open windows
(an end ahead, a mirror whose origin may hold more), and several streams in one load."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from airflow_provider_jetstream.core.errors import WindowOpenError
from tests.support.spark import SparkStream, hub_client, iso, leaf_api, publish, run, stored_at
from tests.support.waiting import wait_until


def _load(spark, options):
    return spark.read.format("jetstream").options(**options).load()


def _seqs(df):
    return [r.seq for r in df.select("seq").orderBy("seq").collect()]


def _publish_one_by_one(stream: SparkStream, count: int, tag: str) -> list[int]:
    """One acknowledged publish after another: every message has its own microsecond."""
    return [publish(stream, [(tag, b"%s%d" % (tag.encode(), i))])[0] for i in range(count)]


def _after_the_clock_passes(moment: dt.datetime) -> dt.datetime:
    return wait_until(lambda: dt.datetime.now(dt.timezone.utc), lambda now: now > moment, 10, "the clock passing it")


def test_windows_are_exact_inclusive_start_exclusive_end_and_split_the_stream_without_overlap(
    spark, make_stream
) -> None:
    stream = make_stream("leaf")
    assert _publish_one_by_one(stream, 10, "a") == list(range(1, 11))
    _publish_one_by_one(stream, 10, "b")  # 11-20
    _publish_one_by_one(stream, 10, "c")  # 21-30
    # A window starting at the 11th message's stamp holds it; one ending at the 21st's stamp does not hold that.
    start, end = iso(stored_at(stream, 11, round_down=True)), iso(stored_at(stream, 21, round_down=True))
    window = _load(spark, stream.options(startTime=start, endTime=end, minPartitions="3"))
    assert _seqs(window) == list(range(11, 21))
    rows = window.collect()
    assert all(start <= iso(r.timestamp.replace(tzinfo=dt.timezone.utc)) < end for r in rows)
    # Consecutive windows cover the stream, each message once.
    first = _seqs(_load(spark, stream.options(endTime=start)))
    last = _seqs(_load(spark, stream.options(startTime=end)))
    assert first == list(range(1, 11)) and last == list(range(21, 31))
    # A filtered window: only its subjects, same bounds.
    filtered = _load(spark, stream.options(startTime=start, endTime=end, filterSubjects=f"{stream.prefix}.b"))
    assert _seqs(filtered) == list(range(11, 21))


def test_a_window_ending_after_the_last_message_is_closed_by_the_servers_clock(spark, make_stream) -> None:
    stream = make_stream("leaf")
    _publish_one_by_one(stream, 5, "a")
    end = _after_the_clock_passes(stored_at(stream, 5))
    # No message stored at or after the end, but the stream stamps what it stores and its clock has passed it.
    assert _seqs(_load(spark, stream.options(endTime=iso(end)))) == [1, 2, 3, 4, 5]


def test_a_window_that_messages_may_still_reach_fails_unless_failOnOpenWindow_is_false(spark, make_stream) -> None:
    stream = make_stream("leaf")
    _publish_one_by_one(stream, 4, "a")
    ahead = iso(dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
    with pytest.raises(Exception, match="is still open: the stream holds no message stored at or after it") as info:
        _load(spark, stream.options(endTime=ahead)).count()
    assert WindowOpenError.__name__ in str(info.value)
    assert "its clock has not passed it" in str(info.value) and "failOnOpenWindow=false" in str(info.value)
    assert _seqs(_load(spark, stream.options(endTime=ahead, failOnOpenWindow="false"))) == [1, 2, 3, 4]


def test_a_mirror_of_a_leaf_stream_closes_a_window_only_with_a_later_message(spark, make_stream) -> None:
    """A mirror keeps its origin's stamps: the leaf may hold messages of the window it has not replicated yet
    (a cut link), so the hub's clock passing the end proves nothing; a later message does."""
    from nats.js.api import ExternalStream, StreamConfig, StreamSource

    origin = make_stream("leaf")
    _publish_one_by_one(origin, 6, "a")
    end = iso(_after_the_clock_passes(stored_at(origin, 6)))
    mirror = SparkStream(f"{origin.name}_mirror", "hub", origin.prefix, origin.topology)

    async def create(add: bool) -> None:
        nc = await hub_client(origin.topology)
        try:
            js = nc.jetstream(domain="hub")
            if add:
                source = StreamSource(name=origin.name, external=ExternalStream(api="$JS.leaf.API"))
                await js.add_stream(StreamConfig(name=mirror.name, mirror=source))
            else:
                await js.delete_stream(mirror.name)
        finally:
            await nc.close()

    def mirrored() -> int:
        async def go() -> int:
            nc = await hub_client(origin.topology)
            try:
                return (await nc.jetstream(domain="hub").stream_info(mirror.name)).state.last_seq
            finally:
                await nc.close()

        return run(go())

    run(create(True))
    try:
        wait_until(mirrored, lambda last: last == 6, 60, "the mirror holding the leaf's 6 messages")
        with pytest.raises(Exception, match=re.escape("is still open") + ".*it is a mirror"):
            _load(spark, mirror.options(endTime=end)).count()
        publish(origin, [("late", b"after the end")])  # sequence 7, stamped after the end
        wait_until(mirrored, lambda last: last == 7, 60, "the mirror receiving the 7th message")
        assert _seqs(_load(spark, mirror.options(endTime=end))) == [1, 2, 3, 4, 5, 6]
        assert leaf_api(origin.topology, f"STREAM.INFO.{origin.name}")["state"]["last_seq"] == 7
    finally:
        run(create(False))


def test_several_streams_in_one_load_each_exact_with_the_stream_column(spark, make_stream) -> None:
    orders, payments = make_stream("leaf"), make_stream("leaf")
    _publish_one_by_one(orders, 12, "o")
    _publish_one_by_one(payments, 5, "p")
    df = _load(spark, orders.options(stream=f"{orders.name}, {payments.name}", minPartitions="4"))
    rows = df.select("stream", "seq", "subject").collect()
    by_stream = {name: sorted(r.seq for r in rows if r.stream == name) for name in (orders.name, payments.name)}
    assert by_stream == {orders.name: list(range(1, 13)), payments.name: list(range(1, 6))}
    assert len(rows) == 17
    assert {r.subject for r in rows if r.stream == payments.name} == {f"{payments.prefix}.p"}
    # With a window: each stream's own bounds.
    _publish_one_by_one(payments, 3, "q")  # payments 6-8
    end = iso(stored_at(payments, 6, round_down=True))
    rows = _load(spark, orders.options(stream=f"{orders.name},{payments.name}", endTime=end)).collect()
    assert sorted((r.stream, r.seq) for r in rows if r.stream == payments.name) == [
        (payments.name, s) for s in range(1, 6)
    ]
    assert sorted(r.seq for r in rows if r.stream == orders.name) == list(range(1, 13))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stream": "a,,b"}, "stream='a,,b' is not allowed: give one stream name or several separated by commas"),
        ({"stream": "a, b, a"}, "'a' is named twice"),
        ({"stream": "a,b", "filterSubjects": "x.>"}, "a filter names one stream's subjects"),
        ({"stream": "a,b", "endSeq": "9"}, "a sequence number names a message of one stream"),
        ({"endTime": ""}, "endTime='' is not allowed"),
        ({"endTime": "2026-01-01T00:00:00"}, "endTime='2026-01-01T00:00:00' is not allowed: use an RFC 3339"),
        (
            {"startTime": "2026-01-02T00:00:00Z", "endTime": "2026-01-02T00:00:00+00:00"},
            "endTime='2026-01-02T00:00:00Z' is not allowed: use a time after startTime",
        ),
        ({"endTime": "2026-01-02T00:00:00Z", "endSeq": "4"}, "were both given: give one"),
        ({"failOnOpenWindow": "false"}, "failOnOpenWindow=False is not allowed: it says what a read up to endTime"),
        ({"endingTimestamp": "1"}, "unknown option 'endingtimestamp' (did you mean 'endTime'?)"),
        ({"minMessagesPerTrigger": "5"}, "minMessagesPerTrigger is for streaming reads only"),
    ],
)
def test_bad_window_and_stream_list_options_fail_on_the_driver(spark, make_stream, options, message) -> None:
    stream = make_stream("leaf")
    with pytest.raises(Exception, match=re.escape(message)):
        _load(spark, stream.options(**options)).count()
