"""The publish engine's fast-ingest mode (nats-server 2.14+, a stream with ``allow_batched``): one ack per flow window.

nats-py lacks it; this is the protocol of ADR-50 as the server implements it. Each message of a batch
is published with the reply subject ``<inbox>.<flow>.fail.<batch seq>.<op>.$FI``: the inbox's last
token is the batch id, ``flow`` the most messages per ack asked for, gap mode ``fail`` (a lost or
refused message ends the batch), op 0 the first message, 1 the next ones, 3 the end of the batch
(EOB, not stored), 4 a ping. The server stores each message as it arrives and acks a flow window
(``{"type":"ack","seq":S,"msgs":N}``: every message up to ``S`` is persisted, ``N`` the next window),
reports a lost message (``"gap"``) or a refused one (``"err"``), and ends the batch with its final
PubAck (no ``type``: ``stream``, ``seq`` of its last stored message, ``batch``, ``count``). The
sender keeps at most :data:`MAX_OUTSTANDING` windows unacknowledged and, while it waits, pings every
``ack_timeout / 3`` (the server sends its latest ack again). The messages are written in runs of
frames built in bulk (:mod:`~airflow_provider_jetstream.core.publish.frames`), not one ``publish`` each.

Servers before 2.14 ignore the ``$FI`` pattern: the first message is stored as an ordinary publish
and answered with an ordinary PubAck. The first reply's shape says which; anything but a flow ack
hands the messages left to the per-message engine (:func:`publish_batches` returns them).

A batch that ends early (a gap, a refused message, a batch the server lost): messages with a
``Nats-Msg-Id`` after the last one persisted are sent again in a new batch, after the resend rule's pause
(:mod:`~airflow_provider_jetstream.core.resend`; the stream skips an id it stored already, silently); without
an id they are failures (:data:`~airflow_provider_jetstream.core.resend.NOT_REPUBLISHED`), the same
guarantee as the per-message engine. A refused message is a failure with the server's reason, and
the messages after it go one by one (a refusal, such as a wrong expected stream, may hold for all).

Counting: a final ack gives how many messages the batch settled, not how many the stream skipped as
duplicates. The stream's last sequence before the batch (``STREAM.INFO``) and in the final ack give
the stored ones: exact while the publish is the stream's only writer (a concurrent writer's messages
can hide duplicates, counted as stored then).

Airflow-free: Spark executors import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import UNAVAILABLE, JetStreamError, JetStreamPublishError
from airflow_provider_jetstream.core.protocol import is_no_responders, parse_pub_ack
from airflow_provider_jetstream.core.publish.blocks import Block, Item, Sent, numbered
from airflow_provider_jetstream.core.publish.frames import FrameBuffer
from airflow_provider_jetstream.core.publish.summary import Outgoing, PublishSummary, failure_reason
from airflow_provider_jetstream.core.resend import NOT_REPUBLISHED, ResendWindow, may_resend, nothing_stores_now
from airflow_provider_jetstream.core.tasks import wait_task

OP_START, OP_APPEND, OP_COMMIT, OP_EOB, OP_PING = range(5)
#: Most messages per flow ack asked for. The server caps it at 500 shared among the stream's batches.
FLOW = 500
#: Flow windows sent and not yet acknowledged before the sender waits (ADR-50 recommends 2).
MAX_OUTSTANDING = 2
#: Server codes saying fast ingest cannot take this batch now (disabled on the stream, too many
#: batches in flight): the messages go one by one instead.
NOT_NOW = (10205, 10211)
#: Server codes of a malformed batch (invalid pattern, invalid batch id): this client's fault.
MALFORMED = (10206, 10207)

#: Messages and blocks with the index of their (first) message.
Numbered = Iterator[tuple[int, Item]]


@dataclass(frozen=True)
class BatchTarget:
    """A stream that takes fast-ingest batches of messages to one ``subject``; ``api`` reads its state."""

    api: JetStreamApi
    stream: str
    subject: str


async def batch_target(api: JetStreamApi, subject: str) -> BatchTarget | None:
    """The stream storing ``subject`` when it takes fast-ingest batches (``allow_batched`` in its
    config, which only nats-server 2.14+ keeps), else None: no such stream, several, or the lookup
    refused (the per-message path needs no lookup)."""
    try:
        names = await api.stream_names(subject)
        info = await api.stream_info(names[0]) if len(names) == 1 else None
    except (JetStreamError, nats.errors.Error):
        return None
    config = (info or {}).get("config") or {}
    if not config.get("allow_batched") or config.get("mirror"):
        return None
    return BatchTarget(api, names[0], subject)


class _Batch:
    """One batch's replies: routed by their body's ``type`` (every reply comes on some message's subject)."""

    def __init__(self, nc: Client, subject: str, flow: int, max_outstanding: int, progress: float) -> None:
        self.nc = nc
        self.max_outstanding = max_outstanding
        #: The batch sequence of the last message sent.
        self.seq = 0
        self.subject = subject
        self.prefix = nc.new_inbox()
        self.reply = f"{self.prefix}.{flow}.fail."
        self.now = asyncio.get_running_loop().time
        self.ack_seq = 0
        self.flow = 1
        self.first: dict[str, Any] | None = None
        self.final: dict[str, Any] | None = None
        self.err: tuple[int, dict[str, Any]] | None = None
        self.replies = 0
        #: When the batch last advanced (a flow ack further on, its final ack); a previous batch's at first.
        self.progress = progress
        self.changed = asyncio.Event()
        self.sub: Any = None

    def reply_to(self, seq: int, op: int) -> str:
        return f"{self.reply}{seq}.{op}.$FI"

    def answered(self) -> bool:
        return self.first is not None

    def ended(self) -> bool:
        return self.final is not None

    def room(self) -> bool:
        """Whether another message may go: fewer than ``max_outstanding`` flow windows unacknowledged."""
        return self.final is not None or self.ack_seq + self.flow * self.max_outstanding > self.seq

    def allowed(self) -> int:
        """How many more messages may go before the sender waits for a flow ack."""
        return self.ack_seq + self.flow * self.max_outstanding - self.seq

    async def open(self) -> None:
        self.sub = await self.nc.subscribe(self.prefix + ".>", cb=self.on_reply)

    async def close(self) -> None:
        with contextlib.suppress(nats.errors.Error):
            await self.sub.unsubscribe()

    async def on_reply(self, msg: Any) -> None:
        self.replies += 1
        if self.final is not None:
            return  # the batch has ended (a message sent after its end is answered "unknown batch")
        if is_no_responders(msg.headers):
            body: dict[str, Any] = {"error": {"code": UNAVAILABLE, "description": "no stream listens on it"}}
        else:
            try:
                body = json.loads(msg.data)
            except (ValueError, UnicodeDecodeError):
                body = {}
            if not isinstance(body, dict):
                body = {}
        kind = body.get("type")
        if kind == "ack":
            seq = int(body.get("seq") or 0)
            if seq > self.ack_seq or self.first is None:
                self.progress = self.now()
            self.ack_seq = max(self.ack_seq, seq)
            self.flow = max(1, int(body.get("msgs") or 1))
        elif kind == "err":
            self.err = (int(body.get("seq") or 0), body.get("error") or {})
        elif kind != "gap":  # a gap only informs: in ``fail`` mode the final ack follows, with the count
            self.final = body
            if not isinstance(body.get("error"), dict):
                self.progress = self.now()
        if self.first is None and kind != "gap":
            self.first = body
        self.changed.set()

    async def wait(self, done: Callable[[], bool], ack_timeout: float, ping_seq: int | None) -> bool:
        """Wait until ``done()``: False once ``ack_timeout`` passed without progress. Pings every
        ``ack_timeout / 3`` with ``ping_seq`` (None: no pings, before the first flow ack: a server that
        ignores ``$FI`` would store a ping)."""
        while not done():
            self.changed.clear()
            left = self.progress + ack_timeout - self.now()
            if left <= 0:
                return False
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_task(self.changed.wait(), min(left, ack_timeout / 3))
                continue
            if ping_seq is not None and not done():
                with contextlib.suppress(nats.errors.Error):
                    await self.nc.publish(self.subject, b"", reply=self.reply_to(ping_seq, OP_PING))
        return True


def _refusal(body: dict[str, Any]) -> JetStreamPublishError:
    """The server's error in a reply as the error a refused message fails with."""
    try:
        parse_pub_ack(json.dumps(body).encode())
    except JetStreamPublishError as err:
        return err
    return JetStreamPublishError(f"not a fast-ingest reply: {body!r}")


async def _last_seq(target: BatchTarget) -> int | None:
    """The stream's last sequence, None when it cannot be read now."""
    try:
        info = await target.api.stream_info(target.stream)
    except (JetStreamError, nats.errors.Error):
        return None
    return int(((info or {}).get("state") or {}).get("last_seq") or 0)


async def publish_batches(
    nc: Client,
    target: BatchTarget,
    messages: Iterator[Item],
    summary: PublishSummary,
    *,
    check: Callable[[str], Any],
    ack_timeout: float,
    what: str,
    flow: int = FLOW,
    max_outstanding: int = MAX_OUTSTANDING,
) -> Numbered | None:
    """Publish ``messages`` (``(subject, payload, headers)`` tuples or blocks, all to ``target.subject``) in
    fast-ingest batches, tallied in ``summary``; None when all are settled, else what the per-message engine
    has to send, each with the index of its (first) message (the server answered message 1 of a batch as an
    ordinary publish, or cannot take batches now). A block goes in runs as long as the flow window allows,
    each framed in one pass.

    :param check: the subject check every message passes before it is sent.
    :param ack_timeout: seconds without progress (a flow ack, a final ack) before the publish fails.
    :param what: words for errors (``publish to 'orders.x'``).
    :param flow: most messages per flow ack asked for (1..500 count). Default :data:`FLOW`.
    :param max_outstanding: flow windows unacknowledged before the sender waits. Default 2.
    :raises JetStreamPublishError: no progress within ``ack_timeout`` (nothing more is sent), or the
        server found a batch malformed; the error gives the exact counts.
    """
    again: deque[tuple[int, Item]] = deque()  # sent again first, in the next batch
    held: deque[tuple[int, Item]] = deque()  # not sent yet: the rest of a block an ended batch stopped in
    progress = asyncio.get_running_loop().time()
    # Sending again what an ended batch left goes on while the batches make progress: the window opens again
    # whenever one did.
    resends = ResendWindow(ack_timeout)
    taken = [0]  # messages taken from ``messages``

    def take() -> tuple[int, Item] | None:
        if again:
            return again.popleft()
        if held:
            return held.popleft()
        item = next(messages, None)
        if item is None:
            return None
        index = taken[0]
        taken[0] += len(item) if isinstance(item, Block) else 1
        return index, item

    def rest(*first: tuple[int, Item]) -> Numbered:
        yield from first
        yield from again
        yield from held
        yield from numbered(messages, taken[0])

    def unsettled(sent: Sent, reason: str) -> None:
        """Messages of an ended batch past its last persisted one: sent again with an id, else failures."""
        for _, index, message in sent.messages():
            if may_resend(message[2]):
                again.append((index, message))
                summary.republished += 1
            else:
                summary.failures.append((index, JetStreamPublishError(f"{reason}; {NOT_REPUBLISHED}")))

    while True:
        repeating = bool(again)
        item = take()
        if item is None:
            return None
        if repeating and not await resends.pause():
            again.appendleft(item)
            for index, _ in again:
                summary.failures.append((index, JetStreamPublishError(f"no ack within {ack_timeout:g}s")))
            raise JetStreamPublishError(
                f"{what}: fast-ingest batches made no progress within {ack_timeout:g}s; "
                f"{summary.counts()}: {summary.reasons()}; nothing more was sent"
            )
        batch = _Batch(nc, target.subject, flow, max_outstanding, progress)
        frames = FrameBuffer(nc)
        await batch.open()
        before = await _last_seq(target)
        sent = Sent()  # runs sent and not known persisted
        runs = sent.runs
        seq = 0
        summary.batches += 1
        try:
            while item is not None:
                index, message = item
                block = message if isinstance(message, Block) else None
                subject = message[0] if block is None else block.subject  # type: ignore[index]
                check(subject)
                if subject != target.subject:
                    raise JetStreamPublishError(f"{what}: a fast-ingest batch to {target.subject!r} got {subject!r}")
                size = 1 if block is None else len(block)
                offset = 0
                stopped = False
                while offset < size:
                    op = OP_APPEND if seq else OP_START
                    if block is None:
                        n = 1
                        runs.append([seq + 1, index, message, 0, 1])
                        due = frames.add(subject, f"{batch.reply}{seq + 1}.{op}.$FI", message[1], message[2])  # type: ignore[index]
                    else:
                        # The first message alone (its answer tells whether the server takes batches), then
                        # runs as long as the flow window allows.
                        n = max(1, min(size - offset, batch.allowed())) if seq else 1
                        runs.append([seq + 1, index + offset, block, offset, offset + n])
                        due = frames.add_block(block, offset, offset + n, batch.reply, seq + 1, f".{op}.$FI")
                    seq = batch.seq = seq + n
                    offset += n
                    if index + offset > summary.count:
                        summary.count = index + offset
                    if seq == 1:
                        await frames.flush()
                        await batch.wait(batch.answered, ack_timeout, None)
                        if (batch.first or {}).get("type") != "ack":
                            if block is not None and size > 1:
                                held.appendleft((index + 1, block.slice(1)))
                            first = message if block is None else block.message(0)
                            return _fall_back(batch, index, first, summary, rest, ack_timeout)  # type: ignore[arg-type]
                    elif due:
                        await frames.flush()
                        await asyncio.sleep(0)  # the replies that came meanwhile are read
                    if batch.final is not None:
                        stopped = True  # ended early: a gap or a refused message
                        break
                    if runs[0][0] <= batch.ack_seq:
                        sent.drop_through(batch.ack_seq)
                    if not batch.room():
                        await frames.flush()
                        if not await batch.wait(batch.room, ack_timeout, seq) or batch.ended():
                            stopped = True
                            break
                if block is not None and offset < size:
                    held.appendleft((index + offset, block.slice(offset)))
                if stopped:
                    break
                item = take()
            await frames.flush()
            if batch.final is None and batch.now() - batch.progress < ack_timeout:
                # The end of the batch (EOB): not stored; the final ack counts the messages before it.
                with contextlib.suppress(nats.errors.Error):
                    await nc.publish(target.subject, b"", reply=batch.reply_to(seq + 1, OP_EOB))
                await batch.wait(batch.ended, ack_timeout, seq + 1)
        finally:
            with contextlib.suppress(nats.errors.Error):
                await frames.flush()  # what was counted as sent is sent, also when a message was refused
            await batch.close()
        summary.replies += batch.replies
        if batch.progress > progress:
            resends.restart()
        progress = batch.progress
        final = batch.final
        if final is None:
            await _tally(target, summary, before, batch.ack_seq, None, None)
            sent.drop_through(batch.ack_seq)
            for _, index, _ in sent.messages():
                summary.failures.append((index, JetStreamPublishError(f"no ack within {ack_timeout:g}s")))
            for index, _ in again:
                summary.failures.append((index, JetStreamPublishError("not sent: the publish stopped")))
            raise JetStreamPublishError(
                f"{what}: the fast-ingest batch made no progress within {ack_timeout:g}s (ack for batch message "
                f"{batch.ack_seq} of {seq}); {summary.counts()}: {summary.reasons()}; nothing more was sent"
            )
        if isinstance(final.get("error"), dict):
            refusal = _refusal(final)
            if refusal.err_code in MALFORMED:
                raise JetStreamPublishError(f"{what}: the server refused a fast-ingest batch: {refusal}")
            await _tally(target, summary, before, batch.ack_seq, None, None)
            sent.drop_through(batch.ack_seq)
            if refusal.err_code in NOT_NOW:
                unsettled(sent, failure_reason(refusal))
                return rest()
            if not nothing_stores_now(refusal) and sent:
                # Refused the message after the last persisted one (a header check on message 1).
                index, _ = sent.pop_first()
                summary.failures.append((index, refusal))
                unsettled(sent, f"the fast-ingest batch ended at a refused message (#{index})")
                return rest()  # a refusal may hold for the next messages: one by one, each its own answer
            unsettled(sent, failure_reason(refusal))
            continue
        count = int(final.get("count") or 0)
        await _tally(target, summary, before, count, final, int(final.get("seq") or 0))
        sent.drop_through(count)
        if batch.err is not None and sent and sent.first_seq() == batch.err[0]:
            index, _ = sent.pop_first()
            summary.failures.append((index, _refusal({"error": batch.err[1]})))
            unsettled(sent, f"the fast-ingest batch ended at a refused message (#{index})")
            return rest()  # a refusal may hold for the next messages: one by one, each its own answer
        unsettled(sent, f"the fast-ingest batch ended at its message {count}")


def _fall_back(
    batch: _Batch,
    index: int,
    message: Outgoing,
    summary: PublishSummary,
    rest: Callable[..., Numbered],
    ack_timeout: float,
) -> Numbered:
    """Message 1 was not answered with a flow ack: settle it by what came, and leave the rest to the
    per-message engine (message 1 too, when it was surely not stored or has an id)."""
    summary.batches -= 1
    summary.replies += 1 if batch.first is not None else 0
    first = batch.first
    if first is None:
        if may_resend(message[2]):
            summary.republished += 1
            return rest((index, message))
        summary.failures.append((index, JetStreamPublishError(f"no ack within {ack_timeout:g}s; {NOT_REPUBLISHED}")))
        return rest()
    if isinstance(first.get("error"), dict):
        refusal = _refusal(first)
        if refusal.err_code in NOT_NOW or nothing_stores_now(refusal):
            return rest((index, message))
        summary.failures.append((index, refusal))
        return rest()
    try:
        summary.acknowledged(parse_pub_ack(json.dumps(first).encode()))  # stored as an ordinary publish
    except JetStreamPublishError as err:
        summary.failures.append((index, err))
    return rest()


async def _tally(
    target: BatchTarget,
    summary: PublishSummary,
    before: int | None,
    settled: int,
    final: dict[str, Any] | None,
    last_seq: int | None,
) -> None:
    """Count the ``settled`` first messages of a batch: stored ones from the stream's sequences (the final
    ack's, else the stream's now), duplicates the others."""
    if settled <= 0:
        return
    if last_seq is None:
        last_seq = await _last_seq(target)
    if last_seq == 0:
        stored = 0  # nothing persisted: every message a duplicate
    elif last_seq is None or before is None:
        stored = settled  # the stream could not be read: the split is unknown, counted as stored
    else:
        stored = max(0, min(settled, last_seq - before))
    stream = (final or {}).get("stream") or target.stream
    summary.batch_acknowledged(stream, (final or {}).get("domain"), last_seq or 0, settled, stored)
