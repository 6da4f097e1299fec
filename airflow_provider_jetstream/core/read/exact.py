"""One read of an exact range of stream sequences ``[start, end]``: its rules over the pull engine, nats-py's intake.

The range reader reads in order (:class:`~airflow_provider_jetstream.core.read.ordered.OrderedConsumer`, on the
consumer engine's pull subscription), keeping requests in flight while the caller works on earlier messages:

- the consumer takes no acks, delivers from the start sequence (optionally only some subjects), lives
  in memory and is deleted by the server once nobody pulls it; the reader deletes it at the end;
- a bounded buffer: messages requested but not yet handed to the caller never exceed
  ``max_buffered_messages`` (and each request asks for at most ``max_buffered_bytes``), so a slow
  caller slows the server down instead of piling up data or becoming a "slow consumer";
- the range is exact: sequences past ``end`` are dropped, the read stops at ``end`` or when the
  stream holds nothing more, and sequences missing inside the range (purged, deleted, expired) are
  reported as data loss; a gap is re-read once first (a reconnect drops messages on the way, not
  from the stream);
- the read resumes from where it stopped (a new consumer) whenever the ordered consumer says it cannot
  go on (a delivery out of order, a heartbeat saying messages it never got were delivered, the consumer
  deleted under it, "retry after" once its pause is over, three heartbeats of silence); ``max_resumes``
  times in a row at most, and on a cluster's connection for as long as a failover may last (a stream
  leader killed with the reader's consumer on it: the consumer is made again once a new leader is elected).

:class:`RangePull` takes the frames one at a time (chunks are :class:`MessageChunk`, every header value
kept); the vectorised intake (:mod:`airflow_provider_jetstream.core.read.vectorised`) extends it to take
them in bulk. :func:`~airflow_provider_jetstream.core.read.range.read_range` chooses.

Free of Airflow imports: Spark executors use it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamDataLossError, JetStreamNotFoundError
from airflow_provider_jetstream.core.protocol import AckReply, parse_header_block
from airflow_provider_jetstream.core.read.ordered import OrderedConsumer
from airflow_provider_jetstream.core.read.pull import STALL_HEARTBEATS, PullSubscription
from airflow_provider_jetstream.core.read.settings import PullSettings
from airflow_provider_jetstream.core.tasks import wait_task

log = logging.getLogger(__name__)


@dataclass
class MessageChunk:
    """Messages of one stream in sequence order, column by column (what Arrow wants).

    ``headers`` holds one dict (each header name to every value, in order) or None per message, or is None
    when headers were not requested.
    ``timestamps_ns`` are the times the stream stored the messages, in ns since the epoch (UTC).
    """

    subjects: list[str] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)
    timestamps_ns: list[int] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    headers: list[dict[str, list[str]] | None] | None = None

    def __len__(self) -> int:
        return len(self.sequences)


@dataclass(frozen=True)
class MissingRange:
    """Sequences ``[first, last]`` that were expected in a range but are no longer stored."""

    first: int
    last: int

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


class RangePull:
    """State of one range read: its ordered consumer, the range's rules, received columns."""

    def __init__(
        self,
        nc: Client,
        api_prefix: str,
        stream: str,
        start: int,
        end: int,
        filter_subjects: Sequence[str],
        include_headers: bool,
        fail_on_data_loss: bool,
        settings: PullSettings,
    ) -> None:
        self.nc = nc
        self.api_prefix = api_prefix
        self.stream = stream
        self.end = end
        self.filter_subjects = list(filter_subjects)
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.settings = settings
        self.api = JetStreamApi(nc, api_prefix, timeout=settings.request_timeout)
        self.start_seq = start
        self.next_seq = start  # the first sequence not yet seen
        self.resume_needed: str | None = None  # why the read must start again at next_seq
        self.gap_checked_at = 0  # next_seq at which a sequence gap was re-read once
        # A chunk is handed over at half the buffer at most: the buffer counts the messages of the
        # chunk being filled, so a chunk larger than that would never fill and the read would stall.
        self.chunk_messages = max(1, min(settings.chunk_messages, settings.max_buffered_messages // 2))
        self.chunk_max_bytes = settings.max_buffered_bytes  # big messages: smaller chunks
        self.chunk_bytes = 0
        self.finished = False
        self.failure: BaseException | None = None
        self.missing: list[MissingRange] = []
        self.ready: collections.deque[Any] = collections.deque()
        self.buffered = 0  # messages received and not yet handed to the caller
        self.chunk = self._new_chunk()
        self.ordered = OrderedConsumer(
            self.api,
            stream,
            self.on_message,
            settings.requests(),
            filter_subjects=self.filter_subjects,
            inactive_threshold=settings.inactive_threshold,
            max_resumes=settings.max_resumes,
            check_order=self.takes_frames_one_by_one,
            on_idle=self._on_idle_heartbeat,
        )
        #: Set at every message and status the reader acts on: its loop waits on it.
        self.wakeup = self.ordered.changed

    #: The intake takes frames one by one through the ordered consumer (which keeps their consumer order).
    takes_frames_one_by_one = True

    @property
    def where(self) -> str:
        """The stream in words, for messages: ``stream '<name>' in <domain or prefix>``."""
        return self.ordered.where

    def _new_chunk(self) -> Any:
        return MessageChunk(headers=[] if self.include_headers else None)

    @property
    def requests(self) -> PullSubscription | None:
        """The ordered consumer's pull subscription now (None between two consumers)."""
        return self.ordered.sub

    @property
    def consumer(self) -> str | None:
        return self.ordered.consumer

    # -- consumer and intake ---------------------------------------------------------------------

    async def start(self) -> None:
        """Create the consumer at ``next_seq`` and listen for its messages; finish at once if nothing is pending."""
        made = await self.ordered.start(start_seq=self.next_seq)
        await self._started(made.pending)

    async def _started(self, pending: int) -> None:
        # A fresh inbox: a resumed read must not hear the old consumer's late messages or statuses.
        await self.listen()
        if pending == 0:
            # Nothing stored from next_seq on: for an unfiltered read, the rest of the range is gone.
            if not self.filter_subjects:
                self._lost(self.next_seq, self.end)
            self._complete(None)

    async def listen(self) -> None:
        """Start taking the pull requests' answers (this intake: the ordered consumer hands them over)."""

    async def stop(self) -> None:
        """Stop taking answers and delete the consumer (best effort)."""
        await self.ordered.stop()

    async def resume(self, reason: str) -> None:
        """Start again at ``next_seq`` with a new consumer (the ordered consumer's resume, counted in a row)."""
        self.resume_needed = None
        log.warning("%s: %s; resuming at sequence %d", self.where, reason, self.next_seq)
        await self.stop()
        made = await self.ordered.resume(self.next_seq, reason)
        if made is not None:
            await self._started(made.pending)

    async def check_front(self) -> None:
        """A filtered read cannot see gaps in sequences: compare the start with the stream's first."""
        if not self.filter_subjects:
            return
        info = await self.api.stream_info(self.stream)
        if info is None:
            raise JetStreamNotFoundError(f"{self.where} does not exist")
        first = int((info.get("state") or {}).get("first_seq") or 0)
        if first > self.next_seq:
            self._lost(self.next_seq, min(first - 1, self.end))

    # -- pull requests ---------------------------------------------------------------------------

    async def request_more(self) -> None:
        """Ask for more messages while the buffer has room and the range is not covered."""
        requests = self.requests
        if self.finished or requests is None or requests.paused():
            return
        limit = self.settings.max_buffered_messages
        in_flight = requests.outstanding + self.buffered
        if in_flight > limit // 2:
            return
        # Never ask for more than the sequences left in the range: no over-fetch when unfiltered.
        span = self.end - self.next_seq + 1
        batch = min(limit - in_flight, span - requests.outstanding)
        if batch > 0:
            await requests.ask(batch)

    # -- incoming --------------------------------------------------------------------------------

    def on_message(self, meta: AckReply, reply: str, subject: bytes, headers: bytes, payload: bytes) -> None:
        # The hot path (once per message): keep it lean.
        if self.finished or self.resume_needed:
            return
        seq = meta.sequence
        if seq != self.next_seq and not self._in_order(seq, meta.consumer):
            return
        chunk = self.chunk
        chunk.subjects.append(subject.decode())
        chunk.sequences.append(seq)
        chunk.timestamps_ns.append(meta.timestamp_ns)
        chunk.payloads.append(payload)
        if chunk.headers is not None:
            chunk.headers.append((parse_header_block(headers)[2] or None) if headers else None)
        self.buffered += 1
        self.next_seq = seq + 1
        self.chunk_bytes += len(payload)
        if len(chunk.sequences) >= self.chunk_messages or self.chunk_bytes >= self.chunk_max_bytes:
            self.ready.append(chunk)
            self.chunk = self._new_chunk()
            self.chunk_bytes = 0
            self.wakeup.set()
        if seq >= self.end:
            self._complete(None)
        elif meta.pending == 0:
            # Nothing more is stored after this message: the rest of the range was removed.
            if not self.filter_subjects:
                self._lost(seq + 1, self.end)
            self._complete(None)

    def _in_order(self, seq: int, consumer: str) -> bool:
        """For a sequence other than the next one: keep it (True), or drop it after noting why."""
        if seq < self.next_seq:  # a resumed consumer may repeat what we already have
            return False
        if consumer != self.consumer:
            return False  # late delivery of a consumer replaced by a resume
        if seq > self.end:
            if not self.filter_subjects and self.next_seq <= self.end:
                self._lost(self.next_seq, self.end)
            self._complete(None)
            return False
        if not self.filter_subjects:
            if self.gap_checked_at != self.next_seq:
                # Maybe lost on the way (a reconnect), not in the stream: re-read from next_seq
                # once; a gap at the same place again is real.
                self.gap_checked_at = self.next_seq
                self.resume_needed = f"messages after sequence {self.next_seq - 1} did not arrive in order"
                self.wakeup.set()
                return False
            self._lost(self.next_seq, seq - 1)
            return not self.finished
        return True

    def _on_idle_heartbeat(self, delivered: int) -> None:
        """The server waits on a request with nothing to deliver: the consumer has no pending messages.

        ``delivered`` (``Nats-Last-Stream``) is the last sequence it delivered. Past what we received,
        messages were lost on the way (a reconnect, a dropped slow consumer): re-read from where we
        are. Otherwise every message up to ``end`` is either here or gone (all of them were stored
        when the range was planned): the read is complete.
        """
        if self.requests is None or self.finished:
            return
        if delivered >= self.next_seq:
            self.resume_needed = f"the consumer delivered up to sequence {delivered}, {self.next_seq - 1} arrived"
            self.wakeup.set()
            return
        if not self.filter_subjects and self.next_seq <= self.end:
            self._lost(self.next_seq, self.end)
        self._complete(None)

    def _lost(self, first: int, last: int) -> None:
        if first > last:
            return
        gap = MissingRange(first, last)
        self.missing.append(gap)
        if self.fail_on_data_loss:
            self._complete(
                JetStreamDataLossError(
                    f"{self.where}: sequences {gap} are no longer stored (purged, deleted, expired or "
                    "removed by limits). Set failOnDataLoss=false to read what is left."
                )
            )
        else:
            log.warning("%s: sequences %s are no longer stored; skipping them", self.where, gap)

    def _complete(self, failure: BaseException | None) -> None:
        if failure is not None and self.failure is None:
            self.failure = failure
        self.finished = True
        self.wakeup.set()

    def take_ready(self) -> Any:
        if self.ready:
            chunk = self.ready.popleft()
        elif self.finished and len(self.chunk):
            chunk, self.chunk = self.chunk, self._new_chunk()
            self.chunk_bytes = 0
        else:
            return None
        self.buffered -= len(chunk)
        return chunk

    async def chunks(self) -> AsyncIterator[Any]:
        """The range's chunks, in order: pull, resume when the ordered consumer cannot go on (see the module
        doc), stop at the range's end; the consumer is deleted at the end."""
        stall_after = self.settings.heartbeat * STALL_HEARTBEATS
        try:
            await self.check_front()
            if not self.finished:
                await self.start()
            while True:
                if self.failure is not None:
                    raise self.failure
                chunk = self.take_ready()
                if chunk is not None:
                    self.ordered.flowing()
                    yield chunk
                    continue
                if self.finished:
                    break
                reason = self.resume_needed or self.ordered.interruption()
                if reason is not None:
                    await self.resume(reason)
                    continue
                requests = self.requests
                pause = requests.paused() if requests is not None else 0.0
                await self.request_more()
                self.wakeup.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await wait_task(self.wakeup.wait(), pause or stall_after)
            if self.failure is not None:
                raise self.failure
        finally:
            await asyncio.shield(self.stop())
