"""The vectorised reader finds in bulk what ``parse_ack_reply`` reads from one ack reply: same sequence, timestamp,
pending-is-zero and consumer name for every MSG/HMSG frame (``scan_data_frames`` + ``to_columns``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_jetstream.core.protocol import AckReply, parse_ack_reply
from airflow_provider_jetstream.core.read.vectorised.columns import to_columns
from airflow_provider_jetstream.core.read.vectorised.scan import scan_data_frames
from airflow_provider_jetstream.core.read.vectorised.tap import TapParser
from tests.support.wire import ack_replies, hmsg_frame, msg_frame

SID, OTHER_SID = 7, 8
#: Payload bytes a splitter could take for frame bytes, among random ones.
TRICKY = [b"\r\n", b" ", b".", b"MSG ", b"HMSG ", b"\r\nMSG ", b"\n", b"7", b"$JS.ACK."]
payloads = st.lists(st.one_of(st.sampled_from(TRICKY), st.binary(max_size=6)), max_size=8).map(b"".join)
subjects = st.sampled_from([b"a", b"orders.new", b"x.y.z", b"$KV.bucket.key"])
headers = st.sampled_from([b"NATS/1.0\r\n\r\n", b"NATS/1.0\r\nk: 1\r\nk: 2\r\n\r\n", b"NATS/1.0\r\nId: a\r\n\r\n"])


@st.composite
def frames(draw: st.DrawFn) -> tuple[bytes, AckReply, int]:
    """``(frame, what its ack reply says, sid)``: MSG or HMSG, of the tapped sid or another one."""
    reply, meta = draw(ack_replies())
    subject, data = draw(subjects), draw(payloads)
    sid = draw(st.sampled_from([SID, SID, SID, OTHER_SID]))
    if draw(st.booleans()):
        frame = hmsg_frame(subject, sid, reply.encode(), draw(headers), data)
    else:
        frame = msg_frame(subject, sid, reply.encode(), data)
    return frame, meta, sid


def _expected(metas: list[AckReply]) -> list[tuple[int, int, bool, str]]:
    return [(m.sequence, m.timestamp_ns, m.pending == 0, m.consumer) for m in metas]


def _bulk(bufs: list[bytes], records: Any) -> list[tuple[int, int, bool, str]]:
    """What the vectorised reader found: ``(sequence, timestamp, pending is 0, consumer)`` per frame."""
    columns = to_columns(bufs, records)
    found = list(
        zip(
            columns.sequences.tolist(),
            columns.timestamps_ns.tolist(),
            columns.drained.tolist(),
            [columns.consumer(row) for row in range(len(columns))],
            strict=True,
        )
    )
    for row, (*_, consumer) in enumerate(found):  # the bulk name comparison says the same
        one = columns.slice(row, row + 1)
        other = consumer[:-1] + ("b" if consumer.endswith("a") else "a")  # as long, or shorter in bytes
        assert one.consumer_is(consumer).tolist() == [True] and one.consumer_is(other).tolist() == [False]
    return found


@settings(max_examples=60, deadline=None)
@given(st.lists(frames(), min_size=1, max_size=12))
def test_the_bulk_scan_agrees_with_parse_ack_reply_on_every_frame(cases: list[tuple[bytes, AckReply, int]]) -> None:
    wire = b"".join(frame for frame, _, _ in cases)
    for frame, meta, _ in cases:  # the oracle: each reply, read alone
        reply = frame.split(b" ")[3].decode()
        assert parse_ack_reply(reply) == meta
    # Every frame boundary, and which frames are the tapped sid's.
    bounds, at = [], 0
    for frame, _, sid in cases:
        bounds.append((at, at + len(frame), sid))
        at += len(frame)
    ours = [meta for _, meta, sid in cases if sid == SID]
    begin, end, records, which = scan_data_frames(wire, [str(SID).encode()])
    # A payload may hold bytes that look like a frame: the reader trusts a candidate only where the previous frame
    # ended (tap.py chains them); here the boundaries are known.
    real = {start for start, _, sid in bounds if sid == SID}
    keep = [i for i, start in enumerate(begin.tolist()) if start in real]
    assert [(begin[i], end[i]) for i in keep] == [(start, stop) for start, stop, sid in bounds if sid == SID]
    assert set(which[keep].tolist()) <= {0}
    assert _bulk([wire], records[keep]) == _expected(ours)


def _tap(pieces: list[bytes]) -> tuple[list[tuple[int, int, bool, str]], int]:
    """What the tap (the reader's production path: scan, chain, columns) hands over, and frames it passed on."""
    rows: list[tuple[int, int, bool, str]] = []
    passed: list[Any] = []

    class Sink:
        def on_data(self, bufs: list[bytes], records: Any) -> None:
            rows.extend(_bulk(bufs, records))

        def on_other(self, *frame: Any) -> None:
            passed.append(frame)

    class Client:
        async def _process_msg(self, *frame: Any) -> None:
            passed.append(frame)

    parser = TapParser(Client())
    parser.tap(SID, Sink())

    async def feed() -> None:
        for piece in pieces:
            await parser.parse(piece)
        await parser.parse(b"")
        parser.flush()

    asyncio.run(feed())
    return rows, len(passed)


@settings(max_examples=40, deadline=None)
@given(st.lists(frames(), min_size=1, max_size=12), st.data())
def test_the_tap_agrees_with_parse_ack_reply_however_the_bytes_arrive(
    cases: list[tuple[bytes, AckReply, int]], data: st.DataObject
) -> None:
    wire = b"".join(frame for frame, _, _ in cases)
    cut = data.draw(st.integers(0, len(wire)))
    rows, passed = _tap([wire[:cut], wire[cut:]])
    assert rows == _expected([meta for _, meta, sid in cases if sid == SID])
    assert passed == sum(sid != SID for _, _, sid in cases)


@pytest.mark.parametrize(
    "reply",
    [
        b"$JS.ACK.ORDERS.c1.1.41.40.1700000000000000041",  # 8 tokens
        b"$JS.ACK.hub.AH.ORDERS.c1.1.41.40.1700000000000000041",  # 10 tokens
        b"$JS.ACK.hub.AH.ORDERS.c1.1.41.40.1700000000000000041.0.rnd.more",  # 13 tokens
        b"$JS.ACK.ORDERS.c1.1.4x.40.1700000000000000041.0",  # not a number
        b"$JS.ACK.hub.AH.ORDERS.c1.1..40.1700000000000000041.0",  # empty
    ],
)
def test_an_ack_reply_parse_ack_reply_refuses_is_refused_by_the_vectorised_reader(reply: bytes) -> None:
    assert parse_ack_reply(reply.decode()) is None
    with pytest.raises(ValueError, match="unexpected JetStream ack reply subject"):
        _tap([msg_frame(b"s", SID, reply, b"x")])


def test_a_number_past_int64_is_refused_by_both() -> None:
    reply = b"$JS.ACK.ORDERS.c1.1.41.40.99999999999999999999.0"
    with pytest.raises(ValueError, match="unexpected JetStream ack reply subject"):
        _tap([msg_frame(b"s", SID, reply, b"x")])
    assert parse_ack_reply(reply.decode()) is None


def test_a_longer_consumer_name_is_not_the_rows() -> None:
    wire = msg_frame(b"s", SID, b"$JS.ACK.S.c.1.1.1.1.0", b"")
    _, _, records, _ = scan_data_frames(wire, [str(SID).encode()])
    assert to_columns([wire], records).consumer_is("read_" + "0" * 32).tolist() == [False]
