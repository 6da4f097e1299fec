"""The fast pull path on its own, against the real hub + leaf servers (no Spark)."""

from __future__ import annotations

import pytest

from airflow_provider_jetstream.core.errors import JetStreamDataLossError
from airflow_provider_jetstream.core.read.exact import MissingRange
from airflow_provider_jetstream.core.read.range import read_range
from airflow_provider_jetstream.core.read.settings import READERS, PullSettings
from tests.support.spark import delete_messages, hub_client, publish, publish_many, run


@pytest.fixture(params=READERS, autouse=True)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with both range readers: the vectorised one and nats-py's."""
    monkeypatch.setattr("airflow_provider_jetstream.core.read.range.default_reader", lambda: request.param)
    return request.param


async def _read(stream, start, end, **kwargs):
    nc = await hub_client(stream.topology)
    try:
        chunks = [c async for c in read_range(nc, stream.name, start, end, api_prefix=stream.api_prefix, **kwargs)]
        jsm = nc.jsm(prefix=stream.api_prefix)
        consumers = (await jsm.stream_info(stream.name)).state.consumer_count
        return chunks, consumers
    finally:
        await nc.close()


def _seqs(chunks):
    return [s for c in chunks for s in c.sequences]


def test_reads_exactly_a_range_of_a_leaf_stream_through_the_hub_and_deletes_its_consumer(make_stream, reader) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 300)
    small = PullSettings(max_buffered_messages=40, chunk_messages=25)
    chunks, consumers = run(_read(stream, 17, 233, settings=small))
    assert type(chunks[0]).__name__ == {"vectorised": "ColumnChunk", "nats-py": "MessageChunk"}[reader]
    assert _seqs(chunks) == list(range(17, 234))
    assert [p for c in chunks for p in c.payloads] == [b"m%d" % i for i in range(17, 234)]
    assert chunks[0].subjects[:2] == [f"{stream.prefix}.b", f"{stream.prefix}.a"]  # 17 odd -> b
    assert max(len(c) for c in chunks) <= 25
    assert consumers == 0, "the reading consumer must be deleted"


def test_full_range_and_beyond_the_last_sequence(make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 50)
    chunks, _ = run(_read(stream, 1, 50))
    assert _seqs(chunks) == list(range(1, 51))
    # An end past the stream's last sequence stops at what is stored, with no data loss reported.
    chunks, _ = run(_read(stream, 41, 10_000, fail_on_data_loss=False))
    assert _seqs(chunks) == list(range(41, 51))


def test_filtered_ranges_return_only_matching_subjects_inside_the_range(make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 120, subjects=("a", "b", "c"))
    chunks, _ = run(_read(stream, 10, 100, filter_subjects=[f"{stream.prefix}.a"]))
    assert _seqs(chunks) == [s for s in range(10, 101) if s % 3 == 0]
    assert {s for c in chunks for s in c.subjects} == {f"{stream.prefix}.a"}
    chunks, _ = run(_read(stream, 10, 100, filter_subjects=[f"{stream.prefix}.a", f"{stream.prefix}.c"]))
    assert _seqs(chunks) == [s for s in range(10, 101) if s % 3 in (0, 2)]
    # No matching message inside the range, some after it: nothing.
    chunks, _ = run(_read(stream, 10, 10, filter_subjects=[f"{stream.prefix}.a"]))
    assert _seqs(chunks) == []


def test_gaps_fail_by_default_and_are_skipped_when_allowed(make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 60)
    delete_messages(stream, [20, 21, 22, 60])
    with pytest.raises(JetStreamDataLossError, match="sequences 20-22 are no longer stored"):
        run(_read(stream, 1, 60))
    missing: list[MissingRange] = []
    chunks, consumers = run(_read(stream, 1, 60, fail_on_data_loss=False, missing=missing))
    assert _seqs(chunks) == [s for s in range(1, 60) if s not in (20, 21, 22)]
    assert [str(m) for m in missing] == ["20-22", "60"]
    assert consumers == 0
    # The tail of a range removed: detected too.
    with pytest.raises(JetStreamDataLossError, match="sequences 60 are no longer stored"):
        run(_read(stream, 55, 60))


def test_purged_front_is_data_loss_for_filtered_reads_too(make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 30)

    async def purge_first_ten():
        nc = await hub_client(stream.topology)
        try:
            await nc.jsm(prefix=stream.api_prefix).purge_stream(stream.name, keep=20)
        finally:
            await nc.close()

    run(purge_first_ten())
    with pytest.raises(JetStreamDataLossError, match="sequences 5-10"):
        run(_read(stream, 5, 30, filter_subjects=[f"{stream.prefix}.a"]))
    chunks, _ = run(_read(stream, 5, 30, filter_subjects=[f"{stream.prefix}.a"], fail_on_data_loss=False))
    assert _seqs(chunks) == [s for s in range(11, 31) if s % 2 == 0]


def test_headers_are_returned_when_asked(make_stream, reader) -> None:
    stream = make_stream("leaf")
    publish(stream, [("x", b"1", {"k": "v", "Nats-Msg-Id": "id-1"}), ("x", b"2")])
    chunks, _ = run(_read(stream, 1, 2))
    assert chunks[0].headers == [{"k": ["v"], "Nats-Msg-Id": ["id-1"]}, None]
    chunks, _ = run(_read(stream, 1, 2, include_headers=False))
    assert chunks[0].headers is None


def test_closing_early_deletes_the_consumer(make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 100)

    async def first_chunk_only():
        nc = await hub_client(stream.topology)
        try:
            reader = read_range(
                nc, stream.name, 1, 100, api_prefix=stream.api_prefix, settings=PullSettings(chunk_messages=10)
            )
            first = await reader.__anext__()
            await reader.aclose()
            info = await nc.jsm(prefix=stream.api_prefix).stream_info(stream.name)
            return first.sequences, info.state.consumer_count
        finally:
            await nc.close()

    seqs, consumers = run(first_chunk_only())
    assert seqs == list(range(1, 11))
    assert consumers == 0


def test_a_missing_stream_is_named_in_the_error(hub_leaf) -> None:
    from airflow_provider_jetstream.core.errors import JetStreamError

    async def go():
        nc = await hub_client(hub_leaf)
        try:
            return [c async for c in read_range(nc, "spark_nope", 1, 5, api_prefix="$JS.leaf.API")]
        finally:
            await nc.close()

    with pytest.raises(JetStreamError, match="stream 'spark_nope' in domain 'leaf' does not exist"):
        run(go())


def test_big_messages_come_in_chunks_bounded_by_bytes(make_stream) -> None:
    stream = make_stream("leaf")
    publish(stream, [("big", bytes([i]) * 300_000) for i in range(8)])
    settings = PullSettings(max_buffered_bytes=700_000)
    chunks, consumers = run(_read(stream, 1, 8, settings=settings))
    assert _seqs(chunks) == list(range(1, 9))
    assert max(sum(len(p) for p in c.payloads) for c in chunks) <= 900_000
    assert [p[:1] for c in chunks for p in c.payloads] == [bytes([i]) for i in range(8)]
    assert consumers == 0
