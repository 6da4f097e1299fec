"""Watches: the changes of a KV key, or of an object store's objects, as they come (no polling).

One shape for both: :func:`changes` reads the messages of some subjects of a stream in order through an
ordered consumer of its own (:class:`~airflow_provider_jetstream.core.read.ordered.OrderedConsumer`), from the
last message of each subject or from a sequence, for as long as the caller iterates. The server sends each
new message as it is stored; while nothing comes, idle heartbeats show the server is there, and a watch that
hears nothing for three of them, that loses a message on the way, or whose consumer is deleted (a leaf
restarted, a stream leader killed) goes on with a new consumer from the next sequence. A watch yields None
once what is stored has been delivered (at once when nothing is), as nats' KV watchers say so.

:func:`watch_key` is a KV key's watch (mirror buckets of other domains included), :func:`watch_objects` an
object store's. Errors: :class:`~airflow_provider_jetstream.core.errors.JetStreamNotFoundError` when the
bucket does not exist, :class:`~airflow_provider_jetstream.core.errors.JetStreamDomainUnavailableError` when
no JetStream answers (a leaf cut off: the caller waits), the server's refusal otherwise.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
from collections.abc import AsyncIterator, Sequence

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.manage.buckets import KvEntry, bucket_layout_of
from airflow_provider_jetstream.core.manage.object_messages import ObjectInfo, meta_subject
from airflow_provider_jetstream.core.manage.objects import layout_of
from airflow_provider_jetstream.core.protocol import KV_OPERATION, AckReply, parse_header_block
from airflow_provider_jetstream.core.read.ordered import OrderedConsumer
from airflow_provider_jetstream.core.read.pull import PullRequests

#: One message of a watch: its ack reply's metadata, subject, raw header block and payload.
Change = tuple[AckReply, bytes, bytes, bytes]
#: Messages one pull request asks for.
_BATCH = 256


async def changes(
    api: JetStreamApi,
    stream: str,
    filter_subjects: Sequence[str],
    *,
    where: str,
    start_seq: int | None = None,
    heartbeat: float = 5.0,
) -> AsyncIterator[Change | None]:
    """Each message on ``filter_subjects`` of ``stream``, in stream order, as it comes: from ``start_seq``, or
    (None, the default) from the last message of each subject; None once what is stored has been delivered.
    Forever: the caller stops iterating (the consumer is deleted then)."""
    arrived: collections.deque[Change] = collections.deque()

    def take(meta: AckReply, reply: str, subject: bytes, headers: bytes, payload: bytes) -> None:
        arrived.append((meta, subject, headers, payload))
        ordered.changed.set()

    ordered = OrderedConsumer(
        api, stream, take, PullRequests(6 * heartbeat, heartbeat, pipelined=False), where=where,
        filter_subjects=filter_subjects, inactive_threshold=max(60.0, 12 * heartbeat), kind="watch",
    )  # fmt: skip
    last: int | None = None  # the stream sequence of the last message yielded
    try:
        made = await ordered.start(start_seq=start_seq, last_per_subject=start_seq is None)
        caught_up = made.pending == 0
        if caught_up:
            yield None
        while True:
            while arrived:
                change = arrived.popleft()
                last = change[0].sequence
                ordered.flowing()
                yield change
                if not caught_up and change[0].pending == 0:
                    caught_up = True
                    yield None
            reason = ordered.interruption()
            if reason is not None:
                arrived.clear()
                if last is None and start_seq is None:
                    await ordered.resume(None, reason)  # the last message of each subject again
                else:
                    await ordered.resume((last or (start_seq or 1) - 1) + 1, reason)
                continue
            sub = ordered.sub
            if sub is None:
                continue
            pause = sub.paused()
            if not pause and not sub.outstanding:
                await sub.ask(_BATCH)
            if not arrived:
                await sub.wait(pause or heartbeat)
    finally:
        await ordered.stop()


async def watch_key(api: JetStreamApi, bucket: str, key: str) -> AsyncIterator[KvEntry | None]:
    """Every revision of ``key`` in ``bucket`` of ``api``'s domain, from its latest on (deletes and purges
    included: ``operation`` set), read where the bucket stores it (mirror layouts included); None once what
    is stored has been delivered. Forever: the caller stops iterating."""
    layout = await bucket_layout_of(api, bucket)
    where = f"KV {bucket!r} in {api.target}"
    async for change in changes(api, layout.stream, [layout.key_prefix + key], where=where):
        if change is None:
            yield None
            continue
        meta, _, headers, payload = change
        operation = (parse_header_block(headers)[2].get(KV_OPERATION) or [None])[-1] if headers else None
        yield KvEntry(bucket, key, payload, meta.sequence, None, operation.upper() if operation else None)


async def watch_objects(
    api: JetStreamApi, bucket: str, *, object_name: str | None = None, after_revision: int | None = None
) -> AsyncIterator[ObjectInfo | None]:
    """Every change of an object of ``bucket`` (or of the one named ``object_name``): a put or a delete
    (``.deleted``), as it comes; from the revision after ``after_revision``, or (None, the default) from the
    latest of each object. None once what is stored has been delivered. A change a later one of the same object
    replaced before it was read is not seen (one meta per object is kept). Forever: the caller stops iterating."""
    layout = await layout_of(api, bucket)
    subject = meta_subject(layout.subjects_of, object_name) if object_name is not None else None
    every = subject or f"$O.{layout.subjects_of}.M.>"
    start = None if after_revision is None else after_revision + 1
    where = f"object store {bucket!r} in {api.target}"
    async for change in changes(api, layout.stream, [every], where=where, start_seq=start):
        if change is None:
            yield None
            continue
        meta, subject_bytes, _, payload = change
        stored = dt.datetime.fromtimestamp(meta.timestamp_ns / 1e9, tz=dt.timezone.utc).isoformat()
        message = {
            "seq": meta.sequence,
            "subject": subject_bytes.decode(),
            "time": stored,
            "data": base64.b64encode(payload).decode(),
        }
        yield ObjectInfo.from_message(message, bucket)
