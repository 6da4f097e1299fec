"""Operators for object stores: create/update a bucket (mirrors, sources across domains), put, get, delete an object.

Buckets are ``OBJ_<bucket>`` streams built by the object store conventions exactly as nats.go and nats.js
build them (:mod:`airflow_provider_jetstream.core.manage.specs.objects`); objects are written and read as
they write and read them (:mod:`airflow_provider_jetstream.core.manage.objects`), in any domain, files
streamed one chunk at a time and SHA-256 digests verified. The work is
:class:`~airflow_provider_jetstream.hooks.objects.JetStreamObjectStoreHook`'s (``ensure_object_store``,
``put_object``, ``get_object``, ``delete_object``).

Lineage: a bucket is its stream ``OBJ_<bucket>`` (``jetstream://<server>/<domain>/OBJ_<bucket>``,
:mod:`airflow_provider_jetstream.assets.lineage`): the create operator writes it and reads the origins of its
mirror or sources; put and delete write it (an asset event with the object's name and revision); get reads it.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.arguments.paths import destination_file
from airflow_provider_jetstream.core.manage.specs.objects import object_stream_name
from airflow_provider_jetstream.core.signatures.objects import (
    DELETE_OBJECT,
    ENSURE_OBJECT_STORE,
    GET_OBJECT,
    PUT_OBJECT,
)
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.hooks.objects import JetStreamObjectStoreHook
from airflow_provider_jetstream.operators.base import DeclareBucketOperator, JetStreamBaseOperator, declare_arguments


class JetStreamCreateObjectStoreOperator(DeclareBucketOperator):
    """Create or update an object store bucket, including a mirror or sources of other domains' buckets.

    :param bucket: the bucket to declare: its name, or its spec: ``{"bucket": "files", "description": "...",
        "ttl": "7d", "max_bytes": -1,
        "storage": "file", "replicas": 1, "placement": {...}, "compression": True, "metadata": {...}}``, or a
        copy: ``"mirror": {"bucket": "files", "domain": "leaf"}`` / ``"sources": [{"bucket": ..., "domain": ...}]``
        (the origin's subjects renamed into this bucket's, so every client opens the copy by its name).
    :param if_exists: ``update`` | ``skip`` | ``fail`` | ``recreate`` (only this deletes a bucket).
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.DeclareOptions` or a dict of its
        fields: ``dry_run`` (log the plan, change nothing), ``prune_sources``, ``allow_data_loss`` (apply in place
        a lower ``max_bytes`` or ``ttl``, or one set where there was none, or fewer ``replicas``; refused by
        default, naming each field ``old -> new``), ``allow_double_store`` (create even if a bucket of this name
        takes writes in another connected domain of this account, or a domain cannot be checked; refused by
        default), ``peer_domains`` (more domains for that check),
        ``allow_unreachable_origins`` (declare a mirror or source of an origin domain that does not answer and
        was never seen: refused by default, a wrong domain name?).
    """

    hook_class = JetStreamObjectStoreHook
    arguments: Args = (
        OPERATOR + Args("create object store", {"bucket": ENSURE_OBJECT_STORE.args["bucket"]}) + declare_arguments()
    )

    def ensure(self, hook: JetStreamObjectStoreHook, spec: Any, **reconcile: Any) -> dict[str, Any]:
        return hook.ensure_object_store(spec, **reconcile)


class _ObjectOperator(JetStreamBaseOperator):
    """One object of one bucket."""

    hook_class = JetStreamObjectStoreHook

    def __init__(self, *, bucket: str, object_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.object_name = object_name

    def record_object_lineage(self, context: Any, info: dict[str, Any] | None, written: bool) -> None:
        """The bucket's stream ``OBJ_<bucket>`` is written (an asset event with the object's name and revision)
        or read."""
        args = self.checked_arguments()
        stream = [(object_stream_name(args["bucket"]), None)]
        extra = {"object": args["object_name"], "revision": (info or {}).get("revision")}
        if written:
            self.record_stream_lineage(context, stream, extra=extra)
        else:
            self.record_stream_lineage(context, [], stream, emit=False, extra=extra)


class JetStreamPutObjectOperator(_ObjectOperator):
    """Store a local file as an object of a bucket in the target domain, one chunk in memory at a time (an
    object of that name is replaced once the new one is stored). XCom: the object's info (``name``, ``size``,
    ``chunks``, ``digest``, ``revision``, ...).

    :param bucket: the object store bucket's name.
    :param object_name: the object's name in it.
    :param local_path: the file to store, on the machine the task runs on. An empty rendered value is refused.
    :param description: the object's description. Default None.
    :param headers: headers recorded in the object's meta (name -> text). Default None.
    :param chunk_size: bytes per chunk, 1 KiB to 8 MiB (at most what a read gets back through the connected
        server). Default 128 KiB, as every official client.
    """

    arguments: Args = OPERATOR + PUT_OBJECT

    def __init__(
        self,
        *,
        local_path: str,
        description: str | None = None,
        headers: dict[str, str] | None = None,
        chunk_size: int = 128 * 1024,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.local_path = local_path
        self.description = description
        self.headers = headers
        self.chunk_size = chunk_size
        self.declare_lineage_outlet()

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        info = self.get_hook().put_object(
            args["bucket"],
            args["object_name"],
            args["local_path"],
            description=args["description"],
            headers=args["headers"],
            chunk_size=args["chunk_size"],
            request_timeout=args["request_timeout"],
        )
        result = info.to_xcom()
        self.record_object_lineage(context, result, written=True)
        return result


class JetStreamGetObjectOperator(_ObjectOperator):
    """Write an object of a bucket (a mirror of another domain's bucket included) to a local file, one chunk in
    memory at a time; the file appears only once its size and SHA-256 digest are verified. XCom: the object's
    info and ``path`` (the file written).

    :param bucket: the object store bucket's name.
    :param object_name: the object's name in it.
    :param local_path: the file to write, on the machine the task runs on, in an existing directory; a directory
        (or a path ending in ``/``) takes the object's last name part. A device, FIFO, socket or symbolic link there
        is refused, never replaced; so is an empty rendered value.
    """

    arguments: Args = OPERATOR + GET_OBJECT

    def __init__(self, *, local_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.local_path = local_path

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        path = str(destination_file(args["local_path"], args["object_name"], "local_path"))
        info = self.get_hook().get_object(
            args["bucket"], args["object_name"], path, request_timeout=args["request_timeout"]
        )
        result = {**info.to_xcom(), "path": path}
        self.record_object_lineage(context, result, written=False)
        return result


class JetStreamDeleteObjectOperator(_ObjectOperator):
    """Delete an object of a bucket (a deleted meta, then its chunks purged), as the official clients do. XCom:
    the deleted object's info, or None when it was missing and ``ignore_missing``.

    :param bucket: the object store bucket's name.
    :param object_name: the object's name in it.
    :param ignore_missing: a missing object is success. Default False: the task fails.
    """

    arguments: Args = OPERATOR + DELETE_OBJECT

    def __init__(self, *, ignore_missing: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ignore_missing = ignore_missing
        self.declare_lineage_outlet()

    def execute(self, context: Any) -> dict[str, Any] | None:
        args = self.checked_arguments()
        info = self.get_hook().delete_object(
            args["bucket"],
            args["object_name"],
            ignore_missing=args["ignore_missing"],
            request_timeout=args["request_timeout"],
        )
        result = info.to_xcom() if info is not None else None
        if result is not None:
            self.record_object_lineage(context, result, written=True)
        return result
