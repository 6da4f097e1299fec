"""The wire splitter and column builder of the vectorised reader, on byte streams (no server)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from airflow_provider_jetstream.core.protocol import status_headers
from airflow_provider_jetstream.core.read.vectorised.columns import headers_to_map, to_columns
from airflow_provider_jetstream.core.read.vectorised.scan import _MARK_CHUNK, scan_data_frames
from airflow_provider_jetstream.core.read.vectorised.tap import BULK_READ, TapParser, install
from tests.support.waiting import scaled

SID = 7


def _rows(bufs: list[bytes], records: Any, raw_headers: bool = False) -> list[tuple[Any, ...]]:
    """(subject, sequence, timestamp, drained, consumer, payload, headers) per data frame; headers
    as the map column, or the raw header block."""
    frames = to_columns(bufs, records)
    return list(
        zip(
            frames.subjects.to_pylist(),
            frames.sequences.tolist(),
            frames.timestamps_ns.tolist(),
            frames.drained.tolist(),
            [frames.consumer(row) for row in range(len(frames))],
            frames.payloads.to_pylist(),
            (frames.headers if raw_headers else headers_to_map(frames.headers)).to_pylist(),
            strict=True,
        )
    )


class _Sink:
    """Collects what the tap hands over, in order: ("data", rows) and ("other", frame)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_data(self, bufs: list[bytes], records: Any) -> None:
        rows = _rows(bufs, records)
        if self.events and self.events[-1][0] == "data":
            self.events[-1][1].extend(rows)
        else:
            self.events.append(("data", rows))

    def on_other(self, subject: bytes, reply: bytes, header: bytes, payload: bytes) -> None:
        self.events.append(("other", (subject, reply, status_headers(header) if header else {}, payload)))


class _Client:
    """What nats-py's Parser calls on its client for frames that are not tapped."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def _process_ping(self) -> None:
        self.seen.append("PING")

    async def _process_pong(self) -> None:
        self.seen.append("PONG")

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.seen.append(("INFO", info))

    async def _process_err(self, err: str) -> None:
        self.seen.append(("ERR", err))

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        self.seen.append(("MSG", sid, subject, reply, data, headers))


def reply(seq: int, layout: str = "v1", pending: int = 5) -> bytes:
    numbers = b"1.%d.%d.17000000000%08d.%d" % (seq, seq, seq, pending)
    if layout == "v1":
        return b"$JS.ACK.ORDERS.c1." + numbers
    if layout == "v2":
        return b"$JS.ACK.hub.ACCHASH.ORDERS.c1." + numbers
    return b"$JS.ACK.hub.ACCHASH.ORDERS.c1." + numbers + b".r4nd0m"


def msg(
    seq: int,
    data: bytes = b"hello",
    subject: bytes = b"orders.new",
    layout: str = "v1",
    sid: int = SID,
    pending: int = 5,
) -> bytes:
    return b"MSG %s %d %s %d\r\n%s\r\n" % (subject, sid, reply(seq, layout, pending), len(data), data)


def hmsg(seq: int, header: bytes, data: bytes = b"h", subject: bytes = b"orders.new", layout: str = "v1") -> bytes:
    total = len(header) + len(data)
    return b"HMSG %s %d %s %d %d\r\n%s%s\r\n" % (subject, SID, reply(seq, layout), len(header), total, header, data)


def status(header: bytes, subject: bytes = b"_INBOX.abc", reply_to: bytes = b"") -> bytes:
    middle = b" " + reply_to if reply_to else b""
    return b"HMSG %s %d%s %d %d\r\n%s\r\n" % (subject, SID, middle, len(header), len(header), header)


REPEATED = b"NATS/1.0\r\nk: 1\r\nNats-Msg-Id: a\r\nk:  2 \r\nk:3\r\n\r\n"
HEARTBEAT = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 3\r\nNats-Last-Stream: 3\r\n\r\n"
TIMEOUT = b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 7\r\nNats-Pending-Bytes: 0\r\n\r\n"
NO_MESSAGES = b"NATS/1.0 404 No Messages\r\n\r\n"
CONFLICT = b"NATS/1.0 409 Consumer Deleted\r\n\r\n"
FLOW = b"NATS/1.0 100 FlowControl Request\r\n\r\n"

#: Every kind of frame, tapped and not, in one stream.
WIRE = b"".join(
    [
        b'INFO {"server_id":"x","max_payload":1048576}\r\n',
        msg(1),
        b"PING\r\n",
        msg(2, b"x" * 40, layout="v2"),
        hmsg(3, REPEATED, layout="v2+"),
        msg(4, b"", subject=b"a.very.long.subject.name.indeed"),
        msg(99, b"other sid", sid=8),
        msg(5, b"with\r\nCRLF\r\nMSG inside 7 x 1\r\n"),
        status(HEARTBEAT),
        b"+OK\r\n",
        msg(6, b"z" * 300),
        status(TIMEOUT),
        status(NO_MESSAGES),
        b"PONG\r\n",
        status(CONFLICT),
        status(FLOW, reply_to=b"$JS.FC.ORDERS.abc.1"),
        msg(7, layout="v2+"),
        b"-ERR 'Permissions Violation for Subscription to \"x\"'\r\n",
    ]
)


_LOOP = asyncio.new_event_loop()


def feed(pieces: list[bytes]) -> tuple[list[tuple[str, Any]], list[Any]]:
    client, sink = _Client(), _Sink()
    parser = TapParser(client)
    parser.tap(SID, sink)

    async def run() -> None:
        for piece in pieces:
            await parser.parse(piece)
        parser.flush()

    _LOOP.run_until_complete(run())
    return sink.events, client.seen


def _flatten(events: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Events with data rows one by one (how rows are grouped into runs depends on the reads)."""
    flat: list[tuple[str, Any]] = []
    for kind, item in events:
        flat.extend(("row", row) for row in item) if kind == "data" else flat.append((kind, item))
    return flat


EXPECTED_ROWS = [
    ("orders.new", 1, 1700000000000000001, False, "c1", b"hello", None),
    ("orders.new", 2, 1700000000000000002, False, "c1", b"x" * 40, None),
    ("orders.new", 3, 1700000000000000003, False, "c1", b"h", [("k", ["1", "2", "3"]), ("Nats-Msg-Id", ["a"])]),
    ("a.very.long.subject.name.indeed", 4, 1700000000000000004, False, "c1", b"", None),
    ("orders.new", 5, 1700000000000000005, False, "c1", b"with\r\nCRLF\r\nMSG inside 7 x 1\r\n", None),
    ("orders.new", 6, 1700000000000000006, False, "c1", b"z" * 300, None),
    ("orders.new", 7, 1700000000000000007, False, "c1", b"hello", None),
]


def test_every_frame_kind_in_one_read() -> None:
    events, seen = feed([WIRE])
    flat = _flatten(events)
    assert [item for kind, item in flat if kind == "row"] == EXPECTED_ROWS
    others = [item for kind, item in flat if kind == "other"]
    assert [(o[0], o[1], o[2].get("Status"), o[2].get("Description")) for o in others] == [
        (b"_INBOX.abc", b"", "100", "Idle Heartbeat"),
        (b"_INBOX.abc", b"", "408", "Request Timeout"),
        (b"_INBOX.abc", b"", "404", "No Messages"),
        (b"_INBOX.abc", b"", "409", "Consumer Deleted"),
        (b"_INBOX.abc", b"$JS.FC.ORDERS.abc.1", "100", "FlowControl Request"),
    ]
    assert others[0][2]["Nats-Last-Stream"] == "3"
    assert others[1][2]["Nats-Pending-Messages"] == "7"
    # Statuses come in wire order between the rows around them.
    kinds = [kind if kind == "other" else item[1] for kind, item in flat]
    assert kinds == [1, 2, 3, 4, 5, "other", 6, "other", "other", "other", "other", 7]
    # Everything else reached nats-py's parser, in order.
    assert seen == [
        ("INFO", {"server_id": "x", "max_payload": 1048576}),
        "PING",
        ("MSG", 8, b"orders.new", reply(99), b"other sid", None),
        "PONG",
        ("ERR", "'permissions violation for subscription to \"x\"'"),
    ]


def test_a_stream_split_at_every_byte_offset_gives_the_same_frames() -> None:
    events, seen = feed([WIRE])
    whole = _flatten(events), seen
    for cut in range(1, len(WIRE)):
        events, seen = feed([WIRE[:cut], WIRE[cut:]])
        assert (_flatten(events), seen) == whole, f"split at byte {cut}"


def test_a_stream_read_byte_by_byte_and_in_odd_pieces() -> None:
    events, seen = feed([WIRE])
    whole = _flatten(events), seen
    events, seen = feed([WIRE[i : i + 1] for i in range(len(WIRE))])
    assert (_flatten(events), seen) == whole
    for size in (3, 7, 64, 333):
        pieces = [WIRE[i : i + size] for i in range(0, len(WIRE), size)]
        events, seen = feed(pieces)
        assert (_flatten(events), seen) == whole, f"pieces of {size} bytes"


@pytest.mark.parametrize("layout", ["v1", "v2", "v2+"])
def test_ack_reply_layouts(layout: str) -> None:
    events, _ = feed([msg(41, layout=layout, pending=0)])
    assert _flatten(events) == [("row", ("orders.new", 41, 1700000000000000041, True, "c1", b"hello", None))]


@pytest.mark.parametrize(
    "reply_to",
    [
        b"$JS.ACK.a.b.c",  # too few tokens
        b"$JS.ACK.ORDERS.c1.1.4x.4.1700000000000000004.0",  # not a number
        b"$JS.ACK.ORDERS.c1.1.4.4.99999999999999999999.0",  # over int64
        b"$JS.ACK.ORDERS.c1.1.4.4..0",  # empty
    ],
)
def test_an_unknown_ack_reply_layout_is_an_error(reply_to: bytes) -> None:
    good = msg(3)
    bad = b"MSG s %d %s 1\r\nx\r\n" % (SID, reply_to)
    with pytest.raises(ValueError, match="unexpected JetStream ack reply subject"):
        feed([good + bad + good])


def test_headers_keep_every_value_of_a_repeated_name_and_empty_blocks_are_null() -> None:
    import pyarrow as pa

    raw = pa.array(
        [REPEATED, None, b"NATS/1.0\r\n\r\n", b"NATS/1.0\r\nb: 2\r\na: 1\r\nb: 3\r\nno colon\r\n\r\n"], pa.binary()
    )
    assert headers_to_map(raw).to_pylist() == [
        [("k", ["1", "2", "3"]), ("Nats-Msg-Id", ["a"])],
        None,
        None,
        [("b", ["2", "3"]), ("a", ["1"])],
    ]


def test_install_takes_over_a_half_read_frame_of_nats_py() -> None:
    """Installed while nats-py's own parser holds half a frame: that frame still reaches nats-py."""
    from nats.protocol.parser import Parser

    client = _Client()
    client._ps = Parser(client)  # type: ignore[attr-defined]
    other = msg(1, b"0123456789", sid=8)
    tapped = msg(2)
    sink = _Sink()

    async def run() -> None:
        await client._ps.parse(other[:-6])  # type: ignore[attr-defined]  # control line read, payload half
        parser = install(client)  # type: ignore[arg-type]
        assert install(client) is parser  # type: ignore[arg-type]
        parser.tap(SID, sink)
        await parser.parse(other[-6:] + tapped[:10])
        await parser.parse(tapped[10:])
        parser.flush()

    asyncio.run(run())
    assert client.seen == [("MSG", 8, b"orders.new", reply(1), b"0123456789", None)]
    assert [row[1] for _, row in _flatten(sink.events)] == [2]


def test_untapped_frames_go_to_nats_py_and_reset_drops_a_partial_frame() -> None:
    client, sink = _Client(), _Sink()
    parser = TapParser(client)
    parser.tap(SID, sink)

    async def run() -> None:
        await parser.parse(msg(1) + msg(2)[:15])
        parser.reset()  # a reconnect: the half frame of the old socket is gone
        parser.untap(SID)
        await parser.parse(msg(3))

    asyncio.run(run())
    assert [row[1] for _, row in _flatten(sink.events)] == [1]
    assert client.seen == [("MSG", SID, b"orders.new", reply(3), b"hello", None)]


class _RawRows:
    """Keeps each tapped data row as (subject, sequence, timestamp, drained, consumer, payload, raw
    header block) and each status as ("other", subject, reply, header, payload)."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.arrived = asyncio.Event()

    def on_data(self, bufs: list[bytes], records: Any) -> None:
        self.rows += _rows(bufs, records, raw_headers=True)
        self.arrived.set()

    def on_other(self, subject: bytes, reply: bytes, header: bytes, payload: bytes) -> None:
        self.rows.append(("other", subject, reply, header, payload))
        self.arrived.set()


def _oracle(wire: bytes) -> tuple[list[tuple[Any, ...]], list[Any]]:
    """What nats-py's own parser makes of ``wire``: the tapped sid's frames as rows, the rest."""
    from nats.protocol.parser import Parser

    client = _Client()
    _LOOP.run_until_complete(Parser(client).parse(wire))
    rows: list[tuple[Any, ...]] = []
    for item in client.seen:
        if item[0] == "MSG" and item[1] == SID:
            _, _, subject, reply_to, data, header = item
            if reply_to.startswith(b"$JS.ACK."):
                tokens = reply_to.split(b".")
                shift = 2 if len(tokens) >= 11 else 0
                consumer = tokens[3 + shift].decode()
                seq, stamp = (int(tokens[i + shift]) for i in (5, 7))
                drained = tokens[8 + shift] == b"0"
                rows.append((subject.decode(), seq, stamp, drained, consumer, data, header or None))
            else:
                rows.append(("other", subject, reply_to, header or b"", data))
    return rows, [item for item in client.seen if not (item[0] == "MSG" and item[1] == SID)]


def _random_wire(rng: Any, frames: int) -> bytes:
    """Frames of every kind; payloads full of what a splitter could mistake for frame bytes."""
    tricky = [b"\r\n", b" ", b".", b"MSG ", b"HMSG ", b"\r\nMSG ", b"\n", b"7", b"$JS.ACK."]
    tricky += [msg(999), hmsg(998, REPEATED)]
    parts = []
    for seq in range(1, frames + 1):
        data = b"".join(
            rng.choice(tricky) if rng.random() < 0.3 else bytes([rng.randrange(256)])
            for _ in range(rng.randrange(0, 60))
        )
        kind = rng.random()
        layout = rng.choice(["v1", "v2", "v2+"])
        subject = rng.choice([b"a", b"orders.new", b"x.y.z.%d" % seq])
        if kind < 0.6:
            parts.append(msg(seq, data, subject=subject, layout=layout, pending=rng.choice([0, 1, 123456789012])))
        elif kind < 0.75:
            parts.append(hmsg(seq, b"NATS/1.0\r\nk: %d\r\n\r\n" % seq, data, subject=subject, layout=layout))
        elif kind < 0.85:
            parts.append(msg(seq, data, sid=8))
        elif kind < 0.9:
            parts.append(status(rng.choice([HEARTBEAT, TIMEOUT, NO_MESSAGES, FLOW])))
        else:
            parts.append(rng.choice([b"PING\r\n", b"PONG\r\n", b"+OK\r\n"]))
    return b"".join(parts)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bulk_splitting_agrees_with_nats_py_on_random_frames_and_reads(seed: int) -> None:
    """Random frames whose payloads hold CRLFs, spaces, dots and whole fake frames of the tapped
    sid, read in random pieces (bulk reads are held and scanned together): the rows, the
    statuses and what reaches nats-py are exactly what nats-py's own parser makes of the bytes."""
    import random

    rng = random.Random(seed)
    wire = _random_wire(rng, 6000)
    expected_rows, expected_seen = _oracle(wire)
    assert len(expected_rows) > 4000
    client, sink = _Client(), _RawRows()
    parser = TapParser(client)
    parser.tap(SID, sink)

    async def run() -> None:
        pos = 0
        while pos < len(wire):
            size = rng.choice([1, 17, 300, 4096, 32768, 32768, 32768, 70000])
            await parser.parse(wire[pos : pos + size])
            pos += size
        await parser.parse(b"")  # an empty read releases what is held

    _LOOP.run_until_complete(run())
    assert sink.rows == expected_rows
    assert client.seen == expected_seen


def test_frames_across_the_scans_steps_are_found_whole() -> None:
    """In a buffer several times the scan's step, with payloads full of CRLFs, spaces and dots and
    frames straddling every step boundary, every frame is found whole: its bounds and its row."""
    frames = [msg(seq, b"p. q\r\n" * (seq % 40)) for seq in range(1, 6000)]
    wire = b"".join(frames)
    assert len(wire) > 4 * _MARK_CHUNK
    starts, ends, records, which = scan_data_frames(wire, [str(SID).encode()])
    sizes = [len(frame) for frame in frames]
    assert ends.tolist() == list(itertools.accumulate(sizes))
    assert starts.tolist() == [0, *ends[:-1].tolist()]
    assert [row[1] for row in _rows([wire], records)] == list(range(1, 6000))
    assert set(which.tolist()) == {0}


def test_a_small_read_is_handed_over_at_once_and_bulk_reads_are_held_together() -> None:
    """A read under BULK_READ with nothing held (a status, a few frames) reaches the sink at once;
    a bulk read is held, and a small read after it joins it; an empty read releases them."""
    sink = _RawRows()
    parser = TapParser(_Client(), hold_seconds=60)
    parser.tap(SID, sink)
    bulk = b"".join(msg(seq, b"x" * 100) for seq in range(2, 60))
    assert len(bulk) >= BULK_READ

    async def run() -> None:
        await parser.parse(msg(1))
        assert [row[1] for row in sink.rows] == [1]
        await parser.parse(bulk)
        await parser.parse(msg(60))
        assert [row[1] for row in sink.rows] == [1]
        await parser.parse(b"")
        assert [row[1] for row in sink.rows] == list(range(1, 61))

    asyncio.run(run())


def test_a_held_full_read_is_handed_over_after_hold_seconds_without_more_data() -> None:
    """A bulk read is held for more; when none comes, the timer hands its frames over."""
    sink = _RawRows()
    parser = TapParser(_Client(), hold_seconds=0.01)
    parser.tap(SID, sink)
    frames = b"".join(msg(seq, b"x" * 100) for seq in range(1, 400))
    cut = 32768 - len(msg(1, b"x" * 100)) // 2  # the last frame of the read is incomplete

    async def run() -> None:
        await parser.parse(frames[:cut].ljust(32768, b"\0")[:cut] + frames[cut:32768])
        assert sink.rows == []  # held
        await asyncio.wait_for(sink.arrived.wait(), scaled(10))

    asyncio.run(run())
    complete = frames[:32768].count(b"MSG ")
    assert [row[1] for row in sink.rows] == list(range(1, complete))


def test_reset_hands_over_the_held_frames_of_the_old_socket_and_drops_its_partial_frame() -> None:
    client, sink = _Client(), _RawRows()
    parser = TapParser(client)
    parser.tap(SID, sink)
    frames = b"".join(msg(seq, b"y" * 100) for seq in range(1, 400))

    async def run() -> None:
        await parser.parse(frames[:32768])
        parser.reset()
        await parser.parse(msg(1000))

    asyncio.run(run())
    sequences = [row[1] for row in sink.rows]
    held = frames[:32768].count(b"MSG ") - 1  # the last one is cut
    assert sequences == [*range(1, held + 1), 1000]
