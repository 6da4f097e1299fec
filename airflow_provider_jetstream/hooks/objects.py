"""``JetStreamObjectStoreHook``: the object store role: buckets and objects in any domain (sync and async).

Declaring buckets (mirrors and sources across domains included) on the one reconcile ladder, and putting,
getting, listing, deleting, checking and watching objects through
:mod:`airflow_provider_jetstream.core.manage.objects` (files streamed one chunk at a time, SHA-256 digests
verified). Usable alone, or as part of :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.core.arguments.paths import destination_file, readable_file
from airflow_provider_jetstream.core.consume.watch import watch_objects
from airflow_provider_jetstream.core.manage.object_messages import ObjectInfo
from airflow_provider_jetstream.core.manage.objects import (
    delete_object,
    get_object,
    list_objects,
    object_info,
    put_object,
    reconcile_object_store,
)
from airflow_provider_jetstream.core.manage.specs.objects import ObjectStoreSpec, object_subjects
from airflow_provider_jetstream.core.signatures.objects import (
    DELETE_OBJECT,
    ENSURE_OBJECT_STORE,
    GET_OBJECT,
    LIST_OBJECTS,
    OBJECT_CHECK,
    OBJECT_INFO,
    PUT_OBJECT,
    WATCH_OBJECTS,
)
from airflow_provider_jetstream.core.signatures.shared import LOG, REQUEST
from airflow_provider_jetstream.core.status.object_check import ObjectCheck, check_object
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.methods import Declaring, Request, blocking, checked

if TYPE_CHECKING:
    from typing_extensions import Unpack


class JetStreamObjectStoreHook(JetStreamBaseHook):
    """Object store buckets and objects as the object store operators and sensor use them (see
    :class:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook` for the connection arguments)."""

    @checked(ENSURE_OBJECT_STORE + REQUEST + LOG)
    async def aensure_object_store(
        self,
        bucket: ObjectStoreSpec | dict[str, Any] | str,
        **declaring: Unpack[Declaring],
    ) -> dict[str, Any]:
        """Create or update an object store bucket, the stream ``OBJ_<bucket>`` laid out as nats.go and nats.js
        make it (a mirror or source of another domain's bucket included), as
        ``JetStreamCreateObjectStoreOperator`` does; returns its XCom dict (``action``, ``changes``, ...).

        :param bucket: the bucket to declare: its name, an :class:`ObjectStoreSpec` or its dict: ``{"bucket":
            "files", "ttl": "7d", "max_bytes": -1, "storage": "file", "replicas": 1, "compression": True}``, or a copy:
            ``{"bucket": "files-leaf", "mirror": {"bucket": "files", "domain": "leaf"}}``.
        :param if_exists: ``"update"`` (default) | ``"skip"`` | ``"fail"`` | ``"recreate"`` (only this deletes).
        :param dry_run: plan only, change nothing. Default False.
        :param prune_sources: remove sources the spec does not name. Default False: kept.
        :param allow_data_loss: apply in place a lower ``max_bytes`` or ``ttl`` (or one set where there was
            none), or fewer ``replicas``. Default False: :class:`ReconcileError` naming each ``old -> new``.
        :param allow_double_store: create even if a bucket of this name takes writes in another connected
            domain of this account, or a domain cannot be checked. Default False.
        :param peer_domains: more domains for that check, besides the connection's own.
        :param allow_unreachable_origins: declare a mirror or source of an origin domain that does not answer now and
            was never seen (no copy of it in the target, not in ``peer_domains``). Default False:
            :class:`UnknownOriginDomainError` (a wrong domain name?); a known domain that does not answer is declared
            with a warning in the result's ``notes``.
        """
        spec: ObjectStoreSpec = bucket  # type: ignore[assignment]  # checked: an ObjectStoreSpec
        stream = spec.stream_spec()
        subjects = [] if stream.is_mirror else object_subjects(spec.bucket)
        what = f"object store {spec.bucket!r}"
        return await self._reconcile(reconcile_object_store, spec, stream, subjects, what, declaring)

    ensure_object_store = blocking(aensure_object_store)

    @checked(PUT_OBJECT + REQUEST)
    async def aput_object(
        self,
        bucket: str,
        object_name: str,
        local_path: str,
        *,
        description: str | None = None,
        headers: dict[str, str] | None = None,
        chunk_size: int = 128 * 1024,
        **request: Unpack[Request],
    ) -> ObjectInfo:
        """Store the file ``local_path`` as object ``object_name`` of ``bucket`` in the target domain, one chunk in
        memory at a time (replacing an object of that name once the new one is stored); its
        :class:`ObjectInfo` (``size``, ``chunks``, ``digest``, ``revision``). A mirror bucket takes no writes. A
        put that fails or is cancelled midway purges the chunks it stored.

        :param local_path: the file to store: a regular file (checked before connecting).
        :param description: the object's description. Default None.
        :param headers: headers recorded in the object's meta. Default None.
        :param chunk_size: bytes per chunk, 1 KiB to 8 MiB, at most what a read gets back through the connected
            server (3/4 of its ``max_payload`` less 1 KiB). Default 128 KiB.
        """
        source = readable_file(local_path, "local_path")
        async with self.aapi(**request) as api:
            return await put_object(
                api, bucket, object_name, source, description=description, headers=headers, chunk_size=chunk_size
            )

    put_object = blocking(aput_object)

    @checked(GET_OBJECT + REQUEST)
    async def aget_object(
        self,
        bucket: str,
        object_name: str,
        local_path: str,
        **request: Unpack[Request],
    ) -> ObjectInfo:
        """Write object ``object_name`` of ``bucket`` (a mirror of another domain's bucket included) to the file
        ``local_path``, one chunk in memory at a time; the file appears only once its size and SHA-256 digest
        are verified (:class:`ObjectDigestError` otherwise). :class:`JetStreamNotFoundError` if there is no
        such object.

        :param local_path: the file to write; a directory (or a path ending in ``/``) takes the object's last
            name part. Refused before connecting: a missing directory, a device, FIFO, socket or symbolic link.
        """
        destination = destination_file(local_path, object_name, "local_path")
        async with self.aapi(**request) as api:
            return await get_object(api, bucket, object_name, destination)

    get_object = blocking(aget_object)

    @checked(OBJECT_INFO + REQUEST)
    async def aobject_info(
        self,
        bucket: str,
        object_name: str,
        *,
        show_deleted: bool = False,
        **request: Unpack[Request],
    ) -> ObjectInfo | None:
        """The :class:`ObjectInfo` of object ``object_name`` of ``bucket``; None when there is none (or it is deleted,
        unless ``show_deleted``). :class:`JetStreamNotFoundError` if the bucket does not exist."""
        async with self.aapi(**request) as api:
            return await object_info(api, bucket, object_name, show_deleted=show_deleted)

    object_info = blocking(aobject_info)

    @checked(LIST_OBJECTS + REQUEST)
    async def alist_objects(
        self,
        bucket: str,
        *,
        show_deleted: bool = False,
        **request: Unpack[Request],
    ) -> list[ObjectInfo]:
        """Every object of ``bucket`` (deleted ones too with ``show_deleted``), in the order of their last change."""
        async with self.aapi(**request) as api:
            return await list_objects(api, bucket, show_deleted=show_deleted)

    list_objects = blocking(alist_objects)

    @checked(DELETE_OBJECT + REQUEST)
    async def adelete_object(
        self,
        bucket: str,
        object_name: str,
        *,
        ignore_missing: bool = False,
        **request: Unpack[Request],
    ) -> ObjectInfo | None:
        """Delete object ``object_name`` of ``bucket`` (a deleted meta, then its chunks purged); the deleted object's
        info. A missing object is :class:`JetStreamNotFoundError`, or None with ``ignore_missing``."""
        async with self.aapi(**request) as api:
            return await delete_object(api, bucket, object_name, missing_ok=ignore_missing)

    delete_object = blocking(adelete_object)

    @checked(OBJECT_CHECK + REQUEST)
    async def acheck_object(
        self,
        bucket: str,
        object_name: str,
        *,
        after_revision: int | None = None,
        **request: Unpack[Request],
    ) -> ObjectCheck:
        """The object check of ``JetStreamObjectSensor``: ``.done`` when object ``object_name`` of ``bucket`` is
        present (not deleted) and, with ``after_revision``, its revision is above it (a put after the one seen);
        ``.reason`` says why not; ``.to_xcom()`` gives the object's info."""
        async with self.aapi(**request) as api:
            return await check_object(api, bucket, object_name, after_revision)

    check_object = blocking(acheck_object)

    @checked(WATCH_OBJECTS + REQUEST)
    async def awatch_objects(
        self,
        bucket: str,
        *,
        after_revision: int | None = None,
        **request: Unpack[Request],
    ) -> AsyncIterator[ObjectInfo]:
        """Every put and delete (``.deleted``) of an object of ``bucket`` after ``after_revision`` (default None:
        all that are stored), as it comes, until the caller stops iterating: an ordered consumer of the bucket's
        meta subjects, the server sending each change as it is stored (no polling). A change a later one of the
        same object replaced before it was read is not seen (one meta per object). Async only: no blocking
        twin."""
        async with self.aapi(**request) as api:
            async for info in watch_objects(api, bucket, after_revision=after_revision or 0):
                if info is not None:
                    yield info
