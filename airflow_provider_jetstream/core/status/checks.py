"""The status checks JetStreamHook, the sensors and the triggers share: consumer lag, exact replication, KV keys.

Each check reads what it needs through :class:`~airflow_provider_jetstream.core.api.JetStreamApi`
(or a JetStream context for KV) and judges it; connecting and choosing the domain is the caller's
(:class:`airflow_provider_jetstream.hooks.jetstream.JetStreamHook`). Airflow-free.

- Consumer lag: the nats CLI's ``nats server check consumer --unprocessed-critical
  --outstanding-ack-critical``: a consumer is done when its unprocessed messages (``num_pending``)
  and outstanding acks (``num_ack_pending``), and optionally its redeliveries, are within bounds.
- Replication: each origin is asked, in its own domain, for its last sequence, then the stream is
  read and every origin judged (see :mod:`airflow_provider_jetstream.core.status.replication`).
- KV key: present when its latest entry is a value; a deleted or purged key (a delete or purge
  marker, or no entry at all) is absent. Optionally the value must equal ``value`` or the revision
  reach ``min_revision``.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from typing import Any

import nats.js.errors
from nats.aio.client import Client
from nats.js.kv import KeyValue

from airflow_provider_jetstream.core.api import JetStreamApi, JetStreamApiError, describe_prefix
from airflow_provider_jetstream.core.errors import (
    JetStreamDomainUnavailableError,
    JetStreamImportMissingError,
    JetStreamNotFoundError,
)
from airflow_provider_jetstream.core.manage.buckets import KvEntry, open_key_value
from airflow_provider_jetstream.core.status.origins import stream_source_seq, subject_matches
from airflow_provider_jetstream.core.status.replication import (
    HeldSeq,
    OriginProbe,
    ReplicationCheck,
    ReplicationStatus,
    ReplicationWatch,
    unreachable_reason,
)

# -- consumer lag ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsumerLagCheck:
    """One reading of a consumer's counts and whether they are within the thresholds.

    :param done: every count within its bound.
    :param reason: the counts against their bounds, or which is over, in words.
    :param info: the server's raw consumer info.
    """

    stream: str
    consumer: str
    target: str
    info: dict[str, Any]
    done: bool
    reason: str

    def to_xcom(self) -> dict[str, Any]:
        """The consumer's counts and its delivered and ack-floor sequences."""
        delivered = self.info.get("delivered") or {}
        ack_floor = self.info.get("ack_floor") or {}
        return {
            "stream": self.stream,
            "consumer": self.consumer,
            "target": self.target,
            "num_pending": self.info.get("num_pending", 0),
            "num_ack_pending": self.info.get("num_ack_pending", 0),
            "num_redelivered": self.info.get("num_redelivered", 0),
            "num_waiting": self.info.get("num_waiting", 0),
            "delivered": {
                "consumer_seq": delivered.get("consumer_seq", 0),
                "stream_seq": delivered.get("stream_seq", 0),
            },
            "ack_floor": {
                "consumer_seq": ack_floor.get("consumer_seq", 0),
                "stream_seq": ack_floor.get("stream_seq", 0),
            },
        }


def judge_consumer(
    info: dict[str, Any], max_pending: int, max_ack_pending: int, max_redelivered: int | None
) -> tuple[bool, str]:
    """``(done, reason)`` for a raw consumer info: every count within its bound, or which is not."""
    counts = [
        ("unprocessed (num_pending)", info.get("num_pending", 0), max_pending, "max_pending"),
        ("outstanding acks (num_ack_pending)", info.get("num_ack_pending", 0), max_ack_pending, "max_ack_pending"),
    ]
    if max_redelivered is not None:
        counts.append(
            ("redelivered (num_redelivered)", info.get("num_redelivered", 0), max_redelivered, "max_redelivered")
        )
    over = [f"{what} {value} > {name} {bound}" for what, value, bound, name in counts if value > bound]
    if over:
        return False, "; ".join(over)
    return True, ", ".join(f"{what} {value} <= {bound}" for what, value, bound, _ in counts)


async def check_consumer_lag(
    api: JetStreamApi,
    stream: str,
    consumer: str,
    max_pending: int = 0,
    max_ack_pending: int = 0,
    max_redelivered: int | None = None,
) -> ConsumerLagCheck:
    """Read a consumer's info through ``api`` and judge it against the thresholds.

    Raises :class:`JetStreamNotFoundError` when the stream or the consumer does not exist, and
    :class:`JetStreamDomainUnavailableError` when no JetStream answers at ``api``'s target.
    """
    info = await api.consumer_info(stream, consumer)  # a missing stream raises JetStreamNotFoundError
    if info is None:
        raise JetStreamNotFoundError(f"consumer {consumer!r} does not exist on stream {stream!r} in {api.target}")
    done, reason = judge_consumer(info, max_pending, max_ack_pending, max_redelivered)
    return ConsumerLagCheck(stream, consumer, api.target, info, done, reason)


# -- KV keys --------------------------------------------------------------------------------------

_REMOVED = ("DEL", "PURGE")


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
    entry: KvEntry | KeyValue.Entry | None,
    value: str | None,
    min_revision: int | None,
) -> KeyCheck:
    """Judge the latest entry of a key (None: no entry, or deleted/purged)."""
    if entry is None or entry.operation in _REMOVED:
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


async def open_bucket(api: JetStreamApi, bucket: str) -> KeyValue:
    """nats-py's KV client for a watch of the bucket in ``api``'s domain (mirrors read where they store
    keys; see :func:`~airflow_provider_jetstream.core.manage.buckets.open_key_value`);
    :class:`JetStreamNotFoundError` naming the target if it does not exist."""
    try:
        return await open_key_value(api, bucket)
    except nats.js.errors.BucketNotFoundError:
        raise JetStreamNotFoundError(f"KV bucket {bucket!r} does not exist in {api.target}") from None


# -- replication ----------------------------------------------------------------------------------

#: Most messages read back from the end of a stream to find the newest copy from one origin, when
#: other origins write to the same subjects (each read is one request; see :func:`held_seq`).
WALK_BACK_LIMIT = 500


async def probe_origin(api: JetStreamApi, status: ReplicationStatus) -> OriginProbe:
    """Ask the origin, through its own domain or API prefix, for its last sequence among the
    subjects the copy takes (``STREAM.MSG.GET`` with ``last_by_subj``: one indexed lookup per
    filter, wildcards allowed, on every server version; 0 when nothing matches).

    A refused request (``Permissions Violation``) raises :class:`JetStreamPermissionError`.
    """
    try:
        last = 0
        for subject in status.origin_filters:
            message = await api.last_msg(status.origin, subject)
            if message:
                last = max(last, int(message["seq"]))
        return OriginProbe("ok", last)
    except JetStreamNotFoundError:
        return OriginProbe("missing", None, f"origin stream {status.origin!r} does not exist in {api.target}")
    except JetStreamImportMissingError:
        return OriginProbe(
            "unverifiable",
            None,
            f"origin not verifiable from this account (no import of {api.prefix}.STREAM.MSG.GET): lag/active rule",
        )
    except JetStreamDomainUnavailableError:
        return OriginProbe("unreachable", None, unreachable_reason(api.prefix))
    except JetStreamApiError as err:  # e.g. 503: JetStream temporarily unavailable there
        return OriginProbe("unreachable", None, f"{api.target} did not answer: {err.description}")


async def held_seq(api: JetStreamApi, info: dict[str, Any], status: ReplicationStatus, probe: OriginProbe) -> HeldSeq:
    """The highest origin sequence the stream holds from one origin.

    A mirror keeps the origin's sequences: its last sequence. For a source, nats-server >= 2.15
    reports it (the source's ``seq``); otherwise the newest message on the subjects this origin's
    copies land on (``last_by_subj``, one lookup) names its origin and origin sequence in the
    ``Nats-Stream-Source`` header. When other origins write to the same subjects, that message may
    be theirs: then the stream is read backwards from there, at most :data:`WALK_BACK_LIMIT`
    messages, to the newest copy from this origin (copies from one origin arrive in order, so the
    newest holds the highest sequence). Beyond that the answer is unknown (``seq`` None).
    """
    state = info.get("state") or {}
    if status.kind == "mirror":
        return HeldSeq(int(state.get("last_seq") or 0))
    if status.seq is not None:
        return HeldSeq(status.seq)
    if not probe.last_seq:
        return HeldSeq(0)
    first = int(state.get("first_seq") or 0)
    best = 0
    walked = 0
    for pattern in status.copy_patterns:
        message = await api.last_msg(info["config"]["name"], pattern)
        while message is not None:
            origin_seq = stream_source_seq(message, status.index_name)
            if origin_seq is not None:
                best = max(best, origin_seq)
                break
            seq, message = int(message["seq"]) - 1, None
            while seq >= first:
                walked += 1
                if walked > WALK_BACK_LIMIT:
                    return HeldSeq(
                        None,
                        f"the last {WALK_BACK_LIMIT} messages on its subjects came from other origins sharing them",
                    )
                candidate = await api.msg(info["config"]["name"], seq)
                if candidate is not None and subject_matches(candidate["subject"], pattern):
                    message = candidate
                    break
                seq -= 1
    return HeldSeq(best)


async def check_replication(nc: Client, api: JetStreamApi, watch: ReplicationWatch) -> ReplicationCheck:
    """Read the stream through ``api``, probe each watched origin in its own domain, read the
    stream again, judge (``watch`` keeps what successive checks must remember).

    The origins are probed before the stream is read, so "the stream holds the origin's last
    sequence" is exact. Raises :class:`JetStreamNotFoundError` when the stream does not exist,
    :class:`JetStreamConfigError` when it has no mirror/sources or lacks a named one,
    :class:`JetStreamPermissionError` when a request is refused, and
    :class:`JetStreamDomainUnavailableError` when no JetStream answers for the stream's domain.
    """
    watch.target = api.target
    # The raw info: nats-py's parsed one drops each origin's external API prefix.
    info = await api.stream_info(watch.stream)
    if info is None:
        raise JetStreamNotFoundError(f"stream {watch.stream!r} does not exist in {watch.target}")
    statuses = watch.select(info)
    probes: dict[str, OriginProbe] = {}
    if watch.verify_origin != "off":

        async def probe(status: ReplicationStatus) -> None:
            prefix = status.api_prefix or api.prefix
            origin_api = JetStreamApi(nc, prefix, timeout=api.timeout, target=describe_prefix(prefix))
            probes[status.key] = await probe_origin(origin_api, status)

        await asyncio.gather(*(probe(s) for s in statuses))
    after = await api.stream_info(watch.stream)  # read after the probes: exact
    if after is None:
        raise JetStreamNotFoundError(f"stream {watch.stream!r} does not exist in {watch.target}")
    held: dict[str, HeldSeq] = {}
    for status in watch.select(after):
        found = probes.get(status.key)
        if found is not None and found.state == "ok":
            held[status.key] = await held_seq(api, after, status, found)
    return watch.judge(after, probes=probes, held=held)
