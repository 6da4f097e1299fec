"""The Spark writer's message ids (issue #36): a ``msgIdColumn`` row whose id is empty, blank or null is refused,
naming the column and the row, instead of switching deduplication off (2 rows written twice stored 4)."""

from __future__ import annotations

import pytest

from tests.support.spark import stored_messages


@pytest.mark.parametrize("bad_id", ["", "  ", None])
def test_a_row_without_a_message_id_is_refused_and_nothing_of_its_batch_is_stored(
    spark, make_stream, bad_id: str | None
) -> None:
    stream = make_stream("leaf", duplicate_window=120.0)
    rows = [(f"{stream.prefix}.w", "first", "id-1"), (f"{stream.prefix}.w", "second", bad_id)]
    df = spark.createDataFrame(rows, "subject string, data string, id string").coalesce(1)
    writer = df.write.format("jetstream").options(**stream.write_options(msgIdColumn="id")).mode("append")
    for _ in range(2):  # the retried job refuses the same way
        with pytest.raises(Exception, match=r"row 1 of a batch has id=.* \(msgIdColumn\), which is not allowed"):
            writer.save()
    assert stored_messages(stream) == [], "the batch holding the row was not sent"


def test_rows_with_message_ids_written_twice_are_stored_once(spark, make_stream) -> None:
    stream = make_stream("leaf", duplicate_window=120.0)
    df = spark.createDataFrame([("a", 1), ("b", 2)], "data string, id int").coalesce(1)
    writer = (
        df.write.format("jetstream")
        .options(**stream.write_options(subject=f"{stream.prefix}.w", msgIdColumn="id"))
        .mode("append")
    )
    writer.save()
    writer.save()
    stored = stored_messages(stream)
    assert sorted(d for _, d, _ in stored) == [b"a", b"b"]
    assert sorted(h["Nats-Msg-Id"] for _, _, h in stored) == ["1", "2"], "a number column's ids as text"
