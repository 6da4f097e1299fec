"""A Spark read's ``filterSubjects`` must overlap the stream's subjects (issue #36): a filter outside them read
nothing (a streaming query waited for ever); it is refused naming the option, the filter and the subjects."""

from __future__ import annotations

import pytest

from tests.support.spark import publish_many


def test_a_filter_outside_the_streams_subjects_is_refused_and_an_overlapping_one_reads(spark, make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 10, subjects=("a", "b"))
    with pytest.raises(Exception, match=r"filterSubjects='zzz\.>' is not allowed: .*overlaps none") as err:
        spark.read.format("jetstream").options(**stream.options(filterSubjects="zzz.>")).load().count()
    assert f"{stream.prefix}.>" in str(err.value)
    with pytest.raises(Exception, match=r"filterSubjects='zzz\.>' is not allowed"):
        query = (
            spark.readStream.format("jetstream")
            .options(**stream.options(filterSubjects=f"{stream.prefix}.a,zzz.>"))
            .load()
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        raise AssertionError(f"the query ended without refusing: {query.exception()}")
    # A wildcard filter that overlaps the stream's subjects reads what it selects.
    read = spark.read.format("jetstream").options(**stream.options(filterSubjects="*.a")).load()
    assert read.count() == 5
