"""Streaming reads (AvailableNow, restart from the checkpoint) and the writer's idempotence."""

from __future__ import annotations

import json

import pytest

from tests.support.spark import available_now, publish_many, stored_messages


def test_available_now_stops_at_the_data_present_and_a_restart_loses_and_repeats_nothing(
    spark, make_stream, tmp_path
) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 120)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = stream.options(maxMessagesPerTrigger="50", minPartitions="2")
    query = available_now(spark, options, output, checkpoint)
    # 120 messages at <= 50 per micro-batch: 3 batches with data.
    offsets = [json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress if p["numInputRows"]]
    assert [offset["seq"] for offset in offsets] == [50, 100, 120]
    assert len({offset["created"] for offset in offsets}) == 1, "each offset records the stream's identity"
    assert sorted(r.seq for r in spark.read.parquet(str(output)).collect()) == list(range(1, 121))

    publish_many(stream, 30)  # sequences 121-150
    available_now(spark, options, output, checkpoint)
    seqs = sorted(r.seq for r in spark.read.parquet(str(output)).collect())
    assert seqs == list(range(1, 151)), "restarted from its checkpoint: every message exactly once"

    # A run with nothing new adds nothing.
    available_now(spark, options, output, checkpoint)
    assert spark.read.parquet(str(output)).count() == 150


def test_streaming_only_options_are_refused_in_batch_and_vice_versa(spark, make_stream) -> None:
    stream = make_stream("leaf")
    with pytest.raises(Exception, match="maxMessagesPerTrigger is for streaming reads only"):
        spark.read.format("jetstream").options(**stream.options(maxMessagesPerTrigger="5")).load().count()
    with pytest.raises(Exception, match="endSeq is for batch reads only"):
        df = spark.readStream.format("jetstream").options(**stream.options(endSeq="5")).load()
        query = df.writeStream.format("noop").trigger(availableNow=True).start()
        query.awaitTermination(60)


def test_writer_publishes_rows_and_a_rerun_with_msg_id_stores_nothing_twice(spark, make_stream) -> None:
    stream = make_stream("leaf", duplicate_window=120.0)
    rows = [(f"{stream.prefix}.w{i % 2}", f"payload-{i}", f"id-{i}", {"k": f"v{i}"}) for i in range(40)]
    df = spark.createDataFrame(rows, "subject string, data string, id string, headers map<string,string>")
    writer = (
        df.repartition(3).write.format("jetstream").options(**stream.write_options(msgIdColumn="id")).mode("append")
    )
    writer.save()
    writer.save()  # the retried job: every row again
    stored = stored_messages(stream)
    assert len(stored) == 40
    assert sorted(d for _, d, _ in stored) == sorted(f"payload-{i}".encode() for i in range(40))
    by_payload = {d: (s, h) for s, d, h in stored}
    # The stream option became Nats-Expected-Stream: a row for another stream would be refused.
    assert by_payload[b"payload-7"] == (
        f"{stream.prefix}.w1",
        {"k": "v7", "Nats-Msg-Id": "id-7", "Nats-Expected-Stream": stream.name},
    )


def test_writer_subject_option_binary_data_and_refusals(spark, make_stream) -> None:
    stream = make_stream("leaf")
    df = spark.createDataFrame([(bytearray(b"\x00\x01"),), (bytearray(b"\x02"),)], "data binary")
    df.write.format("jetstream").options(**stream.write_options(subject=f"{stream.prefix}.fixed")).mode("append").save()
    stored = stored_messages(stream)
    assert sorted(d for _, d, _ in stored) == [b"\x00\x01", b"\x02"]
    assert {s for s, _, _ in stored} == {f"{stream.prefix}.fixed"}
    with pytest.raises(Exception, match="no subject"):
        df.write.format("jetstream").options(**stream.write_options()).mode("append").save()
    with pytest.raises(Exception, match="mode 'overwrite' is not supported"):
        df.write.format("jetstream").options(**stream.write_options(subject="x.y")).mode("overwrite").save()
    with pytest.raises(Exception, match="msgIdColumn='nope' is not a column"):
        df.write.format("jetstream").options(**stream.write_options(subject="x.y", msgIdColumn="nope")).mode(
            "append"
        ).save()
