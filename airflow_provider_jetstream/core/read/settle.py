"""The settles of one connection: each verdict sent at once with a reply subject of its own, the consumer's
confirmations taken in bulk, and the one barrier that waits for them.

A consumer answers a settle that carries a reply subject once it took it (nats.go's double ack; a clustered
consumer once its replicas stored it), and answers a settle of a message it settled already too, so one sent
twice does no harm. :class:`Settler` keeps one inbox per connection for those answers (frames taken as bytes,
:mod:`~airflow_provider_jetstream.core.wire.intake`), sends each settle as it is given, without waiting for
its answer, and :meth:`Settler.confirm` waits for the answers of what was sent: a settle not answered within
its ``timeout`` is sent again, and one answered "no responders" (nobody takes acks for that consumer now) is
sent again after a pause on a cluster's connection in its own domain (a consumer leader being elected) within
its ``failover`` seconds (the one resend rule, :func:`~airflow_provider_jetstream.core.resend.may_settle_again`);
what is still not confirmed then raises :class:`~airflow_provider_jetstream.core.errors.JetStreamAckError`
naming each message. A settle answered "no responders" first asks ``CONSUMER.INFO`` once per consumer: a
consumer (or stream) that is gone raises :class:`~airflow_provider_jetstream.core.errors.ConsumerDeletedError`
at once, not after a failover's wait. Synchronous code in another thread hands settles over with
:meth:`Settler.submit`: they are sent by the connection's loop in bulk, and confirmed by the same barrier.

Airflow-free: Spark executors import it.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading
import time
from collections.abc import Callable, Collection
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.subscription import Subscription

from airflow_provider_jetstream.core.api import CONSUMER_NOT_FOUND, STREAM_NOT_FOUND, JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.connection.client import home_domain
from airflow_provider_jetstream.core.errors import (
    ConsumerDeletedError,
    JetStreamAckError,
    JetStreamApiError,
    JetStreamError,
)
from airflow_provider_jetstream.core.protocol import NO_RESPONDERS, parse_ack_reply, parse_header_block, settle_verb
from airflow_provider_jetstream.core.resend import may_settle_again, pause_after
from airflow_provider_jetstream.core.tasks import wait_event
from airflow_provider_jetstream.core.wire.intake import subscribe_frames

#: Unconfirmed messages named in an error, at most.
_NAMED = 5

#: How to reach the account again when the delivering connection is closed: the hook's ``aconnect``.
Reopen = Callable[[], AbstractAsyncContextManager[Client]]


@dataclass(frozen=True)
class SettleRoute:
    """Where the settles of one reading go: the delivering connection's settler, the JetStream API prefix of the
    consumer's domain (``$JS.hub.API``...: whether "no responders" may be a failover, and where to ask whether
    the consumer is gone), how to reach the account once that connection is closed, and how long a settle may
    wait for its confirmation (``timeout`` seconds per attempt, asked again across a failover within
    ``failover`` seconds)."""

    settler: Settler
    prefix: str
    reopen: Reopen | None
    timeout: float
    failover: float


class AckHandle:
    """Where a delivery's verdict goes (its ack reply subject, the reading's :class:`SettleRoute`), the verdict
    sent and whether the consumer confirmed it.

    A message is settled once: the first ``ack``, ``nak`` or ``term`` is sent, any later one is not
    (``in_progress`` may be sent any number of times before).
    """

    __slots__ = ("confirmed", "reply", "route", "verdict", "what")

    def __init__(self, reply: str, route: SettleRoute, what: str) -> None:
        self.reply = reply
        self.route = route
        #: The message in words, for errors: ``message 42 of consumer 'c' on stream 's' in domain 'hub'``.
        self.what = what
        #: ``ack``, ``nak`` or ``term`` once settled; None before.
        self.verdict: str | None = None
        #: The consumer answered the verdict (it took it).
        self.confirmed = False


class _Sent:
    """One settle sent and not yet confirmed."""

    __slots__ = ("body", "first", "handle", "last", "refused")

    def __init__(self, handle: AckHandle, body: bytes, now: float) -> None:
        self.handle, self.body = handle, body
        self.first = self.last = now
        #: The consumer side answered "no responders" to the last attempt.
        self.refused = False


class Settler:
    """The settles sent on one connection (see the module doc); :meth:`of` gives a connection's one settler."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.loop = asyncio.get_running_loop()
        self.thread = threading.get_ident()
        self.prefix = nc.new_inbox() + "."
        self._prefix = self.prefix.encode()
        self.sub: Subscription | None = None
        self._tokens = itertools.count(1)
        self.waiting: dict[int, _Sent] = {}
        self.answered = asyncio.Event()
        self._submitted: collections.deque[tuple[AckHandle, bytes]] = collections.deque()
        self._draining: asyncio.Task[None] | None = None
        self._scheduled = False
        #: Settles the consumers confirmed on this connection (for counts and tests).
        self.confirmed = 0

    @classmethod
    def of(cls, nc: Client) -> Settler:
        """The one settler of ``nc`` (made on first use; call it in the event loop that runs ``nc``)."""
        settler = getattr(nc, "_jetstream_settler", None)
        if settler is None:
            settler = cls(nc)
            nc._jetstream_settler = settler  # type: ignore[attr-defined]
        return settler

    @staticmethod
    async def confirm_all(nc: Client) -> None:
        """Confirm every settle sent on ``nc`` (nothing when none was): what a connection's last user awaits."""
        settler = getattr(nc, "_jetstream_settler", None)
        if settler is not None and (settler.waiting or settler._scheduled):
            await settler.confirm()

    # -- where it may be used --------------------------------------------------------------------

    def serves_here(self) -> bool:
        """The connection is open and this is its event loop, running now."""
        if self.nc.is_closed:
            return False
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def serves_from_another_thread(self) -> bool:
        """The connection is open and its loop runs in another thread (a hold's): :meth:`submit` from here."""
        return threading.get_ident() != self.thread and self.loop.is_running() and not self.nc.is_closed

    # -- sending ---------------------------------------------------------------------------------

    async def send(self, handle: AckHandle, body: bytes) -> None:
        """Send ``body`` to ``handle``'s ack reply subject now, with a reply subject for its confirmation."""
        if self.sub is None:
            self.sub = await subscribe_frames(self.nc, self.prefix + "*", self._on_answer)
        token = next(self._tokens)
        self.waiting[token] = _Sent(handle, body, time.monotonic())
        await self.nc.publish(handle.reply, body, reply=f"{self.prefix}{token}")

    def submit(self, handle: AckHandle, body: bytes) -> None:
        """From another thread: have the connection's loop send ``body`` (in bulk with the others submitted)."""
        self._submitted.append((handle, body))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon_threadsafe(self._start_draining)

    def _start_draining(self) -> None:
        self._draining = self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._submitted:
                handle, body = self._submitted.popleft()
                await self.send(handle, body)
        finally:
            self._scheduled = False
            if self._submitted:  # handed over after the last look
                self._scheduled = True
                self.loop.call_soon(self._start_draining)

    def _on_answer(self, subject: bytes, reply: bytes, headers: bytes, payload: bytes) -> None:
        try:
            sent = self.waiting.get(int(subject[len(self._prefix) :]))
        except ValueError:
            return
        if sent is None:
            return
        if headers and parse_header_block(headers)[0] == NO_RESPONDERS:
            sent.refused = True
        else:
            del self.waiting[int(subject[len(self._prefix) :])]
            if sent.handle.verdict is not None:
                sent.handle.confirmed = True
            self.confirmed += 1
        self.answered.set()

    # -- the barrier -----------------------------------------------------------------------------

    async def confirm(self, handles: Collection[AckHandle] | None = None) -> None:
        """Wait until the consumers confirmed every settle sent so far on this connection (or those of
        ``handles``), sending again what is due (see the module doc); :class:`JetStreamAckError` naming the
        messages not confirmed."""
        while self._scheduled:
            if self._draining is not None and not self._draining.done():
                await asyncio.shield(self._draining)
            else:
                await asyncio.sleep(0)  # submitted from another thread: its drain starts on this loop
        rounds = 0  # rounds of verdicts sent again after "no responders"
        failed: list[tuple[_Sent, str]] = []
        gone: dict[tuple[str, str, str], str | None] = {}  # (prefix, stream, consumer): why it is gone, None if not
        deleted = False
        while True:
            pending = [(t, s) for t, s in self.waiting.items() if handles is None or s.handle in handles]
            if not pending:
                break
            now = time.monotonic()
            again: list[tuple[int, _Sent]] = []
            wait: float | None = None
            for token, sent in pending:
                route = sent.handle.route
                if not sent.refused and now - sent.last < route.timeout:
                    left = sent.last + route.timeout - now
                    wait = left if wait is None else min(wait, left)
                elif sent.refused and (why := await self._gone(sent, gone)):
                    failed.append((sent, why))
                    deleted = True
                    self.waiting.pop(token, None)
                elif not may_settle_again(refused=sent.refused, nc=self.nc, prefix=route.prefix):
                    failed.append((sent, "nobody takes its settles now (the consumer's domain away?)"))
                    self.waiting.pop(token, None)
                elif now - sent.first >= route.failover:
                    failed.append((sent, "nobody took it" if sent.refused else f"no answer within {route.failover:g}s"))
                    self.waiting.pop(token, None)
                else:
                    again.append((token, sent))
            if again:
                if any(sent.refused for _, sent in again):  # a consumer leader being elected
                    rounds += 1
                    await asyncio.sleep(pause_after(rounds))
                await self._send_again(again)
                continue
            if wait is not None:
                self.answered.clear()
                await wait_event(self.answered, wait)
        if failed:
            named = "; ".join(f"{settle_verb(s.body)} of {s.handle.what}: {why}" for s, why in failed[:_NAMED])
            more = f" (and {len(failed) - _NAMED} more)" if len(failed) > _NAMED else ""
            then = (
                "a consumer made again under that name delivers them again"
                if deleted
                else "each message is delivered again after its consumer's ack_wait"
            )
            raise (ConsumerDeletedError if deleted else JetStreamAckError)(
                f"{len(failed)} settle(s) not confirmed: {named}{more}; {then}"
            )

    async def _gone(self, sent: _Sent, known: dict[tuple[str, str, str], str | None]) -> str | None:
        """Why nobody takes ``sent``'s verdict when its consumer (or stream) is gone (``CONSUMER.INFO`` asked once
        per consumer in ``known``), naming the message's stream sequence, consumer, stream and domain; None
        when the consumer is there or the question got no answer (a failover, a domain away)."""
        meta = parse_ack_reply(sent.handle.reply)
        if meta is None:
            return None
        prefix = sent.handle.route.prefix
        key = (prefix, meta.stream, meta.consumer)
        if key not in known:
            known[key] = None
            api = JetStreamApi(self.nc, prefix, timeout=sent.handle.route.timeout, failover=0)
            try:
                await api.request(f"CONSUMER.INFO.{meta.stream}.{meta.consumer}")
            except JetStreamApiError as err:
                if err.err_code in (CONSUMER_NOT_FOUND, STREAM_NOT_FOUND):
                    what = "consumer" if err.err_code == CONSUMER_NOT_FOUND else "stream"
                    known[key] = f"the {what} was deleted ({err.description})"
            except JetStreamError:
                pass  # no answer: decided by the resend rule
        why = known[key]
        if why is None:
            return None
        domain = meta.domain or domain_of(prefix) or home_domain(self.nc)
        where = f"domain {domain!r}" if domain else describe_prefix(prefix)
        return (
            f"nobody takes it: stream sequence {meta.sequence}, consumer {meta.consumer!r}, stream "
            f"{meta.stream!r}, {where}: {why}"
        )

    async def _send_again(self, settles: list[tuple[int, _Sent]]) -> None:
        now = time.monotonic()
        for token, sent in settles:
            if self.waiting.get(token) is sent:  # not answered meanwhile
                sent.refused, sent.last = False, now
                await self.nc.publish(sent.handle.reply, sent.body, reply=f"{self.prefix}{token}")
