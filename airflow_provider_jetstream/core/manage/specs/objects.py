"""Object store bucket specs, and the stream each one is stored in (the object store conventions of ADR-20).

A bucket ``b`` is the stream ``OBJ_b`` listening on ``$O.b.C.>`` (the chunks, one subject per object
revision: ``$O.b.C.<nuid>``) and ``$O.b.M.>`` (one meta message per object: ``$O.b.M.<base64url name>``,
rolled up), with rollups allowed, direct get on and discard new: field for field what nats.go's
``CreateObjectStore`` and nats.js's ``views.os`` send. A **mirror** bucket mirrors ``OBJ_<origin>``; a
mirror or a source of a differently named bucket transforms ``$O.<origin>.>`` into ``$O.b.>``, so that
every client opening ``b`` finds its objects under its own name (a same-named bucket of another domain
needs no transform). The official clients have no object store mirror logic of their own (unlike KV):
the transform is what lets them read such a copy by its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.arguments import durations as D
from airflow_provider_jetstream.core.arguments import names as N
from airflow_provider_jetstream.core.arguments import values as V
from airflow_provider_jetstream.core.manage.specs import fields as F
from airflow_provider_jetstream.core.manage.specs.fields import BucketSpec, Field, Struct
from airflow_provider_jetstream.core.manage.specs.sources import bucket_origin
from airflow_provider_jetstream.core.manage.specs.stream import PLACEMENT, STREAM, StreamSpec

OBJ_STREAM_PREFIX = "OBJ_"


def object_stream_name(bucket: str) -> str:
    """The stream of an object store bucket: ``OBJ_<bucket>``."""
    return f"{OBJ_STREAM_PREFIX}{bucket}"


def object_subjects(bucket: str) -> list[str]:
    """The subjects of a bucket's stream: its chunks and its meta messages."""
    return [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"]


_origin = bucket_origin("object store", "{'bucket': 'files', 'domain': 'leaf'}", N.object_bucket_name)


OBJECT_STORE = Struct(
    "bucket",
    (
        Field("bucket", "bucket", N.object_bucket_name, "bucket name", aliases=("name",)),
        Field("description", "description", V.text, "free text"),
        Field("ttl", "ttl", D.nanoseconds(), "how long an object lives, 0: forever", aliases=("max_age",)),
        Field("max_bytes", "max_bytes", F.limit, "-1: unlimited"),
        Field("storage", "storage", V.choice({"file": "file", "memory": "memory", "mem": "memory"}), "file | memory"),
        Field("replicas", "replicas", V.integer(1, 5), "1-5", aliases=("num_replicas",)),
        Field("placement", "placement", F.nested(PLACEMENT), "cluster / tags"),
        Field("compression", "compression", V.boolean, "s2 compression on disk", since="2.10"),
        Field("metadata", "metadata", V.string_map, "string -> string", since="2.10"),
        Field("mirror", "mirror", _origin, "the origin bucket of a read-only copy"),
        Field("sources", "sources", V.list_of(_origin, min_items=1), "origin buckets to aggregate"),
    ),
)

#: The fields of the bucket's stream each bucket field sets; a reconcile of an existing bucket compares and
#: changes only those of the fields the spec names.
STREAM_FIELDS: dict[str, tuple[str, ...]] = {
    "bucket": ("name",),
    "description": ("description",),
    "ttl": ("max_age",),
    "max_bytes": ("max_bytes",),
    "storage": ("storage",),
    "replicas": ("replicas",),
    "placement": ("placement",),
    "compression": ("compression",),
    "metadata": ("metadata",),
    "mirror": ("mirror",),
    "sources": ("sources",),
}

#: The bucket field's name of each stream field whose name differs (shown beside it in refusals).
SPEC_NAMES = {name: key for key, names in STREAM_FIELDS.items() for name in names if name != key}


def _copy_of(origin: Mapping[str, Any], bucket: str) -> dict[str, Any]:
    """A mirror or source of the origin bucket, as the stream's: ``OBJ_<origin>``, renamed into ``bucket``'s
    subjects when the names differ."""
    copy = dict(origin)
    name = copy["name"]
    copy["name"] = object_stream_name(name)
    if name != bucket:
        copy["subject_transforms"] = [{"src": f"$O.{name}.>", "dest": f"$O.{bucket}.>"}]
    return copy


@dataclass(frozen=True)
class ObjectStoreSpec(BucketSpec):
    """A validated object store bucket spec; :meth:`stream_spec` is the stream that stores it."""

    struct = OBJECT_STORE

    @property
    def stream_name(self) -> str:
        return object_stream_name(self.bucket)

    def stream_spec(self) -> StreamSpec:
        """The ``OBJ_<bucket>`` stream, configured by the object store conventions; its ``named`` fields are
        those of the bucket fields given (:data:`STREAM_FIELDS`), the only ones a reconcile changes."""
        v = self.values
        bucket = self.bucket
        stream: dict[str, Any] = {
            "name": object_stream_name(bucket),
            "max_age": v.get("ttl", 0),
            "max_bytes": v.get("max_bytes", -1),
            "storage": v.get("storage", "file"),
            "replicas": v.get("replicas", 1),
            "discard": "new",
            "allow_rollup": True,
            "allow_direct": True,
        }
        for key in ("description", "placement", "metadata"):
            if key in v:
                stream[key] = v[key]
        if "compression" in v:
            stream["compression"] = "s2" if v["compression"] else "none"
        if "mirror" in v:
            stream["mirror"] = _copy_of(v["mirror"], bucket)
        else:
            stream["subjects"] = object_subjects(bucket)
            if "sources" in v:
                stream["sources"] = [_copy_of(source, bucket) for source in v["sources"]]
        values = {STREAM.by_key()[k].name: val for k, val in stream.items()}
        named = frozenset(name for key in v for name in STREAM_FIELDS[key])
        return StreamSpec(values=values, path=self.path, named=named)
