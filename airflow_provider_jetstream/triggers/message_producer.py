"""The shared-stream producer of the JetStream event triggers: one durable consumer, acked after Airflow stored."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.dead_letter import dead_letter
from airflow_provider_jetstream.core.consume.deliveries import Settlement, Ticket
from airflow_provider_jetstream.core.consume.durable import DurablePuller, ensure_consumer
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.manage.specs.consumer import ConsumerSpec
from airflow_provider_jetstream.core.read.delivery import Delivery
from airflow_provider_jetstream.core.status.event_drift import position_key
from airflow_provider_jetstream.core.tasks import stop_task, wait_task
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

try:  # Airflow >= 3.3: ack mode of shared streams
    from airflow.triggers.shared_stream import (
        AdvanceItem,
        AdvanceOutcome,
        SharedStreamProducer,
        reject_shared_stream_event,
    )

    HAS_SHARED_STREAMS = True
except ImportError:  # Airflow 3.2: the triggers run standalone (see JetStreamMessageTrigger.run)
    HAS_SHARED_STREAMS = False

    @dataclass(frozen=True)
    class AdvanceOutcome:  # type: ignore[no-redef]
        """What the subscribers did with one message (the fields of Airflow 3.3's class)."""

        acked: int
        failed: int
        rejected: int = 0

    @dataclass(frozen=True)
    class AdvanceItem:  # type: ignore[no-redef]
        broker_payload: Any
        outcome: AdvanceOutcome

    class SharedStreamProducer:  # type: ignore[no-redef]
        """Stand-in base class on Airflow < 3.3."""

        def get_advance_lane(self, broker_payload: Any) -> Hashable:
            return None

        async def aclose(self) -> None:
            return None

    def reject_shared_stream_event() -> None:  # type: ignore[misc]
        """Stand-in: a standalone ``run()`` rejects by itself."""


log = logging.getLogger(__name__)

#: Trigger kwargs that only shape each watcher's events, not the consumer: left out of the fingerprint.
SUBSCRIBER_FIELDS = ("event_subjects", "decode", "max_payload_bytes", "include_headers")
#: Advance lanes: a message that waits on one watcher delays the acks of 1/16 of the others only.
LANES = 16

#: Seconds between two readings of the consumer's ack floor recorded in the watched assets' Asset State Store.
POSITION_INTERVAL = 5.0

# Producers running in this process, by (connection, target, stream, consumer): their fingerprint and count.
_ACTIVE: dict[tuple[str, str, str, str], tuple[str, int]] = {}
# The Asset State Store accessors of the watchers subscribed in this process, by group key, then by watcher.
_STATE_STORES: dict[Hashable, dict[int, Any]] = {}


def group_key(kwargs: Mapping[str, Any]) -> Hashable:
    """The shared-stream key of a trigger's settings (flat): same connection, target, stream, consumer and
    consumer settings, same group."""
    return (
        "jetstream",
        kwargs["jetstream_conn_id"],
        kwargs["domain"] or "",
        kwargs["api_prefix"] or "",
        kwargs["stream"],
        kwargs["consumer"],
        producer_fingerprint(kwargs),
    )


@contextlib.contextmanager
def positions_recorded_in(key: Hashable, state_store: Any) -> Iterator[None]:
    """While in the block, the group ``key``'s producer records its position in ``state_store`` (a watcher's
    ``asset_state_store``, set by Airflow >= 3.3's triggerer; None: nothing is recorded)."""
    token = id(state_store)
    if state_store is not None:
        _STATE_STORES.setdefault(key, {})[token] = state_store
    try:
        yield
    finally:
        stores = _STATE_STORES.get(key, {})
        stores.pop(token, None)
        if not stores:
            _STATE_STORES.pop(key, None)


def asset_accessors(state_store: Any) -> list[Any]:
    """One accessor per watched asset of a watcher's ``asset_state_store``: a trigger shared by several
    assets (same kwargs) watches them all; Airflow's accessors mapping has no public way to list them."""
    found = [*getattr(state_store, "_by_name", {}).values(), *getattr(state_store, "_by_uri", {}).values()]
    return found or [state_store]


def producer_fingerprint(kwargs: Mapping[str, Any]) -> str:
    """A short hash of the kwargs that shape the consumer and the acks (not the per-watcher ones)."""
    fields = {k: v for k, v in sorted(kwargs.items()) if k not in SUBSCRIBER_FIELDS}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def outcome_settlement(outcome: AdvanceOutcome) -> Settlement:
    """The verdict for one message: a failure wins over a reject; nobody listening is ``idle``."""
    if outcome.failed:
        return "fail"
    if outcome.rejected:
        return "reject"
    if outcome.acked:
        return "ack"
    return "idle"


class JetStreamSharedStreamProducer(SharedStreamProducer):
    """Feeds one shared stream of a triggerer from a durable pull consumer; acks what Airflow stored.

    Built from a :class:`~airflow_provider_jetstream.triggers.messages.JetStreamMessageTrigger`'s
    checked kwargs (every one present); connects only when the stream is opened. ``open_stream``
    yields ``(raw, payload)``: ``raw`` is a :class:`Delivery` (a tuple of them with ``batch_size > 1``),
    ``payload`` the matching :class:`Ticket` (tuple). ``advance`` acks, dead-letters, terminates or naks each.
    """

    def __init__(self, kwargs: Mapping[str, Any], consumer_spec: ConsumerSpec) -> None:
        self.kwargs = dict(kwargs)
        self.spec = consumer_spec
        self.stream: str = kwargs["stream"]
        self.consumer: str = consumer_spec.name
        self.fingerprint = producer_fingerprint(kwargs)
        self.hook = JetStreamHook(kwargs["jetstream_conn_id"], domain=kwargs["domain"], api_prefix=kwargs["api_prefix"])
        self.key = group_key(self.kwargs)
        self.puller: DurablePuller | None = None
        self._positions: asyncio.Task[None] | None = None
        self._recorded: dict[int, tuple[int, str | None]] = {}  # per state store: the last position written
        self._exit = contextlib.AsyncExitStack()
        self._registered: tuple[str, str, str, str] | None = None

    # -- the stream -------------------------------------------------------------------------

    async def open_stream(self) -> AsyncIterator[tuple[Any, Any]]:
        """Ensure the consumer, wait ``cohort_wait`` for sibling watchers, then yield forever."""
        kw = self.kwargs
        nc = await self._exit.enter_async_context(self.hook.aconnect())
        config = await self.hook.aget_conn_config()
        prefix = self.hook.resolve_api_prefix()
        self._register(prefix)
        api = JetStreamApi(nc, prefix, timeout=config.connect_timeout)
        ready = await ensure_consumer(api, self.stream, await self.consumer_in(api))
        log.info(
            "consumer %r on stream %r in %s: %s (ack_policy %s)",
            self.consumer, self.stream, api.target, ready.action, ready.ack_policy,
        )  # fmt: skip
        if kw["cohort_wait"]:
            await asyncio.sleep(kw["cohort_wait"])
        self.puller = DurablePuller(
            nc,
            api,
            self.stream,
            self.consumer,
            max_in_flight=self._in_flight_limit(),
            ack_wait=kw["ack_wait"],
            nak_delay=kw["nak_delay"],
            nak_max_delay=kw["nak_max_delay"],
            ack_all=ready.ack_policy == "all",
        )
        self._positions = asyncio.create_task(self._record_positions())
        batch_size = kw["batch_size"]
        tickets = self.puller.deliveries()
        if batch_size <= 1:
            async for ticket in tickets:
                yield ticket.delivery, ticket
            return
        async for batch in _batches(tickets, batch_size, kw["batch_window"]):
            yield tuple(t.delivery for t in batch), tuple(batch)

    async def consumer_in(self, api: JetStreamApi) -> ConsumerSpec:
        """The consumer to ensure on the stream in ``api``'s domain: the one the kwargs ask for."""
        return self.spec

    def _in_flight_limit(self) -> int:
        """Unsettled messages at most (with ``ack_policy: all``, also the stored ones not yet acked: they are
        pending on the server): the consumer's ``max_ack_pending``, and half a subscriber queue (Airflow's
        manager fails a watcher whose queue overflows; it applies no backpressure)."""
        limit = self.kwargs["max_ack_pending"]
        try:
            from airflow.configuration import conf

            queue = conf.getint("triggerer", "shared_stream_subscriber_queue_size", fallback=1024)
        except Exception:
            queue = 1024
        batch = self.kwargs["batch_size"]
        return max(1, min(limit if limit > 0 else 10_000, (queue // 2) * batch))

    def _register(self, prefix: str) -> None:
        key = (str(self.kwargs["jetstream_conn_id"]), prefix, self.stream, self.consumer)
        known = _ACTIVE.get(key)
        if known and known[0] != self.fingerprint:
            raise JetStreamConfigError(
                f"consumer {self.consumer!r} on stream {self.stream!r} is already consumed in this triggerer by "
                "watchers with other settings (filter_subjects, deliver_policy, ack_policy, max_ack_pending, ack_wait, "
                "batch, "
                "dead letters...): two groups would compete for its messages. Give these watchers the same "
                "settings, or another consumer name"
            )
        _ACTIVE[key] = (self.fingerprint, (known[1] if known else 0) + 1)
        self._registered = key

    # -- positions ----------------------------------------------------------------------------

    async def _record_positions(self) -> None:
        while True:
            await asyncio.sleep(POSITION_INTERVAL)
            await self.record_position()

    async def record_position(self) -> None:
        """Read the consumer's ack floor (where it resumes; every message below it is stored by every watcher)
        and write it to each subscribed watcher's assets in the Asset State Store, under
        :func:`~airflow_provider_jetstream.core.status.event_drift.position_key`, when it changed. Best effort:
        a failure is logged and tried again at the next interval."""
        stores = dict(_STATE_STORES.get(self.key, {}))
        if not stores or self.puller is None:
            return
        api = self.puller.api
        try:
            info = await api.consumer_info(self.stream, self.consumer)
            if info is None:
                return
            floor = info.get("ack_floor") or {}
            now = (int(floor.get("stream_seq") or 0), self.puller.created)
            position = {
                "stream": self.stream,
                "consumer": self.consumer,
                "target": api.target,
                "stream_seq": now[0],
                "consumer_seq": int(floor.get("consumer_seq") or 0),
                "stream_created": now[1],
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            for token, store in stores.items():
                if self._recorded.get(token) == now:
                    continue
                for accessor in asset_accessors(store):
                    await accessor.aset(position_key(self.stream, self.consumer), position)
                self._recorded[token] = now
        except Exception as err:  # the position is a record, never a reason to stop the group
            log.warning("%s > %s: position not recorded in the Asset State Store: %s", self.stream, self.consumer, err)

    # -- acks -------------------------------------------------------------------------------

    def get_advance_lane(self, broker_payload: Any) -> Hashable:
        """``sequence % 16``; one lane with ``ack_policy: all`` (one floor: lanes would only split its acks)."""
        if self.puller is not None and self.puller.ack_all:
            return 0
        first = broker_payload[0] if isinstance(broker_payload, tuple) else broker_payload
        return first.seq % LANES

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        """Settle each message: stored by every watcher → ``+ACK``; rejected → dead-letter copy (if
        ``dead_letter_stream``), then ``+TERM``; failed → ``-NAK`` with backoff; nobody listening → ``-NAK``.

        With ``ack_policy: all`` the acks and terminations wait for the floor (see :class:`DurablePuller`),
        and a message that reached ``max_deliver`` is dead-lettered whether it failed or nobody listened:
        the server would drop it without redelivering it, and it would hold the floor for ever."""
        assert self.puller is not None, "advance before open_stream"
        retried: tuple[Settlement, ...] = ("fail", "idle") if self.puller.ack_all else ("fail",)
        verdicts: list[tuple[Ticket, Settlement]] = []
        for item in batch:
            verdict = outcome_settlement(item.outcome)
            tickets = item.broker_payload if isinstance(item.broker_payload, tuple) else (item.broker_payload,)
            for ticket in tickets:
                if verdict in retried and self._exhausted(ticket):
                    await self._dead_letter(ticket.delivery, "max_deliver reached after failures")
                    verdicts.append((ticket, "reject"))
                    continue
                if verdict == "reject":
                    await self._dead_letter(ticket.delivery, "rejected by a watcher")
                verdicts.append((ticket, verdict))
        await self.puller.settle(verdicts)

    def _exhausted(self, ticket: Ticket) -> bool:
        max_deliver = self.kwargs["max_deliver"]
        return max_deliver > 0 and ticket.delivered >= max_deliver

    async def _dead_letter(self, delivery: Delivery, reason: str) -> None:
        target = self.kwargs["dead_letter_stream"]
        if not target or self.puller is None:
            return
        subject = self.kwargs["dead_letter_subject"] or f"{target}.{self.stream}.{self.consumer}"
        seq = await dead_letter(self.puller.nc, delivery, dead_letter_stream=target, subject=subject, reason=reason)
        where = f"{self.stream} #{delivery.seq} ({delivery.subject})"
        log.warning("%s dead-lettered to %s #%d: %s", where, target, seq, reason)

    async def aclose(self) -> None:
        """Stop renewing, nak what is unsettled (it comes back at once), record the position, release the
        connection."""
        await stop_task(self._positions)
        if self.puller is not None:
            await self.puller.stop()
            with contextlib.suppress(Exception):
                await wait_task(self.record_position(), POSITION_INTERVAL)
        if self._registered is not None:
            fingerprint, count = _ACTIVE.get(self._registered, (self.fingerprint, 1))
            if count <= 1:
                _ACTIVE.pop(self._registered, None)
            else:
                _ACTIVE[self._registered] = (fingerprint, count - 1)
            self._registered = None
        await self._exit.aclose()


async def _batches(tickets: AsyncIterator[Ticket], size: int, window: float) -> AsyncIterator[list[Ticket]]:
    """Group tickets: a batch ends at ``size`` tickets, or ``window`` seconds after its first one
    (at least 10 ms: a zero window takes what arrives back to back)."""
    pending: asyncio.Future[Ticket] | None = None
    batch: list[Ticket] = []
    deadline = 0.0
    loop = asyncio.get_running_loop()
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(tickets))
            timeout = None if not batch else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait({pending}, timeout=timeout)
            if done:
                try:
                    ticket = pending.result()
                except StopAsyncIteration:
                    if batch:
                        yield batch
                    return
                pending = None
                if not batch:
                    deadline = loop.time() + max(window, 0.01)
                batch.append(ticket)
                if len(batch) < size:
                    continue
            if batch:
                yield batch
                batch = []
    finally:
        await stop_task(pending)
