"""The publish engine's atomic mode (nats-server 2.12+, a stream with ``allow_atomic``): a batch's messages are
all stored, or none of them.

The protocol of ADR-50 as the server implements it: every message of a batch carries ``Nats-Batch-Id``
(at most 64 characters) and ``Nats-Batch-Sequence`` (1, 2, ...); the last one also ``Nats-Batch-Commit:
1``. The server stages the messages and, at the commit, checks them all (the stream's limits, the
expected-stream header, each ``Nats-Msg-Id``) and stores every one or none: the commit's answer is a
publish ack with the batch's id (``batch``), its size (``count``) and the last message's sequence, or the
refusal of the whole batch. Every message here is sent with a reply subject: the server answers a staged
message with an empty reply, a refused one (over ``max_msg_size``, no stream on its subject, a stream
without ``allow_atomic``) with its reason, which is the reason given for the batch (the commit then only
says "incomplete"). The sender waits for message 1's answer before it sends the rest (a stream that
refuses the batch costs one message), and stops sending at the first refusal.

The server's limits (nats-server 2.12 to 2.15, unless its ``jetstream { limits { ... } }`` say otherwise):
at most :data:`MAX_BATCH` (1000) messages per batch (more is refused, err_code 10199, nothing stored), 50
batches being staged per stream and 1000 per server (more: "too many inflight", 10210, sent again after a
pause, by the resend rule: :func:`~airflow_provider_jetstream.core.resend.nothing_stores_now`), and a batch
idle for 10 s is dropped (a sender that died mid-batch stored nothing).

Duplicates: inside an atomic batch a ``Nats-Msg-Id`` the stream already has refuses the **whole** batch
(10201, "atomic publish batch contains duplicate message id"), without saying which message; so does an id
that appears twice in one batch. A publish repeated after a crash would fail where an ordinary one counts
duplicates, so: an id repeated inside a batch is not sent again (counted as a duplicate of the first, as
the stream would count it); and after a 10201 each message with an id is probed, as an ordinary publish
without payload that carries the id and a ``Nats-Expected-Last-Msg-Id`` no stream has: the server checks
the id first, so a duplicate is answered with its ack (``"duplicate": true``) and any other message is
refused ("wrong last msg ID", 10070): a probe stores nothing (checked on nats-server 2.12.8 and 2.15.1).
The messages the stream has are counted as duplicates, the others sent again as one atomic batch (they
land together or not at all). A commit left unanswered (the connection or the server lost) is sent again,
as a new batch, when every message has an id (were the first one committed, the second finds the
duplicates); without ids it is a failure: it may have been stored whole, or not at all.

More messages than one batch takes: the engine's atomic mode (:class:`AtomicBatches`, given to
:func:`~airflow_provider_jetstream.core.publish.engine.publish_messages`) sends them in consecutive batches,
each atomic on its own (a failure may leave the first batches stored), or, with ``whole``, refuses them
before any is sent: messages that must land together are never split into batches that land apart.

Airflow-free: Spark executors import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamPublishError
from airflow_provider_jetstream.core.protocol import (
    BATCH_COMMIT_HEADER,
    BATCH_ID_HEADER,
    BATCH_SEQUENCE_HEADER,
    EXPECTED_LAST_MSG_ID_HEADER,
    EXPECTED_STREAM_HEADER,
    MSG_ID_HEADER,
    PubAck,
    is_no_responders,
    parse_pub_ack,
)
from airflow_provider_jetstream.core.publish.summary import Outgoing, PublishSummary, failure_reason
from airflow_provider_jetstream.core.resend import ResendWindow, may_resend, nothing_stores_now, repeat
from airflow_provider_jetstream.core.tasks import wait_task

#: Most messages per atomic batch: the server's default limit (its ``max_batch_size`` may lower it: the
#: server then refuses a larger batch, nothing stored, and says its limit).
MAX_BATCH = 1000
#: The JetStream API level of nats-server 2.12, the first release with atomic batches.
ATOMIC_API_LEVEL = 2
#: "atomic publish batch contains duplicate message id": the stream has one of the batch's ids.
DUPLICATE_MSG_ID = 10201
#: "wrong last msg ID": the answer to a probe (:func:`_probe`) whose ``Nats-Msg-Id`` the stream has not.
WRONG_LAST_MSG_ID = 10070
#: Probes of ``Nats-Msg-Id`` sent at once.
PROBES_AT_ONCE = 256

Item = tuple[int, Outgoing]


@dataclass(frozen=True)
class AtomicTarget:
    """A stream that takes atomic batches (``allow_atomic``); ``domain`` its JetStream domain (None: none)."""

    api: JetStreamApi
    stream: str
    domain: str | None


@dataclass(frozen=True)
class AtomicBatches:
    """The publish engine's atomic mode (``mode`` of
    :func:`~airflow_provider_jetstream.core.publish.engine.publish_messages`): the messages in atomic batches
    of at most ``max_batch`` to ``target`` (from :func:`atomic_target`), in order, each stored whole or not
    at all.

    :param target: the stream that takes the batches.
    :param max_batch: most messages per batch (1..). Default :data:`MAX_BATCH` (the server's default limit).
    :param whole: every message in **one** batch: more than ``max_batch`` messages are refused before any is
        sent (never split). Default False: consecutive batches of ``max_batch``, each atomic on its own.
    :param too_many_hint: words ending the refusal of more than ``max_batch`` messages with ``whole``.
        Default: none.
    """

    target: AtomicTarget
    max_batch: int = MAX_BATCH
    whole: bool = False
    too_many_hint: str = ""

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be 1 or more, got {self.max_batch}")


async def atomic_target(api: JetStreamApi, *, stream: str | None, subject: str | None, what: str) -> AtomicTarget:
    """The stream ``stream`` (else the one storing ``subject``) when it takes atomic batches, checked
    before anything is sent: its JetStream is nats-server 2.12+ (API level 2+) and its config has
    ``allow_atomic`` (an older server drops the field, and would store a batch's messages one by one).

    :param what: words for the refusal (``jetstream option atomic='true'``).
    :raises JetStreamConfigError: the server is older than 2.12, no (or more than one) stream stores
        ``subject``, the stream does not exist, or it lacks ``allow_atomic``.
    """
    where = describe_prefix(api.prefix)
    level, domain = await api.api_level()
    if level < ATOMIC_API_LEVEL:
        raise JetStreamConfigError(
            f"{what}: atomic batches need nats-server 2.12 or later (JetStream API level {ATOMIC_API_LEVEL}+); "
            f"{where} reports API level {level} (level 0: before 2.11); nothing was sent"
        )
    if stream is None:
        names = await api.stream_names(subject) if subject else []
        if len(names) != 1:
            found = f"streams {', '.join(names)}" if names else "no stream"
            raise JetStreamConfigError(
                f"{what}: {found} in {where} stores subject {subject!r}: give the stream that takes the "
                "atomic batches; nothing was sent"
            )
        stream = names[0]
    info = await api.stream_info(stream)
    if info is None:
        raise JetStreamConfigError(f"{what}: stream {stream!r} does not exist in {where}; nothing was sent")
    if not (info.get("config") or {}).get("allow_atomic"):
        raise JetStreamConfigError(
            f"{what}: stream {stream!r} in {where} does not take atomic batches (its config has no allow_atomic): "
            "set allow_atomic on the stream (nats-server 2.12+), or publish without atomic batches; nothing was sent"
        )
    return AtomicTarget(api, stream, domain)


@dataclass
class _Answer:
    """How the server answered one batch: the commit's ack, or the refusal of message ``refused_at``
    (1-based; the commit's when the batch was refused as a whole), or nothing (``ack`` and ``refusal`` None:
    ``committed`` says whether the commit was sent)."""

    ack: PubAck | None = None
    refusal: JetStreamPublishError | None = None
    refused_at: int = 0
    replies: int = 0
    committed: bool = False


@dataclass
class _Replies:
    """The answers to one batch's messages, by batch sequence (reply subject ``<inbox>.<sequence>``)."""

    inbox: str
    size: int
    answers: dict[int, Any] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_reply(self, msg: Any) -> None:
        seq = msg.subject[len(self.inbox) + 1 :]
        if seq.isdigit():
            self.answers.setdefault(int(seq), msg)
            self.changed.set()

    def refusal(self) -> tuple[int, JetStreamPublishError] | None:
        """The first message before the commit that the server refused: its batch sequence and the reason."""
        for seq in sorted(self.answers):
            if seq < self.size:
                reason = _refusal(self.answers[seq], staged_ok=True)
                if reason is not None:
                    return seq, reason
        return None

    async def wait(self, done: Callable[[], bool], deadline: float) -> bool:
        """Wait until ``done()``: False when the loop's clock passed ``deadline`` first."""
        now = asyncio.get_running_loop().time
        while not done():
            self.changed.clear()
            if now() >= deadline:
                return False
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_task(self.changed.wait(), deadline - now())
        return True


def _refusal(msg: Any, staged_ok: bool) -> JetStreamPublishError | None:
    """Why the server refused a message (its answer ``msg``), None when it did not: an empty answer stages a
    message before the commit (``staged_ok``)."""
    if is_no_responders(msg.headers):
        return JetStreamPublishError("no stream listens on its subject")
    if staged_ok and not msg.data:
        return None
    try:
        parse_pub_ack(msg.data)
    except JetStreamPublishError as err:
        return err
    return None


async def _send(nc: Client, items: list[Item], ack_timeout: float) -> _Answer:
    """Send ``items`` as one atomic batch (a new batch id) and read the server's answer within ``ack_timeout``."""
    batch_id = uuid.uuid4().hex
    size = len(items)
    replies = _Replies(nc.new_inbox(), size)
    deadline = asyncio.get_running_loop().time() + ack_timeout
    answer = _Answer()
    sub = await nc.subscribe(replies.inbox + ".*", cb=replies.on_reply)
    try:
        for seq, (_, (subject, payload, headers)) in enumerate(items, 1):
            hdrs = dict(headers or {})
            hdrs[BATCH_ID_HEADER] = batch_id
            hdrs[BATCH_SEQUENCE_HEADER] = str(seq)
            if seq == size:
                hdrs[BATCH_COMMIT_HEADER] = "1"
                answer.committed = True
            await nc.publish(subject, payload, reply=f"{replies.inbox}.{seq}", headers=hdrs)
            # The first answer says whether the stream takes the batch at all.
            if seq == 1 and size > 1 and not await replies.wait(lambda: 1 in replies.answers, deadline):
                break
            if replies.refusal() is not None:
                break  # the batch cannot land: nothing more is sent (the server drops what it staged)
        # Every message sent is answered (staged, refused, or no stream): the first refusal is the reason.
        sent = seq
        await replies.wait(lambda: len(replies.answers) >= sent, deadline)
    finally:
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
    answer.replies = len(replies.answers)
    refused = replies.refusal()
    commit = replies.answers.get(size)
    if refused is not None:
        answer.refused_at, answer.refusal = refused
    elif commit is not None:
        answer.refusal = _refusal(commit, staged_ok=False)
        if answer.refusal is not None:
            answer.refused_at = size
        else:
            ack = parse_pub_ack(commit.data)
            if ack.batch == batch_id and ack.count == size:
                answer.ack = ack
            else:
                answer.refused_at = size
                answer.refusal = JetStreamPublishError(f"not the ack of this atomic batch: {commit.data[:120]!r}")
    return answer


def _has_id(item: Item) -> bool:
    return may_resend(item[1][2])


async def _probe(nc: Client, target: AtomicTarget, items: list[Item], window: ResendWindow) -> list[Any]:
    """Whether the stream has each item's ``Nats-Msg-Id``, asked without storing anything: an ordinary
    publish (empty) with that id and a ``Nats-Expected-Last-Msg-Id`` no stream has. The server checks the
    id first: it answers a duplicate with its ack (``duplicate``, the stored sequence), any other message
    with "wrong last msg ID" (10070, not stored). Per item, within ``window``: the :class:`PubAck` of a
    duplicate, None (the stream has not the id), or the error of a probe refused for another reason or not
    answered (a probe nothing could store now is asked again, by the resend rule)."""
    at_once = asyncio.Semaphore(PROBES_AT_ONCE)
    never = f"atomic probe {uuid.uuid4().hex}"

    async def one(item: Item) -> Any:
        subject, _, headers = item[1]
        probe = {MSG_ID_HEADER: (headers or {})[MSG_ID_HEADER], EXPECTED_LAST_MSG_ID_HEADER: never}
        probe[EXPECTED_STREAM_HEADER] = target.stream

        async def ask() -> Any:
            try:
                reply = await wait_task(nc.request(subject, b"", timeout=max(0.1, window.left()), headers=probe))
            except (nats.errors.Error, asyncio.TimeoutError) as err:
                return JetStreamPublishError(f"no answer to a probe of its Nats-Msg-Id: {type(err).__name__}")
            refusal = _refusal(reply, staged_ok=False)
            if refusal is None:
                ack = parse_pub_ack(reply.data)
                return ack if ack.duplicate else JetStreamPublishError(f"a probe was stored: {reply.data!r}")
            if refusal.err_code == WRONG_LAST_MSG_ID:
                return None
            if nothing_stores_now(refusal):
                raise refusal
            return refusal

        async with at_once:
            try:
                return await repeat(ask, again=nothing_stores_now, within=window.left(), what="atomic batch probe")
            except JetStreamPublishError as refusal:
                return refusal

    return list(await asyncio.gather(*(one(item) for item in items)))


def _without_repeats(items: list[Item]) -> tuple[list[Item], list[Item]]:
    """``(to send, repeats)``: a message whose ``Nats-Msg-Id`` an earlier one of the batch has is a repeat."""
    seen: set[str] = set()
    send: list[Item] = []
    repeats: list[Item] = []
    for item in items:
        msg_id = (item[1][2] or {}).get(MSG_ID_HEADER)
        (repeats if msg_id and msg_id in seen else send).append(item)
        if msg_id:
            seen.add(msg_id)
    return send, repeats


async def _publish_batch(
    nc: Client, target: AtomicTarget, items: list[Item], summary: PublishSummary, ack_timeout: float, what: str
) -> None:
    """Store ``items`` as one atomic batch (all or none), tallied in ``summary``: stored, duplicates (ids the
    stream has, and repeats of an id inside the batch), or failed with the server's reason. Within
    ``ack_timeout`` seconds, by the resend rule: a batch refused because nothing could store it now goes
    again after a pause; a batch left unanswered goes again at once as a new batch when that is safe; after
    a refused duplicate id, the messages the stream has not go again at once."""

    def duplicates(count: int) -> None:
        if count:
            summary.batch_acknowledged(target.stream, target.domain, 0, count, 0)

    pending, repeats = _without_repeats(items)
    window = ResendWindow(ack_timeout)
    answer = _Answer()

    async def send() -> None:
        nonlocal answer
        summary.batches += 1
        answer = await _send(nc, pending, max(0.1, window.left()))
        summary.replies += answer.replies
        if answer.refusal is not None and nothing_stores_now(answer.refusal):
            raise answer.refusal

    while pending:
        try:
            await repeat(send, again=nothing_stores_now, within=window.left(), what=f"{what}: atomic batch")
        except JetStreamPublishError as err:
            if err is not answer.refusal:
                raise
        if answer.ack is not None:
            ack = answer.ack
            summary.batch_acknowledged(ack.stream, ack.domain, ack.seq, len(pending), len(pending))
            break
        late = window.closed()
        refusal, refused_index = answer.refusal, None
        if refusal is None:
            if not late and (not answer.committed or all(_has_id(item) for item in pending)):
                summary.republished += len(pending)
                continue  # sent again as a new batch: were the first one committed, its ids are duplicates now
            maybe = "stored whole or not at all" if answer.committed else "not stored (its commit was not sent)"
            error = JetStreamPublishError(
                f"no answer to the atomic batch (#{pending[0][0]}..#{pending[-1][0]}) within {ack_timeout:g}s: "
                f"{maybe}; not sent again (only messages that all have a Nats-Msg-Id are)"
            )
            summary.failures.extend((index, error) for index, _ in pending + repeats)
            raise JetStreamPublishError(f"{what}: {error}; {summary.counts()}; nothing more was sent")
        if refusal.err_code == DUPLICATE_MSG_ID and not late:
            with_ids = [item for item in pending if _has_id(item)]
            probes = await _probe(nc, target, with_ids, window)
            summary.replies += len(probes)
            probed = list(zip(with_ids, probes, strict=True))
            have = {item[0] for item, probe in probed if isinstance(probe, PubAck)}
            duplicates(len(have))
            pending = [item for item in pending if item[0] not in have]
            odd = [(item[0], probe) for item, probe in probed if isinstance(probe, JetStreamPublishError)]
            if not odd and have:
                continue  # the messages the stream has not, again as one batch
            if odd:
                refused_index, refusal = odd[0]
        elif 0 < answer.refused_at < len(pending):
            refused_index = pending[answer.refused_at - 1][0]
        if pending:
            at = f" (refused at #{refused_index})" if refused_index is not None else ""
            error = JetStreamPublishError(
                f"{failure_reason(refusal)}: the atomic batch (#{pending[0][0]}..#{pending[-1][0]}) stored none{at}",
                refusal.err_code,
                refusal.description,
                refusal.status,
            )
            summary.failures.extend((index, error) for index, _ in pending + repeats)
            return
    duplicates(len(repeats))


async def publish_atomic_batches(
    nc: Client,
    mode: AtomicBatches,
    messages: Iterable[Outgoing],
    summary: PublishSummary,
    *,
    check: Callable[[str], Any],
    ack_timeout: float,
    what: str,
) -> None:
    """The engine's atomic mode: ``messages`` in atomic batches of ``mode`` (see :class:`AtomicBatches`), in
    order, tallied in ``summary`` exactly: stored, duplicates (ids the stream had), failed (every message of
    a refused batch, with the server's reason).

    :param check: the subject check every message passes before its batch is sent.
    :param ack_timeout: seconds a batch may take to be answered (sends again and probes included).
    :param what: words for errors (``jetstream write``).
    :raises UnsafeSubjectError: a subject is reserved or not literal (that batch and the rest are not sent).
    :raises JetStreamPublishError: ``whole`` and more than ``max_batch`` messages (nothing sent), or a commit
        unanswered that cannot be sent again (nothing more is sent); the error gives the exact counts.
    """
    max_batch, whole = mode.max_batch, mode.whole
    numbered = enumerate(messages)
    while True:
        batch: list[Item] = []
        for item in numbered:
            batch.append(item)
            if len(batch) > max_batch or (not whole and len(batch) == max_batch):
                break
        if whole and len(batch) > max_batch:
            raise JetStreamPublishError(
                f"{what}: more than {max_batch} messages for one atomic batch: a batch takes at most {max_batch} "
                "messages (the server's limit), and these must land together, so they are not split; "
                f"nothing was sent{mode.too_many_hint}"
            )
        if not batch:
            return
        for _, (subject, _, _) in batch:
            check(subject)
        summary.count += len(batch)
        await _publish_batch(nc, mode.target, batch, summary, ack_timeout, what)
        if whole or len(batch) < max_batch:
            return
