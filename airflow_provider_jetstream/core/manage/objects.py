"""Object stores in any domain: put, get, info, list and delete objects, laid out as ADR-20 lays them out.

nats-py's ``js.object_store()`` writes ``$O.<bucket>...`` whatever its context's domain and reads chunks
through a push consumer of the connection's own domain; this module speaks to one domain (or imported
prefix) through the one API speaker (:class:`~airflow_provider_jetstream.core.api.JetStreamApi`), with the
messages :mod:`~airflow_provider_jetstream.core.manage.object_messages` builds and reads:

- writes are published on ``$O.b...`` as every client publishes them (the server maps no domain prefix
  for object subjects, unlike KV's ``$JS.<domain>.API.$KV.``): they reach the bucket's stream wherever it
  listens in the connected account (a leaf's, through the hub), each with a ``Nats-Msg-Id``, asked again
  across a failover (:func:`~airflow_provider_jetstream.core.resend.retry_failover`), and each ack checked to
  come from ``OBJ_b`` in the target domain; before the first chunk the double-store guard's store probe
  refuses the put if a bucket of that name in another reachable domain would store it too, and a meta subject
  too long to send is refused; the meta message is written last, so a reader never sees an object whose chunks
  are not all stored, and the replaced object's chunks are purged after it; a put that fails or is cancelled
  midway purges the chunks it stored (``$O.b.C.<nuid>``), as nats.go does;
- reads ask the stream for one message at a time (``STREAM.MSG.GET`` with ``next_by_subj``): one chunk in
  memory at a time whatever the object's size, through any domain; the size and SHA-256 digest are
  verified before the destination file is replaced (a temporary file beside it, synced, renamed when verified);
- a mirror bucket in the hub (``OBJ_<b>`` mirroring a leaf's ``OBJ_<origin>``, its subjects transformed to
  ``$O.<b>.>``, :mod:`~airflow_provider_jetstream.core.manage.specs.objects`) is read by its own name, like
  any bucket; it takes no writes (they are refused, naming the origin). Watching a bucket is an ordered
  consumer's (:func:`~airflow_provider_jetstream.core.consume.watch.watch_objects`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from nats.nuid import NUID

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.arguments.names import object_bucket_name, object_name
from airflow_provider_jetstream.core.arguments.paths import destination_file, readable_file, refuse_special
from airflow_provider_jetstream.core.errors import (
    JetStreamConfigError,
    JetStreamNotFoundError,
    JetStreamPublishError,
    ObjectDigestError,
    ObjectStoreError,
)
from airflow_provider_jetstream.core.manage.double_store import refuse_unknown_stores
from airflow_provider_jetstream.core.manage.object_messages import (
    CHUNK_SIZE,
    ObjectInfo,
    chunk_size_for,
    chunk_subject,
    format_digest,
    meta_message,
    meta_subject,
    parse_digest,
    put_meta_subject,
)
from airflow_provider_jetstream.core.manage.reconcile import ReconcileResult, reconcile_stream
from airflow_provider_jetstream.core.manage.specs.objects import (
    OBJ_STREAM_PREFIX,
    SPEC_NAMES,
    ObjectStoreSpec,
    object_stream_name,
    object_subjects,
)
from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER, ROLLUP_HEADER
from airflow_provider_jetstream.core.resend import retry_failover

log = logging.getLogger(__name__)

_NUID = NUID()
T = TypeVar("T")


@dataclass(frozen=True)
class ObjectLayout:
    """Where a bucket's objects are in ``api``'s domain: its ``stream`` and the bucket name its subjects
    carry (``subjects_of``: the bucket's own, or a mirror's origin when the mirror has no transform);
    ``mirror`` names the origin of a mirror bucket (which takes no writes), else None."""

    bucket: str
    stream: str
    subjects_of: str
    mirror: str | None = None


def object_layout(bucket: str, config: Mapping[str, Any]) -> ObjectLayout:
    """The layout of ``bucket`` from its stream's config (the JSON API form)."""
    stream = config.get("name") or object_stream_name(bucket)
    mirror = config.get("mirror")
    if not mirror:
        return ObjectLayout(bucket, stream, bucket)
    origin = str(mirror.get("name") or "").removeprefix(OBJ_STREAM_PREFIX)
    external = (mirror.get("external") or {}).get("api")
    where = f"{origin!r} in {describe_prefix(external)}" if external else repr(origin)
    for transform in mirror.get("subject_transforms") or []:
        dest = transform.get("dest") or ""
        if transform.get("src") == f"$O.{origin}.>" and dest.startswith("$O.") and dest.endswith(".>"):
            return ObjectLayout(bucket, stream, dest[3:-2], where)
    return ObjectLayout(bucket, stream, origin, where)


async def layout_of(api: JetStreamApi, bucket: str) -> ObjectLayout:
    """The layout of ``bucket`` in ``api``'s domain; :class:`JetStreamNotFoundError` naming the target if there is
    no such bucket, :class:`JetStreamConfigError` if ``OBJ_<bucket>`` is not an object store."""
    object_bucket_name(bucket, "bucket")
    info = await api.stream_info(object_stream_name(bucket))
    if info is None:
        raise JetStreamNotFoundError(f"object store bucket {bucket!r} does not exist in {api.target}: create it first")
    config = info.get("config") or {}
    layout = object_layout(bucket, config)
    if not config.get("mirror") and f"$O.{bucket}.M.>" not in (config.get("subjects") or []):
        raise JetStreamConfigError(
            f"stream {layout.stream!r} in {api.target} is not an object store bucket (no subject $O.{bucket}.M.>)"
        )
    return layout


async def reconcile_object_store(api: JetStreamApi, spec: ObjectStoreSpec, **kwargs: Any) -> ReconcileResult:
    """Create or update an object store bucket (mirrors and sources across domains included) as its
    ``OBJ_<bucket>`` stream, on the one reconcile ladder: ``kwargs`` are
    :func:`~airflow_provider_jetstream.core.manage.reconcile.reconcile_stream`'s. An existing bucket is compared
    and changed only in the stream fields of the bucket fields the spec names; a lower ``max_bytes`` or
    ``ttl`` is refused unless ``allow_data_loss=True``; a changed mirror needs ``if_exists='recreate'``."""
    result = await reconcile_stream(
        api, spec.stream_spec(), kind="object store", label=spec.bucket, spec_names=SPEC_NAMES, **kwargs
    )
    result.name = spec.bucket
    return result


async def object_info(api: JetStreamApi, bucket: str, name: str, *, show_deleted: bool = False) -> ObjectInfo | None:
    """The object ``name`` of ``bucket`` in ``api``'s domain (mirror buckets included); None when there is none
    (never put, or deleted unless ``show_deleted``). :class:`JetStreamNotFoundError` if the bucket does not exist."""
    object_name(name, "name")
    layout = await layout_of(api, bucket)
    return await _info(api, layout, name, show_deleted)


async def _info(api: JetStreamApi, layout: ObjectLayout, name: str, show_deleted: bool) -> ObjectInfo | None:
    message = await api.last_msg(layout.stream, meta_subject(layout.subjects_of, name))
    if message is None:
        return None
    info = ObjectInfo.from_message(message, layout.bucket)
    return None if info.deleted and not show_deleted else info


async def list_objects(api: JetStreamApi, bucket: str, *, show_deleted: bool = False) -> list[ObjectInfo]:
    """Every object of ``bucket`` (deleted ones too with ``show_deleted``), in the order of their last change;
    read one meta message per request."""
    layout = await layout_of(api, bucket)
    return [info async for info in _metas(api, layout, 1) if show_deleted or not info.deleted]


async def _metas(api: JetStreamApi, layout: ObjectLayout, seq: int) -> AsyncIterator[ObjectInfo]:
    """The meta messages of the bucket stored at ``seq`` or after, as they are now."""
    every = f"$O.{layout.subjects_of}.M.>"
    while True:
        message = await api.next_msg(layout.stream, seq, every)
        if message is None:
            return
        seq = int(message["seq"]) + 1
        yield ObjectInfo.from_message(message, layout.bucket)


async def _store(api: JetStreamApi, layout: ObjectLayout, subject: str, payload: bytes, headers: dict[str, str]) -> int:
    """Store one message of the bucket through its domain, once (its own ``Nats-Msg-Id``, asked again across a
    failover); its stream sequence. The ack must name the bucket's stream in the target domain."""
    headers = {**headers, MSG_ID_HEADER: f"obj-{_NUID.next().decode()}"}
    target = subject
    where = f"bucket {layout.bucket!r} in {api.target}"

    async def ask() -> int:
        try:
            ack = await api.store(
                target, payload, headers, stream=layout.stream, where=where, misplaced=ObjectStoreError
            )
        except JetStreamPublishError as err:
            raise ObjectStoreError(f"{where}: {err.description}") from None
        return ack.seq

    return await retry_failover(ask, api.nc, within=api.failover, what=f"write to {where}", prefix=api.prefix)


def _writable(layout: ObjectLayout, api: JetStreamApi) -> None:
    if layout.mirror:
        raise JetStreamConfigError(
            f"object store bucket {layout.bucket!r} in {api.target} is a mirror of {layout.mirror}: it takes no "
            "writes; write to its origin bucket in the origin's domain"
        )


async def _purge_chunks(api: JetStreamApi, layout: ObjectLayout, nuid: str) -> None:
    await api.purge_stream(layout.stream, {"filter": chunk_subject(layout.subjects_of, nuid)})


async def _settled(write: Awaitable[T]) -> T:
    """``write``'s result, awaited to its end even when the put is cancelled meanwhile: a message in flight is
    stored (or refused) before a failed put's chunks are purged, never after the purge. A write that was stored
    returns, and the cancellation is passed on at the next await; one that failed raises the cancellation."""
    task = asyncio.ensure_future(write)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])  # bounded by the request timeout; a second cancellation ends it
        if task.cancelled() or task.exception() is not None:
            raise
        current = asyncio.current_task()
        if current is not None:
            current.cancel()
        return task.result()


async def _purge_failed_put(api: JetStreamApi, layout: ObjectLayout, nuid: str) -> None:
    """Purge the chunks of a put that failed or was cancelled midway, as nats.go does; a second cancellation
    does not stop it (shielded). Nothing stays referenced by a meta, so a failure is only logged, naming the
    subject to purge by hand."""
    try:
        await asyncio.shield(_purge_chunks(api, layout, nuid))
    except (Exception, asyncio.CancelledError) as err:
        log.warning(
            "bucket %r in %s: the chunks of a failed put were not purged (purge %r by hand): %s",
            layout.bucket,
            api.target,
            chunk_subject(layout.subjects_of, nuid),
            err,
        )


async def put_object(
    api: JetStreamApi,
    bucket: str,
    name: str,
    source: str | os.PathLike[str],
    *,
    description: str | None = None,
    headers: Mapping[str, str] | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> ObjectInfo:
    """Store the file ``source`` as the object ``name`` of ``bucket`` in ``api``'s domain, one chunk in memory at
    a time; returns its info (``revision`` the new meta's sequence). An existing object of that name is
    replaced: its chunks are purged once the new meta is stored. A write that fails or is cancelled midway purges
    the chunks it stored and raises; the old object stays as it was.

    :param description: the object's description. Default None.
    :param headers: headers recorded in the object's meta (name -> text). Default None.
    :param chunk_size: bytes per chunk, at most what a read gets back through the connected server
        (:func:`~airflow_provider_jetstream.core.manage.object_messages.chunk_size_for`). Default 128 KiB, as
        every client.
    """
    object_name(name, "name")
    path = readable_file(source, "local_path")
    layout = await layout_of(api, bucket)
    _writable(layout, api)
    meta_on = put_meta_subject(layout.subjects_of, name)
    # Before the first chunk: a bucket of this name in another reachable domain would store every write too.
    what = f"put to object store bucket {bucket!r}"
    await refuse_unknown_stores(api, subjects=object_subjects(layout.subjects_of), what=what)
    chunk_size = chunk_size_for(int(chunk_size), api.nc.max_payload)
    old = await _info(api, layout, name, show_deleted=True)
    nuid = _NUID.next().decode()
    subject = chunk_subject(layout.subjects_of, nuid)
    sha, size, chunks = hashlib.sha256(), 0, 0
    try:
        with path.open("rb") as file:
            while chunk := await asyncio.to_thread(file.read, chunk_size):
                sha.update(chunk)
                await _settled(_store(api, layout, subject, chunk, {}))
                size, chunks = size + len(chunk), chunks + 1
        digest = format_digest(sha.digest())
        payload = meta_message(
            layout.subjects_of,
            name,
            nuid,
            size,
            chunks,
            digest,
            options={"max_chunk_size": chunk_size},
            description=description,
            headers={key: [value] for key, value in (headers or {}).items()},
        )
        revision = await _settled(_store(api, layout, meta_on, payload, {ROLLUP_HEADER: "sub"}))
    except BaseException:
        await _purge_failed_put(api, layout, nuid)
        raise
    if old is not None and old.nuid and old.nuid != nuid:
        try:
            await _purge_chunks(api, layout, old.nuid)
        except Exception as err:  # the new object is stored: only the old chunks stay behind
            log.warning("bucket %r: the replaced chunks of %r were not purged: %s", bucket, name, err)
    info = await _info(api, layout, name, show_deleted=True)
    log.info("put object %r (%d bytes, %d chunks) in bucket %r of %s", name, size, chunks, bucket, api.target)
    return info or ObjectInfo(bucket, name, nuid, size, chunks, digest, revision)


async def read_object(api: JetStreamApi, bucket: str, name: str) -> tuple[ObjectInfo, AsyncIterator[bytes]]:
    """The object ``name`` of ``bucket``: its info, and its content chunk by chunk (one request, one chunk in
    memory at a time). The iterator raises :class:`ObjectDigestError` after the last chunk if the content does not
    have the recorded size and digest, :class:`ObjectStoreError` if chunks are missing (the object was replaced or
    deleted meanwhile). :class:`JetStreamNotFoundError` if there is no such object (or bucket)."""
    object_name(name, "name")
    layout = await layout_of(api, bucket)
    info = await _info(api, layout, name, show_deleted=False)
    if info is None:
        raise JetStreamNotFoundError(f"object {name!r} does not exist in bucket {bucket!r} of {api.target}")
    if info.link:
        raise JetStreamConfigError(f"object {name!r} of bucket {bucket!r} is a link to {info.link}: get that object")
    expected = parse_digest(info.digest) if info.size or info.digest else hashlib.sha256().digest()
    return info, _chunks(api, layout, info, expected)


async def _chunks(api: JetStreamApi, layout: ObjectLayout, info: ObjectInfo, expected: bytes) -> AsyncIterator[bytes]:
    subject = chunk_subject(layout.subjects_of, info.nuid)
    sha, size, seq = hashlib.sha256(), 0, 1
    for index in range(info.chunks):
        message = await api.next_msg(layout.stream, seq, subject)
        if message is None:
            raise ObjectStoreError(
                f"object {info.name!r} of bucket {info.bucket!r} in {api.target}: chunk {index + 1} of {info.chunks} "
                "is missing (the object was replaced or deleted while it was read, or its chunks were purged)"
            )
        seq = int(message["seq"]) + 1
        chunk = base64.b64decode(message.get("data") or "")
        sha.update(chunk)
        size += len(chunk)
        yield chunk
    if size != info.size or sha.digest() != expected:
        raise ObjectDigestError(
            f"object {info.name!r} of bucket {info.bucket!r} in {api.target} is corrupt: read {size} bytes with digest "
            f"{format_digest(sha.digest())}, its meta records {info.size} bytes with digest {info.digest}"
        )


async def get_object(api: JetStreamApi, bucket: str, name: str, destination: str | os.PathLike[str]) -> ObjectInfo:
    """Read the object ``name`` of ``bucket`` into the file ``destination`` (a directory, or a path ending in
    ``/``: ``<destination>/<last part of name>``, see
    :func:`~airflow_provider_jetstream.core.arguments.paths.destination_file`), one chunk in memory at a time;
    returns its info. The content goes to a temporary file beside the destination, synced and renamed to it only
    once its size and SHA-256 digest are verified: a failed get leaves the destination as it was."""
    target = destination_file(destination, name, "local_path")
    info, chunks = await read_object(api, bucket, name)
    handle, temporary = tempfile.mkstemp(prefix=".object-", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            async for chunk in chunks:
                await asyncio.to_thread(file.write, chunk)
            file.flush()
            await asyncio.to_thread(os.fsync, file.fileno())
        refuse_special(target, "local_path", destination)  # nothing special appeared there meanwhile
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    log.info(
        "got object %r (%d bytes, digest verified) of bucket %r in %s into %s",
        name,
        info.size,
        bucket,
        api.target,
        target,
    )
    return info


async def delete_object(api: JetStreamApi, bucket: str, name: str, *, missing_ok: bool = False) -> ObjectInfo | None:
    """Delete the object ``name`` of ``bucket`` as the official clients do: a meta marked ``deleted`` (size 0),
    then its chunks purged; returns the deleted object's info. With ``missing_ok``, None when there was no such
    object, else :class:`JetStreamNotFoundError`."""
    object_name(name, "name")
    layout = await layout_of(api, bucket)
    _writable(layout, api)
    info = await _info(api, layout, name, show_deleted=False)
    if info is None:
        if missing_ok:
            return None
        raise JetStreamNotFoundError(f"object {name!r} does not exist in bucket {bucket!r} of {api.target}")
    payload = meta_message(layout.subjects_of, name, info.nuid, 0, 0, "", deleted=True)
    await _store(api, layout, meta_subject(layout.subjects_of, name), payload, {ROLLUP_HEADER: "sub"})
    await _purge_chunks(api, layout, info.nuid)
    log.info("deleted object %r of bucket %r in %s", name, bucket, api.target)
    return info
