"""The range reader (``core/read/range.py``, on the pull engine) under faults, on real servers: a leaf
stream read through the hub while the leaf restarts, the hub restarts, the leaf link is cut, or the stream is purged.

Each read either returns exactly the range's rows, in order, once, or fails with an error that
says what happened; rows handed over before a failure are always a gap-free prefix of the range.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats
import pytest
from nats.js.api import StreamConfig

from airflow_provider_jetstream.core.errors import (
    JetStreamDataLossError,
    JetStreamDomainUnavailableError,
    JetStreamError,
)
from airflow_provider_jetstream.core.read.exact import MissingRange
from airflow_provider_jetstream.core.read.range import read_range
from airflow_provider_jetstream.core.read.settings import READERS, PullSettings
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from tests.support.management import uid

COUNT = 3000
#: Small buffers, so that most of the range is still on the server when the fault hits; quick
#: heartbeats, so that a stall is noticed within 1.5 s.
SETTINGS = PullSettings(max_buffered_messages=200, chunk_messages=100, heartbeat=0.5, expires=5)


@pytest.fixture(params=READERS, autouse=True)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every fault is tried on both range readers: the vectorised one and nats-py's."""
    monkeypatch.setattr("airflow_provider_jetstream.core.read.range.default_reader", lambda: request.param)
    return request.param


async def _connect(topology: LocalTopology) -> Any:
    user, password = USERS["ACC"]
    return await nats.connect(
        topology.hub.url, user=user, password=password, reconnect_time_wait=0.2, max_reconnect_attempts=-1
    )


async def _leaf_stream(topology: LocalTopology, count: int = COUNT) -> str:
    name = uid("pullfault")
    nc = await _connect(topology)
    try:
        js = nc.jetstream(domain="leaf")
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        for start in range(0, count, 500):
            acks = [await js.publish_async(f"{name}.x", b"m%d" % i) for i in range(start + 1, start + 501)]
            await asyncio.gather(*acks)
    finally:
        await nc.close()
    return name


async def _read_with_fault(
    topology: LocalTopology,
    stream: str,
    fault: Callable[[], Awaitable[None]],
    *,
    fail_on_data_loss: bool = True,
    missing: list[MissingRange] | None = None,
) -> tuple[list[int], list[bytes], BaseException | None, float]:
    """Read sequences 1..COUNT; run ``fault`` after the first chunk. Returns what was read, the
    error (if any), and the seconds the read took after the fault."""
    nc = await _connect(topology)
    seqs: list[int] = []
    payloads: list[bytes] = []
    error = None
    after = 0.0
    try:
        reader = read_range(
            nc,
            stream,
            1,
            COUNT,
            api_prefix="$JS.leaf.API",
            settings=SETTINGS,
            fail_on_data_loss=fail_on_data_loss,
            missing=missing,
        )
        try:
            first = await reader.__anext__()
            seqs += first.sequences
            payloads += first.payloads
            await fault()
            after = time.monotonic()
            async for chunk in reader:
                seqs += chunk.sequences
                payloads += chunk.payloads
        except JetStreamError as err:
            error = err
        finally:
            await reader.aclose()
        return seqs, payloads, error, time.monotonic() - after
    finally:
        await nc.close()


def _assert_prefix(seqs: list[int], payloads: list[bytes]) -> None:
    assert seqs == list(range(1, len(seqs) + 1)), "rows are a gap-free, repeat-free prefix"
    assert payloads == [b"m%d" % s for s in seqs]


def test_leaf_restarted_mid_read_resumes_and_returns_every_row_once(make_topology) -> None:
    topology = make_topology()
    stream = asyncio.run(_leaf_stream(topology))

    async def restart_leaf() -> None:
        # The leaf's JetStream (and the reader's memory-stored consumer on it) goes away and comes back.
        await asyncio.to_thread(topology.leaves["leaf"].restart)
        await asyncio.to_thread(topology.wait_linked)

    seqs, payloads, error, _ = asyncio.run(_read_with_fault(topology, stream, restart_leaf))
    assert error is None, error
    assert seqs == list(range(1, COUNT + 1))
    _assert_prefix(seqs, payloads)


def test_hub_restarted_mid_read_resumes_and_returns_every_row_once(make_topology) -> None:
    topology = make_topology()
    stream = asyncio.run(_leaf_stream(topology))

    async def restart_hub() -> None:
        # The server the reader is connected to restarts: the client reconnects, pull requests in
        # flight are lost.
        await asyncio.to_thread(topology.hub.restart)
        await asyncio.to_thread(topology.wait_linked)

    seqs, payloads, error, _ = asyncio.run(_read_with_fault(topology, stream, restart_hub))
    assert error is None, error
    assert seqs == list(range(1, COUNT + 1))
    _assert_prefix(seqs, payloads)


def test_leaf_link_cut_mid_read_fails_clearly_and_quickly(make_topology) -> None:
    topology = make_topology()
    stream = asyncio.run(_leaf_stream(topology))

    async def cut_link() -> None:
        await asyncio.to_thread(topology.disconnect_leaf, "leaf")

    seqs, payloads, error, seconds = asyncio.run(_read_with_fault(topology, stream, cut_link))
    assert isinstance(error, JetStreamDomainUnavailableError), error
    assert f"stream {stream!r} in domain 'leaf'" in str(error)
    assert "connected" in str(error)
    assert seconds < 30, f"the cut was noticed after {seconds:.1f}s"
    assert len(seqs) < COUNT
    _assert_prefix(seqs, payloads)


def _purge(topology: LocalTopology, stream: str) -> Callable[[], Awaitable[None]]:
    async def purge() -> None:
        nc = await _connect(topology)
        try:
            await nc.jsm(prefix="$JS.leaf.API").purge_stream(stream)
        finally:
            await nc.close()

    return purge


def test_purge_mid_read_is_data_loss_naming_exactly_the_purged_sequences(hub_leaf) -> None:
    stream = asyncio.run(_leaf_stream(hub_leaf))
    seqs, payloads, error, _ = asyncio.run(_read_with_fault(hub_leaf, stream, _purge(hub_leaf, stream)))
    assert isinstance(error, JetStreamDataLossError), error
    _assert_prefix(seqs, payloads)
    assert len(seqs) < COUNT
    assert f"sequences {len(seqs) + 1}-{COUNT} are no longer stored" in str(error)


def test_purge_mid_read_without_failing_returns_the_rows_read_and_the_gap(hub_leaf) -> None:
    stream = asyncio.run(_leaf_stream(hub_leaf))
    missing: list[MissingRange] = []
    seqs, payloads, error, _ = asyncio.run(
        _read_with_fault(hub_leaf, stream, _purge(hub_leaf, stream), fail_on_data_loss=False, missing=missing)
    )
    assert error is None, error
    _assert_prefix(seqs, payloads)
    assert missing == [MissingRange(len(seqs) + 1, COUNT)]
