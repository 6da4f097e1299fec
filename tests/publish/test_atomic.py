"""Atomic batches against a real nats-server: a batch is stored whole or not at all, the counts exact, a
repeat with the same ids stores nothing twice (the server refuses a whole batch holding an id it has:
the publish finds which and sends only the others), and a publish killed mid-batch leaves only whole
batches behind.

Atomic batches need nats-server 2.12+: the tests of the behaviour assert such a server (they fail,
never skip, on an older one); the refusal tests hold on any server (``NATS_SERVER_BIN`` of 2.10: refused
for the version, before anything is sent).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamPublishError
from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.atomic import AtomicBatches, atomic_target
from airflow_provider_jetstream.core.publish.engine import publish_messages
from airflow_provider_jetstream.core.publish.summary import PublishSummary
from airflow_provider_jetstream.testing.servers import USERS, NatsServer
from tests.support.atomic_publisher import messages as publisher_messages
from tests.support.management import uid
from tests.support.waiting import scaled, wait_until

REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = USERS["ACC"]


def _atomic(version: tuple[int, ...]) -> bool:
    return version >= (2, 12)


def _js(server: NatsServer, work: Callable[[Any], Any]) -> Any:
    async def go() -> Any:
        nc = await nats.connect(server.url, user=USER, password=PASSWORD)
        try:
            return await work(nc)
        finally:
            await nc.close()

    return asyncio.run(go())


def _stream(server: NatsServer, **config: Any) -> tuple[str, str]:
    """A new file stream (and its one subject) with ``config``, e.g. ``allow_atomic=True`` (a 2.10 server
    drops that field: its stream takes no atomic batches)."""
    name = uid("ab")
    subject = f"{name}.in"

    async def create(nc: Any) -> None:
        body = {"name": name, "subjects": [subject], "storage": "file", "duplicate_window": 120_000_000_000, **config}
        reply = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(body).encode(), 5)).data)
        assert "error" not in reply, reply

    _js(server, create)
    return name, subject


def _publish(server: NatsServer, subject: str, messages: Iterable[tuple[str, bytes, Any]], **options: Any) -> Any:
    """``messages`` published in atomic batches (``options``: :class:`AtomicBatches`' own) to the stream storing
    ``subject``: its summary."""

    async def go(nc: Any) -> PublishSummary:
        target = await atomic_target(JetStreamApi(nc), stream=None, subject=subject, what="test publish")
        return await publish_messages(nc, messages, mode=AtomicBatches(target, **options))

    return _js(server, go)


def _with_ids(subject: str, count: int, tag: str, payload: Callable[[int], bytes] = lambda i: str(i).encode()) -> Any:
    return [(subject, payload(i), {MSG_ID_HEADER: f"{tag}/{i}"}) for i in range(count)]


def _messages(server: NatsServer, stream: str) -> int:
    async def info(nc: Any) -> int:
        return (await nc.jetstream().stream_info(stream)).state.messages

    return _js(server, info)


def _payloads(server: NatsServer, stream: str, subject: str) -> list[str]:
    """Every payload of the stream, in stream order."""

    async def read(nc: Any) -> list[str]:
        js = nc.jetstream()
        sub = await js.pull_subscribe(subject, stream=stream, config=ConsumerConfig(ack_policy=AckPolicy.NONE))
        out: list[str] = []
        total = (await js.stream_info(stream)).state.messages
        while len(out) < total:
            out += [msg.data.decode() for msg in await sub.fetch(1000, timeout=5)]
        await sub.unsubscribe()
        return out

    return _js(server, read)


def test_2500_messages_go_in_three_atomic_batches_on_nats_server_2_12_and_are_refused_before(
    server: NatsServer, version: tuple[int, ...]
) -> None:
    """On 2.12+ every message is stored once, in order, in batches of 1000; an older server (which would store
    a batch's messages one by one) is refused before anything is sent, naming the version needed."""
    stream, subject = _stream(server, allow_atomic=True)
    n = 2500
    if not _atomic(version):
        with pytest.raises(JetStreamConfigError, match=r"atomic batches need nats-server 2\.12 or later"):
            _publish(server, subject, _with_ids(subject, n, "v"))
        assert _messages(server, stream) == 0
        return
    summary = _publish(server, subject, _with_ids(subject, n, "v"))
    assert (summary.count, summary.stored, summary.duplicates, summary.failures) == (n, n, 0, [])
    assert (summary.batches, summary.first_seq, summary.last_seq, summary.streams) == (3, 1, n, {(stream, None): n})
    assert _payloads(server, stream, subject) == [str(i) for i in range(n)]


def test_a_stream_without_allow_atomic_is_refused_before_anything_is_sent(
    server: NatsServer, version: tuple[int, ...]
) -> None:
    stream, subject = _stream(server)
    reason = "does not take atomic batches" if _atomic(version) else "need nats-server 2.12 or later"
    with pytest.raises(JetStreamConfigError, match=reason) as refused:
        _publish(server, subject, _with_ids(subject, 10, "na"))
    assert "nothing was sent" in str(refused.value)
    assert _messages(server, stream) == 0


def test_a_batch_with_one_refused_message_stores_none_of_it_and_the_other_batches_land(
    server: NatsServer, version: tuple[int, ...]
) -> None:
    """Message 1700 is over the stream's max_msg_size: its batch (1000..1999) stores nothing, each of its
    messages fails with the server's reason; the batches before and after it are stored."""
    assert _atomic(version), f"atomic batches need nats-server 2.12+, this one is {version}"
    stream, subject = _stream(server, allow_atomic=True, max_msg_size=1000)
    summary = _publish(
        server, subject, _with_ids(subject, 2500, "big", lambda i: b"x" * 2000 if i == 1700 else b"%d" % i)
    )
    assert (summary.count, summary.stored, summary.duplicates, len(summary.failures)) == (2500, 1500, 0, 1000)
    assert sorted(index for index, _ in summary.failures) == list(range(1000, 2000))
    assert summary.reasons() == (
        "1000 x message size exceeds maximum allowed (err_code 10054): the atomic batch (#1000..#1999) stored "
        "none (refused at #1700) (first: #1000)"
    )
    assert _payloads(server, stream, subject) == [str(i) for i in range(2500) if not 1000 <= i < 2000]


def test_a_message_to_a_subject_outside_the_stream_refuses_the_whole_batch(
    server: NatsServer, version: tuple[int, ...]
) -> None:
    assert _atomic(version), f"atomic batches need nats-server 2.12+, this one is {version}"
    stream, subject = _stream(server, allow_atomic=True)
    messages = [(f"{stream}.elsewhere" if i == 5 else subject, b"%d" % i, None) for i in range(10)]
    summary = _publish(server, subject, messages, whole=True)
    assert (summary.stored, summary.duplicates, len(summary.failures)) == (0, 0, 10)
    assert summary.reasons() == (
        "10 x no stream listens on its subject: the atomic batch (#0..#9) stored none (refused at #5) (first: #0)"
    )
    assert _messages(server, stream) == 0


def test_more_messages_than_one_batch_takes_are_refused_whole_before_anything_is_sent(
    server: NatsServer, version: tuple[int, ...]
) -> None:
    """The server's limit is 1000 messages per batch: 1000 land together; 1001 that must land together are
    refused, never split, with the limit in the error."""
    assert _atomic(version), f"atomic batches need nats-server 2.12+, this one is {version}"
    stream, subject = _stream(server, allow_atomic=True)
    with pytest.raises(JetStreamPublishError, match=r"more than 1000 messages for one atomic batch") as refused:
        _publish(server, subject, _with_ids(subject, 1001, "lim"), whole=True)
    assert "nothing was sent" in str(refused.value)
    assert _messages(server, stream) == 0
    summary = _publish(server, subject, _with_ids(subject, 1000, "lim"), whole=True)
    assert (summary.stored, summary.batches, summary.failures) == (1000, 1, [])


def test_a_repeat_with_the_same_ids_counts_duplicates_and_stores_only_the_new_messages(
    server: NatsServer, version: tuple[int, ...]
) -> None:
    """The server refuses a whole atomic batch holding an id it has (10201): the repeat stores nothing twice
    and succeeds, the stored ids counted as duplicates; the batch that mixes stored and new ids (2000..2999)
    stores its 500 new ones together."""
    assert _atomic(version), f"atomic batches need nats-server 2.12+, this one is {version}"
    stream, subject = _stream(server, allow_atomic=True)
    first = _publish(server, subject, _with_ids(subject, 2500, "rep"))
    assert (first.stored, first.duplicates) == (2500, 0)
    again = _publish(server, subject, _with_ids(subject, 3000, "rep"))
    assert (again.count, again.stored, again.duplicates, again.failures) == (3000, 500, 2500, [])
    assert (again.first_seq, again.last_seq) == (2501, 3000)
    # An id twice in one batch: the server would refuse the batch; the repeat counts as a duplicate.
    twice = _publish(server, subject, [(subject, b"a", {MSG_ID_HEADER: "x"}), (subject, b"b", {MSG_ID_HEADER: "x"})])
    assert (twice.stored, twice.duplicates, twice.failures) == (1, 1, [])
    assert _payloads(server, stream, subject) == [str(i) for i in range(3000)] + ["a"]


def test_a_publish_killed_mid_batch_leaves_whole_batches_and_a_repeat_stores_every_message_once(
    server: NatsServer, version: tuple[int, ...]
) -> None:
    assert _atomic(version), f"atomic batches need nats-server 2.12+, this one is {version}"
    stream, subject = _stream(server, allow_atomic=True)
    n = 50_000
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.atomic_publisher", server.url, USER, PASSWORD, subject, str(n), "kill"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: _messages(server, stream), lambda m: m >= 5000, 60, "5,000 stored")
    finally:
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=scaled(30))
    counts: list[int] = []
    wait_until(
        lambda: counts.append(_messages(server, stream)) or counts[-3:],
        lambda last: len(last) == 3 and len(set(last)) == 1,
        30,
        "a steady count",
    )
    stored = counts[-1]
    # Only whole batches of 1000: the one being sent when the publisher died stored nothing.
    assert 5000 <= stored < n and stored % 1000 == 0, (stored, out, err)
    again = _publish(server, subject, publisher_messages(subject, n, "kill"))
    assert (again.count, again.stored, again.duplicates, again.failures) == (n, n - stored, stored, [])
    assert _messages(server, stream) == n
