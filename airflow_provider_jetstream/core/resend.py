"""The one resend rule: what is sent again, on which answers, after what pause, and for how long.

Everything in the package that may send something again asks here, and nothing else keeps a retry
constant, a :class:`Backoff` or a loop that tries, pauses and tries again (``tests/test_architecture.py``
holds the package to it): the JetStream API's requests (:mod:`~airflow_provider_jetstream.core.api`), KV
and object writes (:mod:`~airflow_provider_jetstream.core.manage.buckets`,
:mod:`~airflow_provider_jetstream.core.manage.objects`), and the publish engine in each of its modes (per
message, fast-ingest and atomic batches, :mod:`~airflow_provider_jetstream.core.publish.engine`).

- **What may go again.** A published message only with a ``Nats-Msg-Id`` (:func:`may_resend`): the stream
  stores an id once within its duplicate window, so a message stored by an attempt whose ack was lost is
  acknowledged as a duplicate; without one a repeat may be stored twice (:data:`NOT_REPUBLISHED`). A
  JetStream API request when it is a read or a consumer create (:data:`IDEMPOTENT_REQUESTS`). A KV or object
  write carries an id of its own.
- **On which answers.** A failover (:func:`during_failover`): a clustered JetStream said it has no leader,
  or, on a connection to a cluster, nobody in the connection's own domain answered (nobody answering in
  another domain, behind a leaf link, is that domain being away: answered at once). For a publish, an
  answer saying nothing could store it now (:func:`nothing_stores_now`); a message with an id that gets no
  answer at all is sent again after :func:`resend_after` seconds.
- **After what pause.** :data:`FIRST_PAUSE` seconds, doubling up to :data:`LONGEST_PAUSE`
  (:func:`pause_after`, :class:`ResendWindow`). A reader pulls again (or makes its consumer again) after
  :func:`pull_pauses`: :data:`FIRST_PULL_PAUSE`, doubling up to the pull request's expiry (a relinked leaf is
  heard from soon).
- **Settles.** A verdict sent to a consumer (an ack, a nak, a term, in progress) goes again when it was not
  answered, or, on a cluster's connection, answered "no responders" in the connection's own domain (a consumer
  leader being elected) (:func:`may_settle_again`): a consumer answers a verdict it took already too, so one
  sent twice does no harm.
- **For how long.** Within a window (:class:`ResendWindow`): :data:`FAILOVER_WAIT` seconds for requests
  and writes across a failover (a leader election takes a few seconds), the publish's ``ack_timeout`` for
  messages. :func:`repeat` is the one loop: call, and while the answer says so and the window is open,
  pause and call again; :func:`retry_failover` is that loop across a failover.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.connection.client import clustered, in_home_domain
from airflow_provider_jetstream.core.errors import (
    UNAVAILABLE,
    WAIT,
    JetStreamApiError,
    JetStreamNoLeaderError,
    JetStreamPublishError,
    disposition,
)
from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Seconds a request or a write goes on being asked again across a failover, by default: a leader election
#: takes a few seconds (:attr:`~airflow_provider_jetstream.core.api.JetStreamApi.failover`).
FAILOVER_WAIT = 20.0
#: Seconds of the first pause before something is sent again; each next pause doubles, up to
#: :data:`LONGEST_PAUSE`.
FIRST_PAUSE = 0.25
LONGEST_PAUSE = 2.0
#: Seconds a published message with a ``Nats-Msg-Id`` may wait for its ack before it is sent again, at least;
#: more when acks are slower: :data:`ACK_LATENCIES` times the recent ack latency (:func:`resend_after`).
RESEND_AFTER = 1.0
ACK_LATENCIES = 4.0
#: Seconds of the first pause before a reader pulls again after the server could not serve a pull (or makes its
#: consumer again); each next pause doubles, up to the pull's own cap (:func:`pull_pauses`).
FIRST_PULL_PAUSE = 1.0
#: "atomic publish too many inflight": the stream or the server stages too many atomic batches now.
TOO_MANY_INFLIGHT = 10210
#: A fast-ingest batch the server no longer knows (restarted, or 10 s without a message).
UNKNOWN_BATCH = 10208

#: The JetStream API requests asked again across a failover (:func:`retry_failover`): reads, and consumer
#: creates (a consumer of a given name and config is created once, whatever the number of asks).
IDEMPOTENT_REQUESTS = (
    "INFO",
    "STREAM.INFO.",
    "STREAM.NAMES",
    "STREAM.LIST",
    "STREAM.MSG.GET.",
    "CONSUMER.INFO.",
    "CONSUMER.NAMES.",
    "CONSUMER.LIST.",
    "CONSUMER.CREATE.",
    "CONSUMER.DURABLE.CREATE.",
)

#: Why a message without a ``Nats-Msg-Id`` is never sent again.
NOT_REPUBLISHED = (
    "not republished: it has no Nats-Msg-Id, and a message sent again without one may be stored twice "
    "(give msg_id to make a publish safe to repeat)"
)


def may_resend(headers: Mapping[str, str] | None) -> bool:
    """Whether a message with these headers may be published again: it has a ``Nats-Msg-Id``."""
    return bool(headers and headers.get(MSG_ID_HEADER))


def during_failover(error: BaseException, nc: Client, prefix: str | None = None) -> bool:
    """Whether ``error``, the answer to a request at the JetStream API ``prefix``, may be a failover that asking
    again after the election fixes: a clustered JetStream said it has no leader (a 503, always), or, on a
    connection to a cluster (:func:`~airflow_provider_jetstream.core.connection.client.clustered`), nobody in
    the connection's own domain answered (no responders, a timeout, a reconnect: a request that reached a node
    as it died). Nobody answering in another domain (``$JS.<leaf>.API``, reached through a leaf link) is that
    domain being away, not a failover: answered at once. Refusals never are. Default ``prefix``: None, the
    connection's own domain."""
    if isinstance(error, JetStreamNoLeaderError) or _unavailable(error):
        return True
    return disposition(error) == WAIT and clustered(nc) and in_home_domain(nc, prefix)


def _unavailable(error: BaseException) -> bool:
    """A JetStream answer with code 503 ("JetStream system temporarily unavailable"): no leader there now."""
    return isinstance(error, JetStreamApiError) and error.code == UNAVAILABLE


def nothing_stores_now(answer: BaseException | None, *, cluster: bool = False) -> bool:
    """Whether the answer to a publish (the error it came as) says nothing could store the message now, so that
    it may go again after a pause: 503 (a stream without a leader, JetStream being elected), too many atomic
    batches being staged (:data:`TOO_MANY_INFLIGHT`), a fast-ingest batch the server no longer knows
    (:data:`UNKNOWN_BATCH`), or, with ``cluster`` (a connection to a cluster), no responders (a stream's
    interest moving between nodes). On one server no responders means no stream listens: a failure.
    Default ``cluster``: False."""
    if isinstance(answer, (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError)):
        return cluster
    if not isinstance(answer, JetStreamPublishError):
        return False
    return answer.status == UNAVAILABLE or answer.err_code in (TOO_MANY_INFLIGHT, UNKNOWN_BATCH)


def pause_after(sends: int) -> float:
    """Seconds to pause before sending again something sent ``sends`` times (1..): :data:`FIRST_PAUSE`,
    doubling up to :data:`LONGEST_PAUSE`."""
    return min(FIRST_PAUSE * 2 ** max(0, min(sends, 32) - 1), LONGEST_PAUSE)


def resend_after(ack_latency: float) -> float:
    """Seconds an unacknowledged message with a ``Nats-Msg-Id`` waits before it is sent again, given the recent
    ack latency (a moving average, seconds): at least :data:`RESEND_AFTER`."""
    return max(RESEND_AFTER, ACK_LATENCIES * ack_latency)


class Backoff:
    """A growing pause: ``first`` seconds, doubling at each :meth:`next` up to ``cap``; :meth:`reset` once the
    server serves again.

    :param first: the first pause, seconds. Default 1.
    :param cap: the longest pause, seconds. Default 30.
    """

    def __init__(self, first: float = 1.0, cap: float = 30.0) -> None:
        self.first = min(first, cap)
        self.cap = cap
        self._next = self.first

    def next(self) -> float:
        """The pause before this retry (and double it for the next)."""
        delay = self._next
        self._next = min(self._next * 2, self.cap)
        return delay

    def reset(self) -> None:
        self._next = self.first


def pull_pauses(cap: float) -> Backoff:
    """The pauses of a reader that pulls again after the server could not serve a pull ("retry after": no
    JetStream answered, a server shutting down, too many waiting requests) or makes its consumer again:
    :data:`FIRST_PULL_PAUSE` seconds, doubling up to ``cap`` (the pull request's expiry), from the first again
    once messages flow."""
    return Backoff(FIRST_PULL_PAUSE, cap)


def may_settle_again(*, refused: bool, nc: Client, prefix: str) -> bool:
    """Whether a verdict sent to a consumer of the JetStream API ``prefix`` and not confirmed goes again: when
    nobody answered it at all, or, on a connection to a cluster, when it was answered "no responders" in the
    connection's own domain (``refused``: a consumer leader being elected; the rule of :func:`during_failover`).
    On one server, or in another domain reached through a leaf link (a cut leaf), "no responders" means nobody
    takes that consumer's verdicts now: not a failover of the connection's cluster."""
    return not refused or (clustered(nc) and in_home_domain(nc, prefix))


class ResendWindow:
    """The sends of one thing (a request, a write, a batch) within ``within`` seconds from now: the time left,
    and the pause before the next send (:data:`FIRST_PAUSE` doubling up to :data:`LONGEST_PAUSE`), taken only
    while the send after it still falls in the window.

    :param within: seconds the window stays open.
    """

    def __init__(self, within: float) -> None:
        self.within = within
        self.deadline = time.monotonic() + within
        self._backoff = Backoff(FIRST_PAUSE, LONGEST_PAUSE)

    def left(self) -> float:
        """Seconds until the window closes (0 once closed)."""
        return max(0.0, self.deadline - time.monotonic())

    def closed(self) -> bool:
        return time.monotonic() >= self.deadline

    def restart(self) -> None:
        """Open the window again for ``within`` seconds, the pauses from the first again (something went
        forward)."""
        self.deadline = time.monotonic() + self.within
        self._backoff.reset()

    def next_pause(self) -> float | None:
        """The pause before the next send, None when the send after it would fall past the window."""
        pause = self._backoff.next()
        return None if time.monotonic() + pause > self.deadline else pause

    async def pause(self) -> bool:
        """Pause before the next send: False (and no pause) when that send would fall past the window."""
        pause = self.next_pause()
        if pause is None:
            return False
        await asyncio.sleep(pause)
        return True


async def repeat(
    call: Callable[[], Awaitable[T]], *, again: Callable[[BaseException], bool], within: float, what: str
) -> T:
    """The one loop of sending again: ``call()``; while it raises an error ``again`` accepts and the next call
    falls within ``within`` seconds (:class:`ResendWindow`), pause and call again. The last error otherwise.
    ``what`` names the call in the log."""
    window = ResendWindow(within)
    attempt = 1
    while True:
        try:
            return await call()
        except Exception as err:
            pause = window.next_pause() if again(err) else None
            if pause is None:
                raise
            log.info("%s: %s; asking again in %.2fs (attempt %d)", what, err, pause, attempt + 1)
        await asyncio.sleep(pause)
        attempt += 1


async def retry_failover(
    call: Callable[[], Awaitable[T]],
    nc: Client,
    *,
    within: float,
    what: str,
    unanswered_too: bool = False,
    prefix: str | None = None,
) -> T:
    """Across a failover: ``call()``, a request at the JetStream API ``prefix`` (default None: the connection's
    own domain), asked again while it fails :func:`during_failover`, within ``within`` seconds (:func:`repeat`).
    ``what`` names the call in the log.

    :param unanswered_too: also ask again when nobody answers, in any domain and on a connection to one
        server (a question to another domain through a leaf link, whose far side may be electing a leader).
        Default False.
    """

    def failover(err: BaseException) -> bool:
        return during_failover(err, nc, prefix) or (unanswered_too and disposition(err) == WAIT)

    return await repeat(call, again=failover, within=within, what=what)
