"""The wire protocol as plain data (``core/protocol.py``): ack replies, pull statuses, header blocks, publish acks."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_jetstream.core.errors import JetStreamPublishError
from airflow_provider_jetstream.core.protocol import (
    FATAL,
    HEARTBEAT,
    REQUEST_DONE,
    RESUME,
    RETRY_AFTER,
    AckReply,
    PubAck,
    headers_from_api,
    parse_ack_reply,
    parse_header_block,
    parse_pub_ack,
    probe_refusal,
    pull_status,
    status_headers,
)
from tests.support.wire import ack_replies, ack_reply_subject, names

FAST = settings(max_examples=200, deadline=None)

# -- ack replies ------------------------------------------------------------------------------------------

TS = 1_700_000_000_123_456_789


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        # servers before 2.9: 9 tokens, no domain
        ("$JS.ACK.ORDERS.c1.2.41.40.1700000000123456789.5", AckReply("ORDERS", "c1", 2, 41, 40, TS, 5, None)),
        # domain and account hash after $JS.ACK: 11 tokens
        ("$JS.ACK.hub.ACCHASH.ORDERS.c1.1.7.3.1700000000123456789.0", AckReply("ORDERS", "c1", 1, 7, 3, TS, 0, "hub")),
        # and a random token at the end: 12 tokens
        ("$JS.ACK.leaf.AH.S.dur.3.9.9.1700000000123456789.12.x9Yz", AckReply("S", "dur", 3, 9, 9, TS, 12, "leaf")),
        # domain "_": none
        ("$JS.ACK._.ACCHASH.ORDERS.c1.1.7.3.1700000000123456789.0", AckReply("ORDERS", "c1", 1, 7, 3, TS, 0, None)),
        ("$JS.ACK._.AH.S.dur.3.9.9.1700000000123456789.12.rnd", AckReply("S", "dur", 3, 9, 9, TS, 12, None)),
        # the largest numbers the server writes (int64)
        (
            f"$JS.ACK.S.c.{2**63 - 1}.{2**63 - 1}.{2**63 - 1}.{2**63 - 1}.{2**63 - 1}",
            AckReply("S", "c", 2**63 - 1, 2**63 - 1, 2**63 - 1, 2**63 - 1, 2**63 - 1, None),
        ),
    ],
)
def test_every_ack_reply_layout_is_read(reply: str, expected: AckReply) -> None:
    assert parse_ack_reply(reply) == expected


@pytest.mark.parametrize(
    "reply",
    [
        None,
        "",
        "_INBOX.abc.1",  # a plain reply
        "$JS.FC.ORDERS.abc.1",  # flow control
        "$JS.ACK",  # the prefix alone
        "$JS.ACKX.ORDERS.c1.1.41.40.1700000000123456789.5",  # not the prefix
        "$JS.ACK.a.b.c",  # too few tokens
        "$JS.ACK.ORDERS.c1.1.41.40.1700000000123456789",  # 8 tokens
        "$JS.ACK.hub.AH.ORDERS.c1.1.41.40.1700000000123456789",  # 10 tokens
        "$JS.ACK.hub.AH.ORDERS.c1.1.41.40.1700000000123456789.5.rnd.more",  # 13 tokens
        "$JS.ACK.ORDERS.c1.1.4x.40.1700000000123456789.5",  # not a number
        "$JS.ACK.ORDERS.c1.1..40.1700000000123456789.5",  # an empty number
        "$JS.ACK.hub.AH.ORDERS.c1.1.41.40.17000000001234567x9.0",  # not a number in the domain layout
        "$JS.ACK.hub.AH.ORDERS.c1.one.41.40.1700000000123456789.0.rnd",
    ],
)
def test_anything_else_is_not_an_ack_reply(reply: str | None) -> None:
    assert parse_ack_reply(reply) is None


@FAST
@given(ack_replies())
def test_generated_ack_replies_round_trip(case: tuple[str, AckReply]) -> None:
    """Any stream and consumer name, domain (or none), number up to 2**63-1, in each of the three layouts."""
    reply, expected = case
    assert parse_ack_reply(reply) == expected


@FAST
@given(names, names, st.sampled_from([9, 11, 12]), st.integers(0, 2**63 - 1), st.integers(0, 4))
def test_a_generated_reply_with_a_token_missing_or_not_a_number_is_refused(
    stream: str, consumer: str, layout: int, n: int, broken: int
) -> None:
    meta = AckReply(stream, consumer, n, n, n, n, n, "d" if layout > 9 else None)
    reply = ack_reply_subject(meta, layout)
    # Only the 12-token layout's last (random) token may go: it is then the 11-token layout.
    assert parse_ack_reply(reply.rsplit(".", 1)[0]) == (meta if layout == 12 else None)
    tokens = reply.split(".")
    tokens[(4 if layout == 9 else 6) + broken] += "x"  # one of the five numbers
    assert parse_ack_reply(".".join(tokens)) is None


# -- pull statuses ----------------------------------------------------------------------------------------


def _status(code: str, description: str = "", **headers: str) -> dict[str, str]:
    out = {"Status": code, **headers}
    if description:
        out["Description"] = description
    return out


@pytest.mark.parametrize(
    ("code", "description", "outcome", "every_request", "oversized"),
    [
        ("100", "Idle Heartbeat", HEARTBEAT, False, False),
        ("404", "No Messages", REQUEST_DONE, False, False),
        ("408", "Request Timeout", REQUEST_DONE, False, False),
        ("503", "No Responders", RETRY_AFTER, False, False),
        ("409", "Batch Completed", REQUEST_DONE, False, False),
        ("409", "Message Size Exceeds MaxBytes", REQUEST_DONE, False, True),
        ("409", "Leadership Change", REQUEST_DONE, True, False),
        ("409", "Consumer Deleted", RESUME, False, False),
        ("409", "Exceeded MaxRequestBatch of 1000", FATAL, False, False),
        ("409", "Exceeded MaxRequestExpires of 5s", FATAL, False, False),
        ("409", "Exceeded MaxRequestMaxBytes of 1024", FATAL, False, False),
        ("409", "Consumer is push based", FATAL, False, False),
        ("409", "Server Shutdown", RETRY_AFTER, False, False),
        ("409", "Exceeded MaxWaiting", RETRY_AFTER, False, False),
        ("409", "Something A Later Server Says", RETRY_AFTER, False, False),  # unknown 409: pull again later
        ("409", "", RETRY_AFTER, False, False),
        ("400", "Bad Request", FATAL, False, False),
        ("423", "Nats-Pin-Id Mismatch", FATAL, False, False),
        ("500", "Internal Error", FATAL, False, False),  # any other code: the same request is refused again
        ("999", "", FATAL, False, False),
    ],
)
def test_every_status_of_the_table_has_its_outcome(
    code: str, description: str, outcome: str, every_request: bool, oversized: bool
) -> None:
    status = pull_status(_status(code, description))
    assert status is not None
    assert (status.outcome, status.code, status.description) == (outcome, code, description)
    assert (status.every_request, status.oversized) == (every_request, oversized)
    assert status.reason == f"{code} {description}".strip()


@pytest.mark.parametrize("description", ["batch completed", "  BATCH COMPLETED  ", "Batch Completed; more words"])
def test_409_descriptions_are_read_case_blind_and_by_prefix(description: str) -> None:
    status = pull_status(_status("409", description))
    assert status is not None and status.outcome == REQUEST_DONE and status.description == description.strip()


@pytest.mark.parametrize("headers", [None, {}, {"Status": ""}, {"Nats-Msg-Id": "x"}, {"Description": "Idle Heartbeat"}])
def test_a_message_without_a_status_code_is_not_a_status(headers: dict[str, str] | None) -> None:
    assert pull_status(headers) is None


@pytest.mark.parametrize(
    ("pending", "unfilled"), [("7", 7), ("0", 0), (None, None), ("", None), ("seven", None), ("-1", -1)]
)
def test_the_messages_a_request_did_not_deliver(pending: str | None, unfilled: int | None) -> None:
    extra = {} if pending is None else {"Nats-Pending-Messages": pending}
    for code, description in (("408", "Request Timeout"), ("409", "Batch Completed"), ("404", "No Messages")):
        status = pull_status(_status(code, description, **extra))
        assert status is not None and status.unfilled == unfilled


@pytest.mark.parametrize(("last", "seq"), [("3", 3), ("0", 0), (None, None), ("", None), ("x", None)])
def test_a_heartbeat_says_the_last_stream_sequence_delivered(last: str | None, seq: int | None) -> None:
    extra = {} if last is None else {"Nats-Last-Stream": last}
    status = pull_status(_status("100", "Idle Heartbeat", **extra))
    assert status is not None and status.outcome == HEARTBEAT and status.last_stream_seq == seq
    other = pull_status(_status("408", "Request Timeout", **extra))
    assert other is not None and other.last_stream_seq is None  # only a heartbeat says it


# -- header blocks ----------------------------------------------------------------------------------------


def test_a_header_block_keeps_every_value_of_a_repeated_name_in_order() -> None:
    raw = b"NATS/1.0\r\nk: 1\r\nNats-Msg-Id: a\r\nk:  2 \r\nk:3\r\n  spaced  :  v  \r\n\r\n"
    assert parse_header_block(raw) == (None, "", {"k": ["1", "2", "3"], "Nats-Msg-Id": ["a"], "spaced": ["v"]})


def test_a_status_line_gives_code_and_description() -> None:
    raw = b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 7\r\nNats-Pending-Bytes: 0\r\n\r\n"
    assert parse_header_block(raw) == (
        "408",
        "Request Timeout",
        {"Nats-Pending-Messages": ["7"], "Nats-Pending-Bytes": ["0"]},
    )
    assert parse_header_block(b"NATS/1.0 503\r\n\r\n") == ("503", "", {})
    assert parse_header_block(b"NATS/1.0 100 FlowControl Request\r\n\r\n") == ("100", "FlowControl Request", {})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", (None, "", {})),
        (b"NATS/1.0\r\n\r\n", (None, "", {})),
        (b"NATS/1.0", (None, "", {})),
        (b"NATS/1.0 abc Not A Code\r\n\r\n", (None, "Not A Code", {})),  # no digits: no code
        (b"NATS/1.0\r\nno colon\r\n: no name\r\n\r\n", (None, "", {})),  # blanks and nameless lines
        (b"NATS/1.0\r\nurl: http://x:8080/a\r\n\r\n", (None, "", {"url": ["http://x:8080/a"]})),  # first ':' only
        (b"NATS/1.0\r\nempty:\r\n\r\n", (None, "", {"empty": [""]})),
        (b"NATS/1.0\r\nk: \xff\r\n\r\n", (None, "", {"k": ["\ufffd"]})),  # not UTF-8: replaced, not an error
        (b"HTTP/1.1 200 OK\r\nk: v\r\n\r\n", (None, "", {"k": ["v"]})),  # no NATS/1.0 line: no status
    ],
)
def test_header_block_edge_cases(raw: bytes, expected: tuple) -> None:
    assert parse_header_block(raw) == expected


header_names = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=":"), min_size=1, max_size=12
)
header_values = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=20).map(str.strip)


@FAST
@given(
    st.lists(st.tuples(header_names, header_values), max_size=8),
    st.one_of(st.none(), st.tuples(st.integers(100, 599).map(str), header_values)),
)
def test_generated_header_blocks_read_back(pairs: list[tuple[str, str]], first: tuple[str, str] | None) -> None:
    line = "NATS/1.0" if first is None else f"NATS/1.0 {first[0]} {first[1]}".rstrip()
    raw = (line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in pairs) + "\r\n").encode()
    expected: dict[str, list[str]] = {}
    for name, value in pairs:
        expected.setdefault(name, []).append(value)
    status, description, headers = parse_header_block(raw)
    assert headers == expected and list(headers) == list(expected)  # names in order of first appearance
    assert status == (None if first is None else first[0])
    assert description == ("" if first is None else first[1])
    # what nats-py hands a status message: the last value of each, and Status / Description when given
    flat = status_headers(raw)
    assert {k: v for k, v in flat.items() if k not in ("Status", "Description")} == {
        k: v[-1] for k, v in expected.items() if k not in ("Status", "Description")
    }
    if first is not None:
        assert flat["Status"] == first[0]
        assert flat.get("Description", "") == first[1]


def test_status_headers_are_what_nats_py_gives_a_status_message() -> None:
    raw = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 3\r\nNats-Last-Stream: 3\r\nk: 1\r\nk: 2\r\n\r\n"
    assert status_headers(raw) == {
        "Status": "100",
        "Description": "Idle Heartbeat",
        "Nats-Last-Consumer": "3",
        "Nats-Last-Stream": "3",
        "k": "2",
    }
    assert status_headers(b"NATS/1.0 503\r\n\r\n") == {"Status": "503"}  # no empty Description
    assert status_headers(b"NATS/1.0\r\nk: v\r\n\r\n") == {"k": "v"}
    status = pull_status(status_headers(raw))
    assert status is not None and status.outcome == HEARTBEAT and status.last_stream_seq == 3


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"hdrs": base64.b64encode(b"NATS/1.0\r\nX-Tag: one\r\nX-Tag: two\r\nK: v\r\n\r\n").decode()},
         {"X-Tag": ["one", "two"], "K": ["v"]}),
        ({"hdrs": base64.b64encode(b"NATS/1.0\r\n\r\n").decode()}, {}),
        ({}, {}),
        ({"hdrs": None}, {}),
        ({"hdrs": ""}, {}),
        ({"hdrs": "abc"}, {}),  # not base64 (bad padding): no headers rather than an error
    ],
)  # fmt: skip
def test_headers_of_a_stream_msg_get_answer(message: dict, expected: dict) -> None:
    assert headers_from_api(message) == expected


# -- publish acks -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"stream":"ORDERS","seq":5}', PubAck("ORDERS", 5)),
        (b'{"stream":"ORDERS","seq":5,"domain":"hub"}', PubAck("ORDERS", 5, "hub")),
        (b'{"stream":"ORDERS","seq":5,"domain":""}', PubAck("ORDERS", 5, None)),
        (b'{"stream":"ORDERS","seq":5,"domain":null}', PubAck("ORDERS", 5, None)),
        (b'{"stream":"ORDERS","seq":5,"duplicate":true}', PubAck("ORDERS", 5, None, True)),
        (b'{"stream":"ORDERS","seq":5,"duplicate":"true"}', PubAck("ORDERS", 5, None, False)),  # only JSON true
        (b'{"stream":"ORDERS","seq":9223372036854775807,"domain":"leaf","duplicate":false}',
         PubAck("ORDERS", 2**63 - 1, "leaf", False)),
        (b'{"stream":"S","seq":1,"unknown":"field"}', PubAck("S", 1)),
        # An atomic batch's commit: its id and how many messages it stored.
        (b'{"stream":"A","seq":3,"batch":"b1","count":3}', PubAck("A", 3, batch="b1", count=3)),
        (b'{"stream":"A","seq":3,"batch":"","count":true}', PubAck("A", 3)),
    ],
)  # fmt: skip
def test_publish_acks(data: bytes, expected: PubAck) -> None:
    assert parse_pub_ack(data) == expected


def test_a_refusal_is_an_error_with_the_servers_code_and_words() -> None:
    data = b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":3}'
    with pytest.raises(JetStreamPublishError) as refused:
        parse_pub_ack(data)
    assert (refused.value.err_code, refused.value.description) == (10077, "maximum messages exceeded")
    assert str(refused.value) == "maximum messages exceeded (err_code 10077)"
    with pytest.raises(JetStreamPublishError) as bare:
        parse_pub_ack(b'{"error":{}}')
    assert bare.value.err_code is None and str(bare.value) == " (err_code None)"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{}",
        b'{"stream":"x"}',
        b'{"seq":5}',
        b"[1, 2]",
        b'["stream", "seq"]',
        b"null",
        b'"ok"',
        b"5",
        b"not json",
        b"\xff\xfe",
        b'{"stream":"S","seq":true}',  # a bool is not a sequence
        b'{"stream":"S","seq":0}',
        b'{"stream":"S","seq":-1}',
        b'{"stream":"S","seq":"5"}',
        b'{"stream":"S","seq":5.0}',
        b'{"stream":"","seq":5}',
        b'{"stream":5,"seq":5}',
        b'{"stream":"S","seq":5,"domain":7}',
        b'{"error":"refused","stream":"S"}',  # an error that is not the server's shape, and no ack
    ],
)
def test_a_reply_that_is_not_an_ack_is_never_counted_as_stored(data: bytes) -> None:
    with pytest.raises(JetStreamPublishError, match="not a JetStream publish ack") as refused:
        parse_pub_ack(data)
    assert refused.value.err_code is None


@FAST
@given(names, st.integers(1, 2**63 - 1), st.one_of(st.none(), names), st.booleans())
def test_generated_publish_acks_round_trip(stream: str, seq: int, domain: str | None, duplicate: bool) -> None:
    body: dict = {"stream": stream, "seq": seq, "duplicate": duplicate}
    if domain is not None:
        body["domain"] = domain
    assert parse_pub_ack(json.dumps(body).encode()) == PubAck(stream, seq, domain, duplicate)


@pytest.mark.parametrize(
    ("reply", "stream"),
    [
        (
            b'{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},"stream":"OBJ_f"}',
            "OBJ_f",
        ),
        (b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 0"},"stream":"OBJ_f"}', None),
        (b'{"error":{"code":400,"err_code":10060}}', None),
        (b'{"stream":"OBJ_f","seq":3}', None),
        (b"hello", None),
        (b"", None),
    ],
)
def test_only_an_expected_stream_refusal_counts_as_a_store_probe_answer(reply: bytes, stream: str | None) -> None:
    """A store probe's answer names a stream that listens on the probed subject and stored nothing; an ack, another
    refusal or a plain subscriber's reply is not one (so it cannot make a bucket look stored elsewhere)."""
    assert probe_refusal(reply) == stream
