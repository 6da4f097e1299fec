"""Fast-ingest batch publishing against a real nats-server: every message stored once, in order, the
counts exact, the fast path taken where the stream allows it (2.14+) and the per-message path otherwise;
a publish killed mid-batch and repeated with the same ids stores each message once.

On the CI's older servers (``NATS_SERVER_BIN`` of 2.10 or 2.12, which know no ``allow_batched``) the
same tests prove the fall back: the messages go one by one, and a batch forced on such a server (its
``$FI`` replies ignored) turns into single publishes after its first reply.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamPublishError
from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.engine import publish_messages
from airflow_provider_jetstream.core.publish.fast_ingest import BatchTarget
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import USERS, NatsServer
from tests.support.management import uid
from tests.support.waiting import scaled, wait_until

REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = USERS["ACC"]


@pytest.fixture
def conn(server: NatsServer, jetstream_conn: Callable[..., str]) -> str:
    return jetstream_conn(host=f"127.0.0.1:{server.port}", login=USER, password=PASSWORD)


def _js(server: NatsServer, work: Callable[[Any, Any], Any]) -> Any:
    async def go() -> Any:
        nc = await nats.connect(server.url, user=USER, password=PASSWORD)
        try:
            return await work(nc, nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(go())


def _stream(server: NatsServer, version: tuple[int, ...], **config: Any) -> tuple[str, str]:
    """A new stream (and its one subject) with ``config``, e.g. ``allow_batched=True``: a field the server
    does not know is left out (2.12 refuses it, 2.10 drops it)."""
    if not _batched(version):
        config.pop("allow_batched", None)
    name = uid("fi")
    subject = f"{name}.in"

    async def create(nc: Any, _js: Any) -> None:
        body = {"name": name, "subjects": [subject], "storage": "file", "duplicate_window": 120_000_000_000, **config}
        reply = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(body).encode(), 5)).data)
        assert "error" not in reply, reply

    _js(server, create)
    return name, subject


def _state(server: NatsServer, stream: str) -> dict[str, Any]:
    async def info(_nc: Any, js: Any) -> dict[str, Any]:
        state = (await js.stream_info(stream)).state
        return {"messages": state.messages, "first_seq": state.first_seq, "last_seq": state.last_seq}

    return _js(server, info)


def _payloads(server: NatsServer, stream: str, subject: str) -> list[tuple[int, str, str]]:
    """Every message of the stream: ``(sequence, payload, Nats-Msg-Id)``, in stream order."""

    async def read(_nc: Any, js: Any) -> list[tuple[int, str, str]]:
        sub = await js.pull_subscribe(subject, stream=stream, config=ConsumerConfig(ack_policy=AckPolicy.NONE))
        out: list[tuple[int, str, str]] = []
        total = (await js.stream_info(stream)).state.messages
        while len(out) < total:
            for msg in await sub.fetch(5000, timeout=5):
                out.append((msg.metadata.sequence.stream, msg.data.decode(), (msg.headers or {}).get(MSG_ID_HEADER)))
        await sub.unsubscribe()
        return out

    return _js(server, read)


def _batched(version: tuple[int, ...]) -> bool:
    return version >= (2, 14)


def test_20000_messages_with_ids_go_in_one_fast_ingest_batch_stored_once_in_order(
    server: NatsServer, conn: str, version: tuple[int, ...]
) -> None:
    stream, subject = _stream(server, version, allow_batched=True)
    n = 20_000
    result = JetStreamHook(jetstream_conn_id=conn).publish(subject, (str(i) for i in range(n)), msg_id="fi/{index}")
    assert (result["count"], result["stored"], result["duplicates"]) == (n, n, 0)
    assert (result["first_seq"], result["last_seq"], result["stream"]) == (1, n, stream)
    if _batched(version):
        # One batch; a flow ack per window of up to 500 messages and the final ack, not one per message.
        assert result["batches"] == 1 and result["acks"] <= n // 50, result
    else:
        assert result["batches"] == 0 and result["acks"] == n, result  # no allow_batched before 2.14
    assert _state(server, stream) == {"messages": n, "first_seq": 1, "last_seq": n}
    assert _payloads(server, stream, subject) == [(i + 1, str(i), f"fi/{i}") for i in range(n)]


def test_a_stream_without_allow_batched_gets_one_message_at_a_time(
    server: NatsServer, conn: str, version: tuple[int, ...]
) -> None:
    stream, subject = _stream(server, version)
    result = JetStreamHook(jetstream_conn_id=conn).publish(subject, [f"m{i}" for i in range(500)], msg_id="pm/{index}")
    assert (result["stored"], result["duplicates"], result["batches"], result["acks"]) == (500, 0, 0, 500)
    assert _state(server, stream)["messages"] == 500


def test_fast_ingest_false_forces_the_per_message_path_and_a_repeat_counts_duplicates(
    server: NatsServer, conn: str, version: tuple[int, ...]
) -> None:
    stream, subject = _stream(server, version, allow_batched=True)
    hook = JetStreamHook(jetstream_conn_id=conn)
    first = hook.publish(subject, [f"m{i}" for i in range(300)], msg_id="fx/{index}", fast_ingest=False)
    assert (first["stored"], first["batches"], first["acks"]) == (300, 0, 300)
    # The same ids and 200 more: the fast path (2.14+) skips the 300 it has, and says so exactly.
    again = hook.publish(subject, [f"m{i}" for i in range(500)], msg_id="fx/{index}")
    assert (again["count"], again["stored"], again["duplicates"]) == (500, 200, 300)
    assert again["batches"] == (1 if _batched(version) else 0)
    assert _state(server, stream) == {"messages": 500, "first_seq": 1, "last_seq": 500}


def test_a_batch_the_server_answers_as_single_publishes_falls_back_after_its_first_reply(
    server: NatsServer, version: tuple[int, ...]
) -> None:
    """A batch forced on a stream that takes none: on 2.10/2.12 the first message is stored as an ordinary
    publish (its ordinary ack settles it); on 2.14+ the server refuses the batch (10205) and the message
    goes again, one by one. Either way every message is stored once."""
    stream, subject = _stream(server, version)
    n = 1000

    async def publish(nc: Any, _js: Any) -> Any:
        messages = ((subject, str(i).encode(), {MSG_ID_HEADER: f"fb/{i}"}) for i in range(n))
        return await publish_messages(nc, messages, batch=BatchTarget(JetStreamApi(nc), stream, subject))

    summary = _js(server, publish)
    assert (summary.count, summary.stored, summary.duplicates, summary.failures) == (n, n, 0, [])
    # The first reply (an ordinary ack; on 2.14+ the refusal of the batch), then one ack per message left.
    assert summary.batches == 0 and summary.replies == n + (1 if _batched(version) else 0)
    assert _payloads(server, stream, subject) == [(i + 1, str(i), f"fb/{i}") for i in range(n)]


def test_a_publish_killed_mid_batch_and_repeated_with_the_same_ids_stores_every_message_once(
    server: NatsServer, conn: str, version: tuple[int, ...]
) -> None:
    # Fast ingest itself is under test: on an older server this fails, it is never skipped.
    assert _batched(version), f"fast ingest needs nats-server 2.14+, this one is {version}"
    stream, subject = _stream(server, version, allow_batched=True)
    n = 200_000
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fast_publisher", server.url, USER, PASSWORD, subject, str(n), "kill"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: _state(server, stream)["messages"], lambda m: m >= 20_000, 60, "20,000 stored")
    finally:
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=scaled(30))
    # What the server had received when the publisher died is stored by now: the count holds still.
    counts: list[int] = []
    wait_until(
        lambda: counts.append(_state(server, stream)["messages"]) or counts[-3:],
        lambda last: len(last) == 3 and len(set(last)) == 1,
        30,
        "a steady count",
    )
    stored = counts[-1]
    assert 20_000 <= stored < n, (stored, out, err)
    result = JetStreamHook(jetstream_conn_id=conn).publish(subject, (str(i) for i in range(n)), msg_id="kill/{index}")
    assert (result["count"], result["stored"], result["duplicates"]) == (n, n - stored, stored)
    assert result["batches"] == 1
    # Every one of the n ids is in the stream (the repeat settled each: stored, or a duplicate of one stored)
    # and the stream holds n messages, nothing else ever sent to it: each id exactly once.
    assert _state(server, stream) == {"messages": n, "first_seq": 1, "last_seq": n}


def test_a_message_refused_mid_batch_fails_with_the_servers_reason_and_the_rest_are_stored(
    server: NatsServer, conn: str, version: tuple[int, ...]
) -> None:
    """Message 1500 is over the stream's max_msg_size: the batch ends there (gap mode ``fail``), that message
    fails with the server's reason, and the messages after it go one by one."""
    stream, subject = _stream(server, version, allow_batched=True, max_msg_size=1000)
    n = 3000
    messages = ["x" * 2000 if i == 1500 else str(i) for i in range(n)]
    with pytest.raises(JetStreamPublishError) as raised:
        JetStreamHook(jetstream_conn_id=conn).publish(subject, messages, msg_id="mr/{index}")
    text = str(raised.value)
    assert "1 of 3000 messages were not stored (stored 2999, duplicates 0, failed 1" in text, text
    assert "1 x " in text and "(first: #1500)" in text and "maximum" in text, text
    assert _state(server, stream)["messages"] == n - 1
    assert [p for _, p, _ in _payloads(server, stream, subject)] == [str(i) for i in range(n) if i != 1500]


def test_a_refusal_of_every_message_fails_each_with_its_reason(
    server: NatsServer, conn: str, version: tuple[int, ...]
) -> None:
    stream, subject = _stream(server, version, allow_batched=True)
    with pytest.raises(JetStreamPublishError) as raised:
        JetStreamHook(jetstream_conn_id=conn).publish(
            subject, [str(i) for i in range(200)], msg_id="rf/{index}", expected_stream="not-this-one"
        )
    text = str(raised.value)
    assert "200 of 200 messages were not stored (stored 0, duplicates 0, failed 200" in text, text
    assert "200 x expected stream does not match" in text, text
    assert _state(server, stream)["messages"] == 0
