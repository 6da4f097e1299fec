"""The KV key check: a key is present when its latest entry is a value (equal to ``value``, at ``min_revision``).

A deleted or purged key (a delete or purge marker, or no entry at all) is absent. Gets go through
:func:`~airflow_provider_jetstream.core.manage.buckets.kv_get`; the KV trigger watches the key with
:func:`watch_key`, on the one pull engine.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from nats.aio.msg import Msg

from airflow_provider_jetstream.core.api import Backoff, JetStreamApi, clustered, hint_for
from airflow_provider_jetstream.core.connection.client import refusal_since
from airflow_provider_jetstream.core.errors import (
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamPermissionError,
)
from airflow_provider_jetstream.core.manage.buckets import KV_OPERATION, REMOVED, KvEntry, bucket_layout_of
from airflow_provider_jetstream.core.protocol import HEARTBEAT, REQUEST_DONE, RESUME, RETRY_AFTER, parse_ack_reply
from airflow_provider_jetstream.core.read.pull import PullRequests, create_ephemeral_consumer, discard_consumer
from airflow_provider_jetstream.core.tasks import next_item

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyCheck:
    """One reading of a key: whether it satisfies the check, why not, and the entry read."""

    bucket: str
    key: str
    target: str
    done: bool
    reason: str
    revision: int | None = None
    raw: bytes | None = None

    def to_xcom(self) -> dict[str, Any]:
        """The decoded value (UTF-8 text, else base64 with ``encoding: "base64"``) and revision."""
        try:
            value, encoding = (self.raw or b"").decode(), "utf-8"
        except UnicodeDecodeError:
            value, encoding = base64.b64encode(self.raw or b"").decode(), "base64"
        return {
            "bucket": self.bucket,
            "key": self.key,
            "target": self.target,
            "value": value,
            "encoding": encoding,
            "revision": self.revision,
        }


def judge_entry(
    bucket: str,
    key: str,
    target: str,
    entry: KvEntry | None,
    value: str | None,
    min_revision: int | None,
) -> KeyCheck:
    """Judge the latest entry of a key (None: no entry, or deleted/purged)."""
    if entry is None or entry.operation in REMOVED:
        what = "absent" if entry is None else f"{entry.operation.lower()}d at revision {entry.revision}"
        return KeyCheck(bucket, key, target, False, f"key {key!r} is {what}")
    raw = entry.value or b""
    if value is not None and raw != value.encode():
        return KeyCheck(
            bucket, key, target, False, f"key {key!r} is {raw[:80]!r} at revision {entry.revision}, not {value!r}"
        )
    if min_revision is not None and (entry.revision or 0) < min_revision:
        return KeyCheck(bucket, key, target, False, f"key {key!r} is at revision {entry.revision} < {min_revision}")
    return KeyCheck(bucket, key, target, True, f"key {key!r} present at revision {entry.revision}", entry.revision, raw)


async def watch_key(api: JetStreamApi, bucket: str, key: str, *, quiet_after: float) -> AsyncIterator[KvEntry | None]:
    """Every revision of ``key`` in ``bucket`` of ``api``'s domain, from its latest on (deletes and purges
    included: ``operation`` set), read where the bucket stores it (mirror layouts included) through a
    consumer of this watch's own on the one pull engine. Yields None once what is stored has been
    delivered (at once when the key has no revision), as nats' KV watchers do; ends when ``quiet_after``
    seconds pass without a revision. The consumer is deleted when the watch ends.

    On a cluster's connection, a failover (the pull answered 503, or the consumer lost with its node) is
    resumed after the election: a new consumer from the revision after the last one yielded, after a
    pause (:class:`~airflow_provider_jetstream.core.api.Backoff`), for ``api.failover`` seconds at most.

    :class:`JetStreamNotFoundError` if the bucket does not exist; :class:`JetStreamDomainUnavailableError`
    when no JetStream answers the pull (a leaf cut off, a failover that lasts); :class:`JetStreamPermissionError`
    when the server refuses this user's pull.
    """
    layout = await bucket_layout_of(api, bucket)
    where = f"KV {bucket!r} in {api.target}"
    last: int | None = None  # the last revision yielded
    delivered = False  # None was yielded: what was stored has been delivered
    backoff = Backoff(first=0.5, cap=4.0)
    failing_since: float | None = None
    while True:
        name, pending, _ = await create_ephemeral_consumer(
            api, layout.stream, where=where, last_per_subject=last is None,
            start_seq=None if last is None else last + 1, filter_subjects=[layout.key_prefix + key],
            inactive_threshold=max(30.0, 3 * quiet_after), kind="watch",
        )  # fmt: skip
        requests = PullRequests(
            api.nc, api.prefix, layout.stream, name, expires=quiet_after, heartbeat=None, pipelined=False
        )
        arrived: asyncio.Queue[Msg] = asyncio.Queue()
        await requests.listen(arrived.put)
        try:
            if pending == 0 and not delivered:
                delivered = True
                yield None  # nothing stored for the key
            while True:
                if not requests.outstanding:
                    asked = time.monotonic()
                    await requests.ask(64)
                try:
                    msg = await next_item(arrived, quiet_after + api.timeout)
                except asyncio.TimeoutError:  # the server dropped the request: a refusal, or a lost link
                    refusal = refusal_since(api.nc, asked, subject=requests.subject)
                    if refusal:
                        raise JetStreamPermissionError(f"{where}: {refusal}") from None
                    return
                meta = parse_ack_reply(msg.reply)
                if meta is None:
                    status = requests.status(msg.headers)
                    if status is None or status.outcome == HEARTBEAT:
                        continue
                    if status.outcome == REQUEST_DONE:
                        return  # the request expired: quiet for quiet_after
                    if status.outcome in (RETRY_AFTER, RESUME) and clustered(api.nc):
                        now = time.monotonic()
                        failing_since = failing_since or now
                        if now - failing_since < api.failover:
                            log.info("%s: the watch's pull answered %s; resuming after the election", where,
                                     status.reason)  # fmt: skip
                            break
                        raise JetStreamDomainUnavailableError(
                            f"the watch of {where} answered {status.reason} for {api.failover:g}s: "
                            f"{hint_for(api.nc, api.prefix)}"
                        )

                    if status.outcome == RETRY_AFTER:
                        raise JetStreamDomainUnavailableError(
                            f"no JetStream answered the watch of {where}: {status.reason}"
                        )
                    raise JetStreamError(f"{where}: the server ended the watch: {status.reason}")
                requests.received()
                failing_since = None
                backoff.reset()
                last = meta.sequence
                operation = (msg.headers or {}).get(KV_OPERATION)
                yield KvEntry(bucket, key, msg.data, meta.sequence, None, operation.upper() if operation else None)
                if meta.pending == 0:
                    delivered = True
                    yield None  # what is stored has been delivered
        finally:
            await requests.close()
            await asyncio.shield(discard_consumer(api, layout.stream, name))
        await asyncio.sleep(backoff.next())
