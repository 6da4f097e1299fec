"""The bulk frame writer against nats-py's ``publish`` on a real server: for generated subjects, reply
subjects, headers and payloads, a subscriber receives from the frames exactly what it receives from
``publish``, and what ``publish`` refuses the frames refuse too."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import nats
import nats.errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_jetstream.core.publish.frames import FLUSH_FRAMES, FrameBuffer
from airflow_provider_jetstream.testing.servers import USERS, NatsServer
from tests.support.waiting import scaled

USER, PASSWORD = USERS["ACC"]
TOKEN = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="-_"), min_size=1, max_size=8)
SUBJECT = st.lists(TOKEN, min_size=1, max_size=4).map(".".join)
HEADER_NAME = st.text(st.sampled_from("!#$%&'*+-.^_`|~abcXYZ019"), min_size=1, max_size=10)
HEADER_VALUE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
MESSAGE = st.tuples(
    SUBJECT,
    st.one_of(st.just(""), SUBJECT),
    st.binary(max_size=300),
    st.one_of(st.none(), st.dictionaries(HEADER_NAME, HEADER_VALUE, max_size=3)),
)


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


async def received(url: str, messages: list[tuple[str, str, bytes, dict[str, str] | None]], bulk: bool) -> list[Any]:
    """What a subscriber to ``>`` receives, as ``(subject, reply, data, headers)``, once all arrived."""
    nc = await nats.connect(url, user=USER, password=PASSWORD)
    got: list[Any] = []
    done = asyncio.Event()

    async def on_message(msg: Any) -> None:
        got.append((msg.subject, msg.reply, msg.data, msg.headers))
        if len(got) == len(messages):
            done.set()

    try:
        await nc.subscribe(">", cb=on_message)
        await nc.flush()
        if bulk:
            frames = FrameBuffer(nc)
            for subject, reply, payload, headers in messages:
                if frames.add(subject, reply, payload, headers):
                    await frames.flush()
            await frames.flush()
        else:
            for subject, reply, payload, headers in messages:
                await nc.publish(subject, payload, reply=reply, headers=headers)
        await asyncio.wait_for(done.wait(), scaled(30))
        return got
    finally:
        await nc.close()


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(messages=st.lists(MESSAGE, min_size=1, max_size=FLUSH_FRAMES + 20))
def test_a_subscriber_receives_from_the_frames_what_publish_sends(core_server: NatsServer, messages: list[Any]) -> None:
    by_publish = asyncio.run(received(core_server.url, messages, bulk=False))
    by_frames = asyncio.run(received(core_server.url, messages, bulk=True))
    assert by_frames == by_publish
    assert [m[0] for m in by_frames] == [m[0] for m in messages]  # in order


@pytest.mark.parametrize("name", ["bad name", "colon:", "", "é"])
def test_a_header_name_publish_refuses_is_refused_before_anything_is_sent(core_server: NatsServer, name: str) -> None:
    async def both() -> tuple[str, str]:
        nc = await nats.connect(core_server.url, user=USER, password=PASSWORD)
        outcomes = []
        try:
            for send in ("publish", "frames"):
                try:
                    if send == "publish":
                        await nc.publish("x", b"1", headers={name: "v"})
                    else:
                        frames = FrameBuffer(nc)
                        frames.add("x", "", b"1", {name: "v"})
                        await frames.flush()
                    outcomes.append("sent")
                except nats.errors.Error as err:
                    outcomes.append(type(err).__name__)
            return outcomes[0], outcomes[1]
        finally:
            await nc.close()

    by_publish, by_frames = asyncio.run(both())
    assert by_frames == by_publish
    if name.strip():
        assert by_frames == "BadHeaderError"


def test_a_payload_over_max_payload_is_refused_and_a_closed_client_sends_nothing(core_server: NatsServer) -> None:
    async def attempt() -> list[str]:
        nc = await nats.connect(core_server.url, user=USER, password=PASSWORD)
        frames = FrameBuffer(nc)
        outcomes = []
        with pytest.raises(nats.errors.MaxPayloadError):
            frames.add("x", "", b"x" * (nc.max_payload + 1), None)
        outcomes.append(len(frames))
        await nc.close()
        frames.add("x", "", b"1", None)
        with pytest.raises(nats.errors.ConnectionClosedError):
            await frames.flush()
        return outcomes

    assert asyncio.run(attempt()) == [0]
