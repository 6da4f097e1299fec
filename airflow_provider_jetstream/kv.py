"""What nats-py's KV API lacks, in one place: buckets with mirrors/sources across domains, and
domain-aware puts, deletes and compare-and-set.

Buckets are built on the stream layer by the KV stream conventions
(:meth:`airflow_provider_jetstream.specs.KeyValueSpec.stream_spec`), so nats-py's
``js.key_value(bucket)`` reads them, mirrors and sourced buckets included.

Writes: nats-py publishes a put to ``$KV.<bucket>.<key>`` whatever the context's domain, so a put
"to domain leaf" from a client attached to the hub lands in the hub's bucket of that name, or
nowhere. nats.go addresses a KV in another domain by putting its API prefix in front:
``$JS.<domain>.API.$KV.<bucket>.<key>``, a subject every domain-enabled server maps to its own
``$KV.<bucket>.<key>``; and a mirror bucket's writes go to its origin,
``<origin api>.$KV.<origin bucket>.<key>``. This module does the same with nats-py's public
``JetStreamContext.publish``, and checks the ack names the expected stream and domain.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from airflow_provider_jetstream.api import WRONG_LAST_SEQUENCE, JetStreamApi, describe_prefix, domain_of
from airflow_provider_jetstream.exceptions import (
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamRefusalError,
)
from airflow_provider_jetstream.reconcile import ReconcileResult, reconcile_stream
from airflow_provider_jetstream.specs import KeyValueSpec, validate_bucket, validate_key
from airflow_provider_jetstream.specs.kv import KV_STREAM_PREFIX, kv_stream_name

log = logging.getLogger(__name__)

KV_OPERATION = "KV-Operation"
EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
ROLLUP = "Nats-Rollup"


class KeyValueError(JetStreamError):
    """A KV write was refused or landed somewhere unexpected."""


class KeyValueConflictError(KeyValueError, JetStreamRefusalError):
    """Compare-and-set failed: the key's latest revision is not the expected one (a refusal:
    the same put with the same expected revision would fail again)."""


@dataclass(frozen=True)
class WriteTarget:
    """Where a write to a bucket goes: the subject, and the stream (and domain) that must ack it."""

    subject: str
    stream: str
    domain: str | None
    via_origin: bool = False


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
            return WriteTarget(f"{external.rstrip('.')}.$KV.{origin}.{key}", mirror["name"], domain_of(external), True)
        pre = "" if prefix == "$JS.API" else f"{prefix}."
        return WriteTarget(f"{pre}$KV.{origin}.{key}", mirror["name"], domain_of(prefix), True)
    pre = "" if prefix == "$JS.API" else f"{prefix}."
    return WriteTarget(f"{pre}$KV.{bucket}.{key}", kv_stream_name(bucket), domain_of(prefix))


async def reconcile_bucket(api: JetStreamApi, spec: KeyValueSpec, **kwargs: Any) -> ReconcileResult:
    """Create or update a bucket (mirrors and sources across domains included) as its KV stream."""
    result = await reconcile_stream(api, spec.stream_spec(), kind="bucket", label=spec.bucket, **kwargs)
    result.name = spec.bucket
    return result


async def bucket_config(api: JetStreamApi, bucket: str) -> dict[str, Any]:
    validate_bucket(bucket, "bucket")
    info = await api.stream_info(kv_stream_name(bucket))
    if info is None:
        raise KeyValueError(f"bucket {bucket!r} does not exist in {api.target}")
    config = info.get("config") or {}
    if (config.get("max_msgs_per_subject") or 0) < 1:
        raise KeyValueError(f"stream {kv_stream_name(bucket)!r} in {api.target} is not a KV bucket")
    return config


async def _write(
    nc: Client,
    api: JetStreamApi,
    bucket: str,
    key: str,
    payload: bytes,
    headers: dict[str, str],
    expected_revision: int | None,
    timeout: float,
) -> tuple[int, WriteTarget]:
    validate_key(key, "key")
    config = await bucket_config(api, bucket)
    target = write_target(bucket, key, api.prefix, config)
    if expected_revision is not None:
        headers[EXPECTED_LAST_SUBJECT_SEQUENCE] = str(int(expected_revision))
    js = nc.jetstream(prefix=api.prefix, timeout=timeout)
    try:
        ack = await js.publish(target.subject, payload, headers=headers or None, timeout=timeout)
    except nats.js.errors.APIError as err:
        if err.err_code == WRONG_LAST_SEQUENCE:
            raise KeyValueConflictError(
                f"bucket {bucket!r} key {key!r} in {api.target}: compare-and-set failed, the latest revision is not "
                f"{expected_revision} ({err.description})"
            ) from None
        raise KeyValueError(f"bucket {bucket!r} key {key!r} in {api.target}: {err.description}") from None
    except (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError):
        raise JetStreamDomainUnavailableError(
            f"no stream took the write to {target.subject!r} for bucket {bucket!r} in {api.target}"
        ) from None
    if ack.stream != target.stream or (target.domain and ack.domain and ack.domain != target.domain):
        raise KeyValueError(
            f"write for bucket {bucket!r} in {api.target} was stored by stream {ack.stream!r} in domain "
            f"{ack.domain!r}, not {target.stream!r} in {describe_prefix(api.prefix)}"
        )
    return ack.seq, target


async def kv_put(
    nc: Client,
    api: JetStreamApi,
    bucket: str,
    key: str,
    value: bytes,
    *,
    expected_revision: int | None = None,
    timeout: float = 5.0,
) -> int:
    """Put ``value`` under ``key`` in the bucket of ``api``'s domain; the new revision.

    ``expected_revision`` makes it a compare-and-set: the put is stored only if the key's latest
    revision is that one (0: only if the key does not exist yet).
    """
    revision, target = await _write(nc, api, bucket, key, value, {}, expected_revision, timeout)
    log.info("put %s (bucket %r in %s) -> revision %d", target.subject, bucket, api.target, revision)
    return revision


async def kv_delete(
    nc: Client,
    api: JetStreamApi,
    bucket: str,
    key: str,
    *,
    purge: bool = False,
    expected_revision: int | None = None,
    timeout: float = 5.0,
) -> int:
    """Delete ``key`` (a delete marker; ``purge`` also drops its history); the marker's revision."""
    headers = {KV_OPERATION: "PURGE", ROLLUP: "sub"} if purge else {KV_OPERATION: "DEL"}
    revision, target = await _write(nc, api, bucket, key, b"", headers, expected_revision, timeout)
    log.info(
        "%s %s (bucket %r in %s) -> revision %d",
        "purged" if purge else "deleted",
        target.subject,
        bucket,
        api.target,
        revision,
    )
    return revision


def encode_value(value: Any) -> bytes:
    """Bytes for a KV value or message: bytes as is, str as UTF-8, anything else as JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":"), default=str).encode()
