"""The bulk frame writer against nats-py's ``publish`` on a real server: for generated subjects, reply
subjects, headers and payloads, a subscriber receives from the frames exactly what it receives from
``publish``, one message at a time (``add``) and from blocks framed in one pass (``add_block``: shared
headers with each message's ``Nats-Msg-Id``, or each message's own), and what ``publish`` refuses the
frames refuse too."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import nats
import nats.errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.blocks import Block
from airflow_provider_jetstream.core.publish.frames import FLUSH_FRAMES, FrameBuffer
from airflow_provider_jetstream.testing.servers import USERS, NatsServer
from tests.support.waiting import scaled

USER, PASSWORD = USERS["ACC"]
TOKEN = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="-_"), min_size=1, max_size=8)
SUBJECT = st.lists(TOKEN, min_size=1, max_size=4).map(".".join)
HEADER_NAME = st.text(st.sampled_from("!#$%&'*+-.^_`|~abcXYZ019"), min_size=1, max_size=10)
HEADER_VALUE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
HEADERS = st.dictionaries(st.one_of(HEADER_NAME, st.just(MSG_ID_HEADER)), HEADER_VALUE, max_size=3)
MESSAGE = st.tuples(
    SUBJECT,
    st.one_of(st.just(""), SUBJECT),
    st.binary(max_size=300),
    st.one_of(st.none(), st.dictionaries(HEADER_NAME, HEADER_VALUE, max_size=3)),
)


@st.composite
def blocks(draw: st.DrawFn) -> tuple[Block, int, int]:
    """A block (no headers; shared headers; shared headers and ids; each message's own) and a run of it."""
    payloads = draw(st.lists(st.binary(max_size=300), min_size=1, max_size=FLUSH_FRAMES + 20))
    n = len(payloads)
    form = draw(st.sampled_from(["plain", "shared", "ids", "each"]))
    if form == "each":
        block = Block(
            draw(SUBJECT), payloads, each=draw(st.lists(st.one_of(st.none(), HEADERS), min_size=n, max_size=n))
        )
    else:
        headers = draw(HEADERS) if form != "plain" else None
        ids = draw(st.lists(HEADER_VALUE, min_size=n, max_size=n)) if form == "ids" else None
        block = Block(draw(SUBJECT), payloads, headers, ids)
    start = draw(st.integers(0, n - 1))
    return block, start, draw(st.integers(start + 1, n))


@pytest.fixture(scope="module")
def core_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    node = NatsServer(
        name="frames",
        workdir=tmp_path_factory.mktemp("frames"),
        body=f"authorization {{ user: {USER}, password: {PASSWORD} }}\n",
    )
    node.start()
    try:
        yield node
    finally:
        node.stop()


async def received(url: str, count: int, send: Callable[[Any], Awaitable[None]]) -> list[Any]:
    """What a subscriber to ``>`` receives from ``send(nc)``, as ``(subject, reply, data, headers)``, once
    ``count`` messages arrived."""
    nc = await nats.connect(url, user=USER, password=PASSWORD)
    got: list[Any] = []
    done = asyncio.Event()

    async def on_message(msg: Any) -> None:
        got.append((msg.subject, msg.reply, msg.data, msg.headers))
        if len(got) == count:
            done.set()

    try:
        await nc.subscribe(">", cb=on_message)
        await nc.flush()
        await send(nc)
        await asyncio.wait_for(done.wait(), scaled(30))
        return got
    finally:
        await nc.close()


def by_publish(messages: list[tuple[str, str, bytes, dict[str, str] | None]]) -> Callable[[Any], Awaitable[None]]:
    async def send(nc: Any) -> None:
        for subject, reply, payload, headers in messages:
            await nc.publish(subject, payload, reply=reply, headers=headers)

    return send


def by_frames(messages: list[tuple[str, str, bytes, dict[str, str] | None]]) -> Callable[[Any], Awaitable[None]]:
    async def send(nc: Any) -> None:
        frames = FrameBuffer(nc)
        for subject, reply, payload, headers in messages:
            if frames.add(subject, reply, payload, headers):
                await frames.flush()
        await frames.flush()

    return send


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(messages=st.lists(MESSAGE, min_size=1, max_size=FLUSH_FRAMES + 20))
def test_a_subscriber_receives_from_the_frames_what_publish_sends(core_server: NatsServer, messages: list[Any]) -> None:
    published = asyncio.run(received(core_server.url, len(messages), by_publish(messages)))
    framed = asyncio.run(received(core_server.url, len(messages), by_frames(messages)))
    assert framed == published
    assert [m[0] for m in framed] == [m[0] for m in messages]  # in order


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    run=blocks(),
    reply=SUBJECT,
    first=st.integers(1, 10**9),
    after=st.sampled_from(["", ".1.$FI", ".x"]),
    cut=st.floats(0, 1),
)
def test_a_block_framed_in_one_pass_reaches_a_subscriber_as_its_messages_published_one_by_one(
    core_server: NatsServer, run: tuple[Block, int, int], reply: str, first: int, after: str, cut: float
) -> None:
    block, start, stop = run
    # Message start + k of the block with the reply subject <reply>.<first + k><after>, as publish sends it.
    messages = [
        (*block.message(i)[:1], f"{reply}.{first + i - start}{after}", *block.message(i)[1:])
        for i in range(start, stop)
    ]

    async def in_two_runs(nc: Any) -> None:
        frames = FrameBuffer(nc)
        middle = start + int((stop - start) * cut)
        frames.add_block(block, start, middle, f"{reply}.", first, after)
        frames.add_block(block, middle, stop, f"{reply}.", first + middle - start, after)
        assert len(frames) == stop - start
        await frames.flush()

    published = asyncio.run(received(core_server.url, len(messages), by_publish(messages)))
    framed = asyncio.run(received(core_server.url, len(messages), in_two_runs))
    assert framed == published


@pytest.mark.parametrize("name", ["bad name", "colon:", "", "é"])
def test_a_header_name_publish_refuses_is_refused_before_anything_is_sent(core_server: NatsServer, name: str) -> None:
    async def each_way() -> list[str]:
        nc = await nats.connect(core_server.url, user=USER, password=PASSWORD)
        outcomes = []
        try:
            for send in ("publish", "frames", "block", "block with ids"):
                frames = FrameBuffer(nc)
                try:
                    if send == "publish":
                        await nc.publish("x", b"1", headers={name: "v"})
                    elif send == "frames":
                        frames.add("x", "", b"1", {name: "v"})
                    else:
                        ids = ["a", "b"] if send == "block with ids" else None
                        frames.add_block(Block("x", [b"1", b"2"], {name: "v"}, ids), 0, 2, "r.", 1, "")
                    await frames.flush()
                    outcomes.append("sent")
                except nats.errors.Error as err:
                    outcomes.append(type(err).__name__)
                    assert len(frames) == 0  # nothing of a refused block was added
            return outcomes
        finally:
            await nc.close()

    outcomes = asyncio.run(each_way())
    assert outcomes == [outcomes[0]] * 4
    if name.strip():
        assert outcomes[0] == "BadHeaderError"


def test_a_payload_over_max_payload_is_refused_and_a_closed_client_sends_nothing(core_server: NatsServer) -> None:
    async def attempt() -> list[str]:
        nc = await nats.connect(core_server.url, user=USER, password=PASSWORD)
        frames = FrameBuffer(nc)
        outcomes = []
        with pytest.raises(nats.errors.MaxPayloadError):
            frames.add("x", "", b"x" * (nc.max_payload + 1), None)
        outcomes.append(len(frames))
        # In a block, the messages before the one over max_payload are added (as one by one), then it raises.
        too_big = Block("x", [b"1", b"2", b"x" * (nc.max_payload + 1), b"4"], {"a": "b"}, ["1", "2", "3", "4"])
        with pytest.raises(nats.errors.MaxPayloadError):
            frames.add_block(too_big, 0, 4, "r.", 1, "")
        outcomes.append(len(frames))
        frames = FrameBuffer(nc)
        await nc.close()
        frames.add("x", "", b"1", None)
        with pytest.raises(nats.errors.ConnectionClosedError):
            await frames.flush()
        return outcomes

    assert asyncio.run(attempt()) == [0, 2]
