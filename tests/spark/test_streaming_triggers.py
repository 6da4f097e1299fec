"""Streaming minMessagesPerTrigger and maxTriggerDelay (Spark's Kafka source's minOffsetsPerTrigger and
maxTriggerDelay): a micro-batch waits for enough new messages, at most that long; AvailableNow never waits."""

from __future__ import annotations

import contextlib
import datetime as dt
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_jetstream.spark.options import ReadOptions
from airflow_provider_jetstream.spark.source import hold_back
from tests.support.spark import publish_many
from tests.support.waiting import wait_until


@contextlib.contextmanager
def _streaming(spark, options, tmp_path, name):
    """A running query (a 100 ms processing-time trigger) writing to Parquet; progress reported even without data."""
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100ms")
    query = (
        spark.readStream.format("jetstream")
        .options(**options)
        .load()
        .selectExpr("seq")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / name))
        .option("checkpointLocation", str(tmp_path / f"{name}-checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        yield query
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")


def _batches(query) -> list[tuple[int, str]]:
    """The micro-batches that read data: (end sequence, trigger time)."""
    return [
        (json.loads(p["sources"][0]["endOffset"])["seq"], p["timestamp"])
        for p in query.recentProgress
        if p["numInputRows"]
    ]


def _saw(query, seq: int) -> bool:
    """Whether a progress report shows the source knew the stream's last sequence was ``seq``."""
    return any(
        (json.loads(p["sources"][0].get("latestOffset") or "{}") or {}).get("seq") == seq for p in query.recentProgress
    )


def test_a_micro_batch_waits_for_min_messages_per_trigger(spark, make_stream, tmp_path) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 10)
    options = stream.options(minMessagesPerTrigger="50", maxTriggerDelay="1h", maxMessagesPerTrigger="200")
    with _streaming(spark, options, tmp_path, "min") as query:
        wait_until(lambda: _batches(query), lambda b: [e for e, _ in b] == [10], 120, "the first micro-batch")
        publish_many(stream, 20)  # 11-30: fewer than 50 new
        wait_until(lambda: _saw(query, 30), bool, 120, "the source seeing sequence 30")
        assert [end for end, _ in _batches(query)] == [10], "20 new messages are held back"
        publish_many(stream, 30)  # 31-60: 50 new
        wait_until(lambda: _batches(query), lambda b: len(b) == 2, 120, "the second micro-batch")
        assert [end for end, _ in _batches(query)] == [10, 60]
    assert sorted(r.seq for r in spark.read.parquet(str(tmp_path / "min")).collect()) == list(range(1, 61))


def test_max_trigger_delay_releases_fewer_messages_after_that_long(spark, make_stream, tmp_path) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 5)
    options = stream.options(minMessagesPerTrigger="1000", maxTriggerDelay="2s")
    with _streaming(spark, options, tmp_path, "delay") as query:
        wait_until(lambda: _batches(query), lambda b: len(b) == 1, 120, "the first micro-batch")
        publish_many(stream, 3)
        batches = wait_until(lambda: _batches(query), lambda b: len(b) == 2, 120, "the delayed micro-batch")
    assert [end for end, _ in batches] == [5, 8]
    first, second = (dt.datetime.fromisoformat(t.replace("Z", "+00:00")) for _, t in batches)
    assert (second - first).total_seconds() >= 1.5, "not before maxTriggerDelay (2 s, less the trigger's own lag)"


def test_available_now_never_waits_for_min_messages(spark, make_stream, tmp_path) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 7)
    query = (
        spark.readStream.format("jetstream")
        .options(**stream.options(minMessagesPerTrigger="1000", maxTriggerDelay="1h"))
        .load()
        .selectExpr("seq")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "now"))
        .option("checkpointLocation", str(tmp_path / "now-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180) is not False
    assert query.exception() is None
    assert sorted(r.seq for r in spark.read.parquet(str(tmp_path / "now")).collect()) == list(range(1, 8))


def _options(minimum: int | None, delay: float | None) -> ReadOptions:
    given_options = {"servers": "nats://127.0.0.1:4222", "stream": "s"}
    if minimum is not None:
        given_options["minMessagesPerTrigger"] = str(minimum)
        if delay is not None:
            given_options["maxTriggerDelay"] = str(delay)
    return ReadOptions.parse(given_options, streaming=True)


@given(
    minimum=st.one_of(st.none(), st.integers(1, 10_000)),
    delay=st.one_of(st.none(), st.floats(0.001, 10_000)),
    new=st.integers(0, 20_000),
    since=st.one_of(st.none(), st.floats(0, 20_000)),
)
def test_hold_back_is_kafkas_rule(minimum, delay, new, since) -> None:
    """Held back exactly when some but fewer than the minimum are new and the delay (default 15 min) has not
    passed since the previous micro-batch; never before the first, never with nothing new."""
    options = _options(minimum, delay)
    wait = options.max_trigger_delay  # the duration parser's value: nanoseconds, in seconds
    assert wait == (None if minimum is None else 900.0 if delay is None else pytest.approx(delay, abs=1e-9))
    held = hold_back(new, options, None if since is None else 0.0, since or 0.0)
    expected = minimum is not None and 0 < new < minimum and since is not None and since < wait
    assert held == expected
