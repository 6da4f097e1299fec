"""One read of an exact range of stream sequences ``[start, end]``: its rules over the pull engine, nats-py's intake.

The range reader pulls an ephemeral consumer of its own through the one pull engine
(:mod:`airflow_provider_jetstream.core.read.pull`), keeping requests in flight while the caller works
on earlier messages:

- the consumer takes no acks, delivers from the start sequence (optionally only some subjects), lives
  in memory and is deleted by the server once nobody pulls it; the reader deletes it at the end;
- a bounded buffer: messages requested but not yet handed to the caller never exceed
  ``max_buffered_messages`` (and each request asks for at most ``max_buffered_bytes``), so a slow
  caller slows the server down instead of piling up data or becoming a "slow consumer";
- the range is exact: sequences past ``end`` are dropped, the read stops at ``end`` or when the
  stream holds nothing more, and sequences missing inside the range (purged, deleted, expired) are
  reported as data loss; a gap is re-read once first (a reconnect drops messages on the way, not
  from the stream);
- the read resumes from where it stopped (a new consumer) when it hears nothing for three
  heartbeats, when a heartbeat says messages it never got were delivered, when the consumer is
  deleted under it, and after a pause when the server cannot serve the request now (see
  :func:`~airflow_provider_jetstream.core.protocol.pull_status`); ``max_resumes`` times in a row at most,
  and on a cluster's connection for as long as a failover may last (a stream leader killed with the
  reader's consumer on it: the consumer is made again once a new leader is elected).

:class:`RangePull` takes the server's answers as nats-py's message objects (chunks are
:class:`MessageChunk`); the vectorised intake (:mod:`airflow_provider_jetstream.core.read.vectorised`)
extends it to take them as frames parsed in bulk. :func:`~airflow_provider_jetstream.core.read.range.read_range`
chooses.

Free of Airflow imports: Spark executors use it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from airflow_provider_jetstream.core.api import (
    Backoff,
    JetStreamApi,
    clustered,
    describe_prefix,
    during_failover,
    hint_for,
    home_domain,
    no_leader_error,
)
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.errors import (
    JetStreamDataLossError,
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamNotFoundError,
)
from airflow_provider_jetstream.core.protocol import (
    FATAL,
    HEARTBEAT,
    REQUEST_DONE,
    RETRY_AFTER,
    PullStatus,
    parse_ack_reply,
)
from airflow_provider_jetstream.core.read.pull import (
    STALL_HEARTBEATS,
    PullRequests,
    create_ephemeral_consumer,
    discard_consumer,
)
from airflow_provider_jetstream.core.read.settings import PullSettings
from airflow_provider_jetstream.core.tasks import wait_task

log = logging.getLogger(__name__)


@dataclass
class MessageChunk:
    """Messages of one stream in sequence order, column by column (what Arrow wants).

    ``headers`` holds one dict (or None) per message, or is None when headers were not requested.
    ``timestamps_ns`` are the times the stream stored the messages, in ns since the epoch (UTC).
    """

    subjects: list[str] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)
    timestamps_ns: list[int] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str] | None] | None = None

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
    """State of one range read: its consumer and pull requests, the range's rules, received columns."""

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
        self.where = f"stream {stream!r} in {describe_prefix(api_prefix)}"
        self.start_seq = start
        self.next_seq = start  # the first sequence not yet seen
        self.resume_needed = False  # the server delivered messages that never arrived
        self.interrupted: PullStatus | None = None  # the server cannot serve the requests now, or lost the consumer
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
        self.wakeup = asyncio.Event()
        self.max_bytes: int | None = settings.max_buffered_bytes
        self.requests: PullRequests | None = None

    def _new_chunk(self) -> Any:
        return MessageChunk(headers=[] if self.include_headers else None)

    @property
    def consumer(self) -> str | None:
        return self.requests.consumer if self.requests is not None else None

    # -- consumer and intake ---------------------------------------------------------------------

    async def start(self) -> None:
        """Create the consumer at ``next_seq`` and listen for its messages; finish at once if nothing is pending."""
        name, pending, _ = await create_ephemeral_consumer(
            self.api,
            self.stream,
            where=self.where,
            start_seq=self.next_seq,
            filter_subjects=self.filter_subjects,
            inactive_threshold=self.settings.inactive_threshold,
        )
        self.requests = PullRequests(
            self.nc,
            self.api_prefix,
            self.stream,
            name,
            expires=self.settings.expires,
            heartbeat=self.settings.heartbeat,
            max_bytes=self.max_bytes,
        )
        # A fresh inbox: a resumed read must not hear the old consumer's late messages or statuses.
        await self.listen()
        if pending == 0:
            # Nothing stored from next_seq on: for an unfiltered read, the rest of the range is gone.
            if not self.filter_subjects:
                self._lost(self.next_seq, self.end)
            self._complete(None)

    async def listen(self) -> None:
        """Start taking the pull requests' answers (this intake: nats-py message objects)."""
        assert self.requests is not None
        await self.requests.listen(self.on_message)

    async def stop(self) -> None:
        """Stop taking answers and delete the consumer (best effort)."""
        requests, self.requests = self.requests, None
        if requests is not None:
            await requests.close()
            await discard_consumer(self.api, self.stream, requests.consumer)

    async def resume(self) -> None:
        """Start again at ``next_seq`` with a new consumer."""
        self.resume_needed = False
        self.interrupted = None
        await self.stop()
        await self.start()

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
        if self.finished or requests is None:
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

    async def on_message(self, msg: Msg) -> None:
        # The hot path (once per message): keep it lean.
        requests = self.requests
        meta = parse_ack_reply(msg.reply)
        if meta is None:
            if requests is not None and msg.subject == requests.inbox:
                self._on_status(requests.status(msg.headers))
                self.wakeup.set()
            return  # else a status for the requests of a consumer replaced by a resume
        if requests is not None:
            requests.received()
        if self.finished or self.resume_needed:
            return
        seq = meta.sequence
        if seq != self.next_seq and not self._in_order(seq, meta.consumer):
            return
        chunk = self.chunk
        chunk.subjects.append(msg.subject)
        chunk.sequences.append(seq)
        chunk.timestamps_ns.append(meta.timestamp_ns)
        data = msg.data
        chunk.payloads.append(data)
        if chunk.headers is not None:
            chunk.headers.append(msg.headers or None)
        self.buffered += 1
        self.next_seq = seq + 1
        self.chunk_bytes += len(data)
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
                self.resume_needed = True
                self.wakeup.set()
                return False
            self._lost(self.next_seq, seq - 1)
            return not self.finished
        return True

    def _on_status(self, status: PullStatus | None) -> None:
        """What a status means for the range (its effect on the requests is the engine's)."""
        if status is None or self.finished:
            return
        if status.outcome == HEARTBEAT:
            self._on_idle_heartbeat(status.last_stream_seq or 0)
        elif status.outcome == REQUEST_DONE:
            if status.oversized and self.requests is not None and self.requests.max_bytes:
                log.warning(
                    "%s: a message is larger than %d bytes; pulling without a byte limit",
                    self.where,
                    self.requests.max_bytes,
                )
                self.max_bytes = self.requests.max_bytes = None
        elif status.outcome == FATAL:
            self._complete(JetStreamError(f"{self.where}: the server ended the read: {status.reason}"))
        else:  # RETRY_AFTER, RESUME: the read loop resumes
            self.interrupted = status

    def _on_idle_heartbeat(self, delivered: int) -> None:
        """The server waits on a request with nothing to deliver: the consumer has no pending messages.

        ``delivered`` (``Nats-Last-Stream``) is the last sequence it delivered. Past what we received,
        messages were lost on the way (a reconnect, a dropped slow consumer): re-read from where we
        are. Otherwise every message up to ``end`` is either here or gone (all of them were stored
        when the range was planned): the read is complete.
        """
        if self.requests is None:
            return
        if delivered >= self.next_seq:
            self.resume_needed = True
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
        """The range's chunks, in order: pull, resume when the read stalls or the server says so (at most
        ``max_resumes`` times in a row; on a cluster's connection, also for as long as a failover may last,
        the API's ``failover`` seconds), stop at the range's end; the consumer is deleted at the end."""
        settings = self.settings
        stall_after = settings.heartbeat * STALL_HEARTBEATS
        backoff = Backoff(first=1.0, cap=stall_after)
        resumes = 0
        streak_since = 0.0  # when the resumes in a row began
        failed_resume: BaseException | None = None  # the last resume could not make the consumer again
        try:
            await self.check_front()
            if not self.finished:
                await self.start()
            while True:
                if self.failure is not None:
                    raise self.failure
                chunk = self.take_ready()
                if chunk is not None:
                    resumes = 0
                    backoff.reset()
                    yield chunk
                    continue
                if self.finished:
                    break
                reason = None
                pause = 0.0
                interrupted = self.interrupted
                if failed_resume is not None:
                    reason = f"the reading consumer could not be made again: {failed_resume}"
                    pause = backoff.next()
                elif interrupted is not None:
                    reason = f"the server answered {interrupted.reason}"
                    pause = backoff.next() if interrupted.outcome == RETRY_AFTER else 0.0
                elif self.resume_needed:
                    reason = f"messages after sequence {self.next_seq - 1} did not arrive in order"
                else:
                    await self.request_more()
                    self.wakeup.clear()
                    try:
                        await wait_task(self.wakeup.wait(), stall_after)
                    except asyncio.TimeoutError:
                        if self.requests is not None and self.requests.silent():
                            reason = f"no message or heartbeat for {stall_after:g}s"
                if reason is None:
                    continue
                if resumes == 0:
                    streak_since = time.monotonic()
                if resumes >= settings.max_resumes and not self._failing_over(streak_since):
                    raise self._given_up(reason, resumes, interrupted, failed_resume)
                resumes += 1
                log.warning("%s: %s; resuming at sequence %d", self.where, reason, self.next_seq)
                if pause:
                    await asyncio.sleep(pause)
                failed_resume = None
                try:
                    await self.resume()
                except Exception as err:
                    if not during_failover(err, self.nc):
                        raise
                    failed_resume = err  # a new leader is being elected: try again after a pause
            if self.failure is not None:
                raise self.failure
        finally:
            await asyncio.shield(self.stop())

    def _failing_over(self, since: float) -> bool:
        """On a cluster's connection, resumes in a row go on while a failover may last (a new leader for
        the stream, a consumer made on it): the API's ``failover`` seconds since they began."""
        return clustered(self.nc) and time.monotonic() - since < self.api.failover

    def _given_up(
        self, reason: str, resumes: int, interrupted: PullStatus | None, failed_resume: BaseException | None
    ) -> BaseException:
        """The error of a read that resumed too often in a row, naming the likely cause."""
        cluster = clustered(self.nc)
        if failed_resume is not None:
            return failed_resume
        if interrupted is not None and interrupted.no_responders:
            if cluster and domain_of(self.api_prefix) in (None, home_domain(self.nc)):  # the cluster's own streams
                return no_leader_error(
                    describe_prefix(self.api_prefix),
                    self.stream,
                    f": the read of {self.where} stopped at sequence {self.next_seq} of {self.start_seq}-{self.end}",
                )
            hint = hint_for(self.nc, self.api_prefix) if cluster else "is the domain connected?"
            return JetStreamDomainUnavailableError(f"no JetStream responded for {self.where}: {hint}")
        hint = hint_for(self.nc, self.api_prefix) if cluster else "is the domain still connected?"
        return JetStreamError(
            f"{self.where}: {reason}, {resumes + 1} times in a row (stopped at sequence "
            f"{self.next_seq} of {self.start_seq}-{self.end}): {hint}"
        )
