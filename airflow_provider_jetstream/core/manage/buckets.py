"""What nats-py's KV API lacks, in one place: buckets with mirrors/sources across domains,
mirror-aware reads, and domain-aware puts, deletes and compare-and-set.

Buckets are built on the stream layer by the KV conventions
(:meth:`airflow_provider_jetstream.core.manage.specs.KeyValueSpec.stream_spec`), exactly as nats.go and nats.js
build them. A mirror bucket keeps its origin's subjects (``$KV.<origin>.<key>``, ADR-8: no subject
transform, ``mirror_direct``): nats.go and nats.js read it under the origin's prefix when the origin is
in another domain or account. nats-py 2.16's ``js.key_value(b)`` does not know that layout (it reads
``$KV.<b>.``); this module does, and also the older layout this provider made before (a transform
``$KV.<origin>.> -> $KV.<b>.>``), taking the layout from the bucket's stream config
(:func:`bucket_layout`). Gets (:func:`kv_get`) ask the bucket's stream for the key's last message
through the JetStream API under that layout's key prefix; the KV trigger's watch pulls the same
subject (:func:`airflow_provider_jetstream.core.status.kv_key.watch_key`).

Writes: nats-py publishes a put to ``$KV.<bucket>.<key>`` whatever the context's domain, so a put
"to domain leaf" from a client attached to the hub lands in the hub's bucket of that name, or
nowhere. nats.go addresses a KV in another domain by putting its API prefix in front:
``$JS.<domain>.API.$KV.<bucket>.<key>``, a subject every domain-enabled server maps to its own
``$KV.<bucket>.<key>``; and a mirror bucket's writes go to its origin,
``<origin api>.$KV.<origin bucket>.<key>`` (either layout). This module does the same with nats-py's
public request API, and checks the ack names the expected stream and domain.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.api import WRONG_LAST_SEQUENCE, JetStreamApi
from airflow_provider_jetstream.core.arguments.names import (
    bucket_name,
    domain_of,
    kv_key,
)
from airflow_provider_jetstream.core.errors import (
    JetStreamDomainUnavailableError,
    JetStreamNotFoundError,
    JetStreamPublishError,
    KeyValueConflictError,
    KeyValueError,
)
from airflow_provider_jetstream.core.manage.reconcile import ReconcileResult, reconcile_stream
from airflow_provider_jetstream.core.manage.specs import KeyValueSpec, describe_source
from airflow_provider_jetstream.core.manage.specs.kv import KV_STREAM_PREFIX, SPEC_NAMES, kv_stream_name, kv_subjects
from airflow_provider_jetstream.core.protocol import (
    EXPECTED_LAST_SUBJECT_SEQUENCE_HEADER,
    KV_OPERATION,
    MSG_ID_HEADER,
    ROLLUP_HEADER,
    headers_from_api,
)
from airflow_provider_jetstream.core.resend import retry_failover

log = logging.getLogger(__name__)

#: The ``KV-Operation`` of a delete and a purge marker: the key holds no value.
REMOVED = ("DEL", "PURGE")


@dataclass(frozen=True)
class WriteTarget:
    """Where a write to a bucket goes: the subject, and the stream (and domain) that must ack it."""

    subject: str
    stream: str
    domain: str | None


def write_target(bucket: str, key: str, api_prefix: str, config: dict[str, Any] | None = None) -> WriteTarget:
    """The subject for a write to ``bucket`` reached through ``api_prefix`` (as nats.go builds it).

    ``config`` is the bucket stream's config: a mirror bucket takes no writes, so they go to its
    origin (through the origin's external API when it has one).
    """
    prefix = api_prefix.rstrip(".")
    mirror = (config or {}).get("mirror")
    if mirror:
        origin = mirror["name"].removeprefix(KV_STREAM_PREFIX)
        external = (mirror.get("external") or {}).get("api")
        if external:
            return WriteTarget(f"{external.rstrip('.')}.$KV.{origin}.{key}", mirror["name"], domain_of(external))
        pre = "" if prefix == "$JS.API" else f"{prefix}."
        return WriteTarget(f"{pre}$KV.{origin}.{key}", mirror["name"], domain_of(prefix))
    pre = "" if prefix == "$JS.API" else f"{prefix}."
    return WriteTarget(f"{pre}$KV.{bucket}.{key}", kv_stream_name(bucket), domain_of(prefix))


@dataclass(frozen=True)
class BucketLayout:
    """Where a bucket's keys are stored in its stream, read from the stream's config.

    ``key_prefix`` starts every key's subject in the bucket's stream: ``$KV.<bucket>.`` for a
    bucket with subjects, ``$KV.<origin>.`` for a mirror made as nats.go and nats.js make it
    (``origin`` is the mirrored bucket), ``$KV.<bucket>.`` again for a ``legacy_mirror``: one this
    provider made before it followed the official layout (a subject transform on the mirror).
    """

    bucket: str
    stream: str
    key_prefix: str
    origin: str | None = None
    legacy_mirror: bool = False


def key_of(subject: str) -> str:
    """The key in a KV subject ``$KV.<name>.<key>``, whichever name it carries (a mirror made as nats.go
    makes it stores its origin's)."""
    return subject.split(".", 2)[2]


def bucket_layout(bucket: str, config: Mapping[str, Any]) -> BucketLayout:
    """The layout of ``bucket`` from its stream's config (the JSON API form)."""
    stream = config.get("name") or kv_stream_name(bucket)
    mirror = config.get("mirror")
    if not mirror:
        return BucketLayout(bucket, stream, f"$KV.{bucket}.")
    origin = str(mirror.get("name") or "").removeprefix(KV_STREAM_PREFIX)
    transforms = mirror.get("subject_transforms") or []
    if not transforms:
        return BucketLayout(bucket, stream, f"$KV.{origin}.", origin)
    for transform in transforms:
        dest = transform.get("dest") or ""
        if transform.get("src") == kv_subjects(origin) and dest.startswith("$KV.") and dest.endswith(".>"):
            return BucketLayout(bucket, stream, dest[:-1], origin, legacy_mirror=True)
    raise KeyValueError(
        f"bucket {bucket!r} mirrors {origin!r} through subject transforms "
        f"{[(t.get('src'), t.get('dest')) for t in transforms]}: no KV client can tell where its keys are"
    )


@dataclass(frozen=True)
class KvEntry:
    """The latest value of a key: its bytes, revision (the stream sequence that stored it) and when it
    was stored (RFC 3339, as the server says)."""

    bucket: str
    key: str
    value: bytes
    revision: int
    created: str | None = None
    #: None for a value; ``DEL`` or ``PURGE`` for a delete or purge marker (only a watch sees those).
    operation: str | None = None


async def kv_get(api: JetStreamApi, bucket: str, key: str) -> KvEntry | None:
    """The latest value of ``key`` in ``bucket`` of ``api``'s domain, mirror buckets of other domains
    included; None when the key holds none (never put, deleted or purged).
    :class:`JetStreamNotFoundError` naming the target if the bucket does not exist."""
    kv_key(key, "key")
    layout = await bucket_layout_of(api, bucket)
    message = await api.last_msg(layout.stream, layout.key_prefix + key)
    if message is None:
        return None
    operation = (headers_from_api(message).get(KV_OPERATION) or ["PUT"])[-1].upper()
    if operation in REMOVED:
        return None
    value = base64.b64decode(message.get("data") or "")
    return KvEntry(bucket, key, value, int(message["seq"]), message.get("time"))


def _mirror_spec(wire: Mapping[str, Any]) -> dict[str, Any]:
    """A KV mirror in the operator's spec form, from its API form."""
    out: dict[str, Any] = {"bucket": wire.get("name")}
    external = wire.get("external") or {}
    if external.get("api"):
        domain = domain_of(external["api"])
        out.update({"domain": domain} if domain else {"api_prefix": external["api"]})
    if external.get("deliver"):
        out["deliver_prefix"] = external["deliver"]
    for key, wire_key in (("start_seq", "opt_start_seq"), ("start_time", "opt_start_time")):
        if wire.get(wire_key):
            out[key] = wire[wire_key]
    return out


def legacy_mirror_advice(spec: KeyValueSpec, target: str, config: Mapping[str, Any]) -> str | None:
    """The migration recipe for a mirror bucket made in the older layout, or None if it is not one."""
    try:
        layout = bucket_layout(spec.bucket, config)
    except KeyValueError:
        return None
    if not layout.legacy_mirror:
        return None
    bucket, stream, origin = spec.bucket, layout.stream, layout.origin
    wanted = spec.values.get("mirror") or {}
    where = describe_source({**wanted, "name": wanted.get("name", origin)})
    return (
        f"bucket {bucket!r} is a mirror made by an older release of this provider: it stores the keys of "
        f"{origin!r} under $KV.{bucket}.> (a subject transform), where nats.go and nats.js do not look (they "
        f"read a mirror of another domain's bucket under $KV.{origin}.>, as this provider now creates it). A "
        f"mirror's configuration cannot be changed in place. This provider's own reads, sensors and triggers "
        f"still read the old layout. To migrate, either\n"
        f"  (a) run this operator with if_exists='recreate': it deletes the stream {stream!r} in {target} (its "
        f"consumers and watches too) and creates the mirror again; the new mirror copies again everything the "
        f"origin {where} still holds, with the same revisions, so what only the old mirror holds (revisions "
        f"beyond the origin's history or past its ttl) is lost, and the bucket stays empty until the origin's "
        f"domain is reachable; or\n"
        f"  (b) create a mirror under a new name with this operator, e.g. "
        f"bucket={{'bucket': '{bucket}-v2', 'mirror': {_mirror_spec(wanted)!r}}} (and this spec's other "
        f"settings), move readers to it once it has caught up "
        f"(JetStreamReplicationLagSensor), then delete the old one with "
        f"JetStreamDeleteStreamOperator(name={stream!r}) in {target}"
    )


async def reconcile_bucket(api: JetStreamApi, spec: KeyValueSpec, **kwargs: Any) -> ReconcileResult:
    """Create or update a bucket (mirrors and sources across domains included) as its KV stream.

    ``kwargs`` are :func:`reconcile_stream`'s. An existing bucket is compared and changed only in the
    stream fields of the bucket fields the spec names (``STREAM_FIELDS`` of
    :mod:`airflow_provider_jetstream.core.manage.specs.kv`):
    ``{"bucket": "cfg"}`` leaves a history of 5 alone, and a lower ``history``, ``max_bytes`` or
    ``ttl`` is refused unless ``allow_data_loss=True``.

    A mirror bucket made by this provider's older releases (see :class:`BucketLayout`) cannot be
    changed into the official layout in place: the error (or, with ``if_exists='recreate'``, the
    result's notes) spells out how to migrate it and what happens to its data.
    """
    result = await reconcile_stream(
        api,
        spec.stream_spec(),
        kind="bucket",
        label=spec.bucket,
        replace_advice=lambda config: legacy_mirror_advice(spec, api.target, config),
        spec_names=SPEC_NAMES,
        **kwargs,
    )
    result.name = spec.bucket
    return result


async def bucket_layout_of(api: JetStreamApi, bucket: str) -> BucketLayout:
    """Where ``bucket``'s keys are stored in ``api``'s domain (read from its stream);
    :class:`JetStreamNotFoundError` naming the target if there is no such bucket."""
    bucket_name(bucket, "bucket")
    config = await _stream_config(api, bucket)
    if config is None:
        raise JetStreamNotFoundError(f"KV bucket {bucket!r} does not exist in {api.target}")
    return bucket_layout(bucket, config)


async def _stream_config(api: JetStreamApi, bucket: str) -> dict[str, Any] | None:
    """The config of the bucket's stream ``KV_<bucket>`` (None: there is none)."""
    info = await api.stream_info(kv_stream_name(bucket))
    return None if info is None else (info.get("config") or {})


async def bucket_config(api: JetStreamApi, bucket: str) -> dict[str, Any]:
    """The config of the bucket's stream, for a write: :class:`KeyValueError` if there is no such bucket."""
    bucket_name(bucket, "bucket")
    config = await _stream_config(api, bucket)
    if config is None:
        raise KeyValueError(f"bucket {bucket!r} does not exist in {api.target}")
    if (config.get("max_msgs_per_subject") or 0) < 1:
        raise KeyValueError(f"stream {kv_stream_name(bucket)!r} in {api.target} is not a KV bucket")
    return config


async def _write(
    api: JetStreamApi,
    bucket: str,
    key: str,
    payload: bytes,
    headers: dict[str, str],
    expected_revision: int | None,
) -> tuple[int, WriteTarget]:
    """Store one write, exactly once: it carries a ``Nats-Msg-Id`` of its own and is asked again across a
    failover (the one resend rule, :func:`~airflow_provider_jetstream.core.resend.retry_failover`, within
    ``api.failover`` seconds). An ask whose answer was lost may have been stored: the server acks its copy
    as a duplicate, or (a compare-and-set asked again after its revision moved) the key's latest entry
    carries that id: either way the write's revision is returned, never a second revision nor a conflict."""
    kv_key(key, "key")
    config = await bucket_config(api, bucket)
    target = write_target(bucket, key, api.prefix, config)
    if expected_revision is not None:
        headers[EXPECTED_LAST_SUBJECT_SEQUENCE_HEADER] = str(int(expected_revision))
    headers[MSG_ID_HEADER] = msg_id = f"kv-{uuid.uuid4().hex}"
    where = f"bucket {bucket!r} key {key!r} in {api.target}"
    unanswered = False  # an earlier ask got no answer: it may have been stored

    async def ask() -> int:
        nonlocal unanswered
        try:
            return await _ask_once(api, target, payload, headers, where, expected_revision)
        except KeyValueConflictError:
            if unanswered:
                stored = await _stored_by(api, bucket, key, msg_id)
                if stored is not None:
                    return stored
            raise
        except JetStreamDomainUnavailableError:
            unanswered = True
            raise

    revision = await retry_failover(ask, api.nc, within=api.failover, what=f"write to {where}", prefix=api.prefix)
    return revision, target


async def _ask_once(
    api: JetStreamApi,
    target: WriteTarget,
    payload: bytes,
    headers: dict[str, str],
    where: str,
    expected_revision: int | None,
) -> int:
    """One ask of a write: its revision; the provider's error for every answer that is not an ack."""
    try:
        ack = await api.store(
            target.subject,
            payload,
            headers,
            stream=target.stream,
            where=where,
            domain=target.domain or "",
            misplaced=KeyValueError,
        )
    except JetStreamPublishError as err:
        if err.err_code == WRONG_LAST_SEQUENCE:
            raise KeyValueConflictError(
                f"{where}: compare-and-set failed, the latest revision is not {expected_revision} ({err.description})"
            ) from None
        raise KeyValueError(f"{where}: {err.description}") from None
    return ack.seq


async def _stored_by(api: JetStreamApi, bucket: str, key: str, msg_id: str) -> int | None:
    """The revision of ``key``'s latest entry if that entry is the write ``msg_id`` (None otherwise)."""
    layout = await bucket_layout_of(api, bucket)
    message = await api.last_msg(layout.stream, layout.key_prefix + key)
    if message is not None and msg_id in (headers_from_api(message).get(MSG_ID_HEADER) or []):
        return int(message["seq"])
    return None


async def kv_put(
    api: JetStreamApi, bucket: str, key: str, value: bytes, *, expected_revision: int | None = None
) -> int:
    """Put ``value`` under ``key`` in the bucket of ``api``'s domain; the new revision.

    ``expected_revision`` makes it a compare-and-set: the put is stored only if the key's latest
    revision is that one (0: only if the key does not exist yet). Each request waits ``api.timeout``;
    across a failover (a stream leader elected) the put is asked again, and stored once.
    """
    revision, target = await _write(api, bucket, key, value, {}, expected_revision)
    log.info("put %s (bucket %r in %s) -> revision %d", target.subject, bucket, api.target, revision)
    return revision


async def kv_delete(
    api: JetStreamApi, bucket: str, key: str, *, purge: bool = False, expected_revision: int | None = None
) -> int:
    """Delete ``key`` (a delete marker; ``purge`` also drops its history); the marker's revision."""
    headers = {KV_OPERATION: "PURGE", ROLLUP_HEADER: "sub"} if purge else {KV_OPERATION: "DEL"}
    revision, target = await _write(api, bucket, key, b"", headers, expected_revision)
    log.info(
        "%s %s (bucket %r in %s) -> revision %d",
        "purged" if purge else "deleted",
        target.subject,
        bucket,
        api.target,
        revision,
    )
    return revision
