"""Key-value bucket specs, the stream each one is stored in (the KV stream conventions), and the values it takes.

A bucket ``b`` is the stream ``KV_b`` listening on ``$KV.b.>``, one message per key revision:
``max_msgs_per_subject`` is the history, ``max_age`` the TTL, rollups allowed, deletes denied,
direct get on, discard new. A mirror bucket has no subjects and mirrors ``KV_<origin>`` as is
(``mirror_direct``, no subject transform: it stores ``$KV.<origin>.<key>``); a sourced bucket
transforms ``$KV.<origin>.>`` into ``$KV.b.>`` (unless the origin is a same-named bucket in another
domain). That is field for field what nats.go's and nats.js's ``CreateKeyValue`` send (ADR-8), so
nats.go and nats.js open these buckets, across domains, with ``KeyValue(b)`` / ``views.kv(b)``; they
read a mirror of a bucket in another domain or account under its origin's prefix, as does
:func:`airflow_provider_jetstream.core.manage.buckets.kv_get`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.arguments import durations as D
from airflow_provider_jetstream.core.arguments import names as N
from airflow_provider_jetstream.core.arguments import values as V
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.specs import fields as F
from airflow_provider_jetstream.core.manage.specs.fields import BucketSpec, Field, Struct
from airflow_provider_jetstream.core.manage.specs.sources import bucket_origin
from airflow_provider_jetstream.core.manage.specs.stream import PLACEMENT, REPUBLISH, STREAM, StreamSpec

KV_STREAM_PREFIX = "KV_"
MAX_HISTORY = 64
DEFAULT_DUPLICATE_WINDOW = 120 * 1_000_000_000


def kv_stream_name(bucket: str) -> str:
    return f"{KV_STREAM_PREFIX}{bucket}"


def kv_subjects(bucket: str) -> str:
    return f"$KV.{bucket}.>"


_origin = bucket_origin("KV", "{'bucket': 'config', 'domain': 'leaf'}", N.bucket_name)


KV = Struct(
    "bucket",
    (
        Field("bucket", "bucket", N.bucket_name, "bucket name", aliases=("name",)),
        Field("description", "description", V.text, "free text"),
        Field("history", "history", V.integer(1, MAX_HISTORY), f"revisions kept per key, 1-{MAX_HISTORY}"),
        Field("ttl", "ttl", D.nanoseconds(), "how long a value lives, 0: forever", aliases=("max_age",)),
        Field("max_value_size", "max_value_size", F.limit, "-1: unlimited", aliases=("max_msg_size",)),
        Field("max_bytes", "max_bytes", F.limit, "-1: unlimited"),
        Field("storage", "storage", V.choice({"file": "file", "memory": "memory", "mem": "memory"}), "file | memory"),
        Field("replicas", "replicas", V.integer(1, 5), "1-5", aliases=("num_replicas",)),
        Field("placement", "placement", F.nested(PLACEMENT), "cluster / tags"),
        Field("compression", "compression", V.boolean, "s2 compression on disk", since="2.10"),
        Field("republish", "republish", F.nested(REPUBLISH), "src / dest / headers_only"),
        Field("metadata", "metadata", V.string_map, "string -> string", since="2.10"),
        Field("mirror", "mirror", _origin, "the origin bucket of a read-only copy"),
        Field("sources", "sources", V.list_of(_origin, min_items=1), "origin buckets to aggregate"),
        Field(
            "limit_marker_ttl",
            "limit_marker_ttl",
            D.nanoseconds(allow_zero=False),
            "keep a delete marker this long when a key's TTL removes it",
            since="2.11",
            level=1,
        ),
    ),
)


#: The fields of the bucket's stream each bucket field sets. The stream's other fields are KV
#: conventions and defaults, sent only to create the bucket: a reconcile of an existing bucket compares
#: and changes only the stream fields of the bucket fields the spec names (a spec without ``history``
#: leaves the history alone).
STREAM_FIELDS: dict[str, tuple[str, ...]] = {
    "bucket": ("name",),
    "description": ("description",),
    "history": ("max_msgs_per_subject",),
    "ttl": ("max_age", "duplicate_window"),
    "max_value_size": ("max_msg_size",),
    "max_bytes": ("max_bytes",),
    "storage": ("storage",),
    "replicas": ("replicas",),
    "placement": ("placement",),
    "compression": ("compression",),
    "republish": ("republish",),
    "metadata": ("metadata",),
    "mirror": ("mirror", "mirror_direct"),
    "sources": ("sources",),
    "limit_marker_ttl": ("allow_msg_ttl", "subject_delete_marker_ttl"),
}

#: The bucket field's name of each stream field whose name differs (shown beside it in refusals).
SPEC_NAMES = {name: key for key, names in STREAM_FIELDS.items() for name in names if name != key}


@dataclass(frozen=True)
class KeyValueSpec(BucketSpec):
    """A validated KV bucket spec; :meth:`stream_spec` is the stream that stores it."""

    struct = KV

    @classmethod
    def problems(cls, values: Mapping[str, Any], path: str) -> list[SpecError]:
        if "mirror" in values and "republish" in values:
            return [SpecError(f"{path}.republish", "...", "a mirror bucket does not republish")]
        return []

    @property
    def stream_name(self) -> str:
        return kv_stream_name(self.bucket)

    def stream_spec(self) -> StreamSpec:
        """The ``KV_<bucket>`` stream, configured by the KV conventions; its ``named`` fields are those of
        the bucket fields given (:data:`STREAM_FIELDS`), the only ones a reconcile changes."""
        v = self.values
        bucket = self.bucket
        ttl = v.get("ttl", 0)
        stream: dict[str, Any] = {
            "name": kv_stream_name(bucket),
            "max_msgs_per_subject": v.get("history", 1),
            "max_bytes": v.get("max_bytes", -1),
            "max_age": ttl,
            "max_msg_size": v.get("max_value_size", -1),
            "storage": v.get("storage", "file"),
            "replicas": v.get("replicas", 1),
            "allow_rollup": True,
            "deny_delete": True,
            "allow_direct": True,
            "discard": "new",
            "max_msgs": -1,
            "max_consumers": -1,
            "duplicate_window": min(ttl, DEFAULT_DUPLICATE_WINDOW) if ttl else DEFAULT_DUPLICATE_WINDOW,
        }
        for key in ("description", "placement", "republish", "metadata"):
            if key in v:
                stream[key] = v[key]
        if "compression" in v:
            stream["compression"] = "s2" if v["compression"] else "none"
        if "limit_marker_ttl" in v:
            stream["allow_msg_ttl"] = True
            stream["subject_delete_marker_ttl"] = v["limit_marker_ttl"]
        if "mirror" in v:
            # As nats.go / nats.js: the origin's subjects are kept; clients read them under the
            # origin's prefix (a transform here would hide the keys from those clients).
            mirror = dict(v["mirror"])
            mirror["name"] = kv_stream_name(mirror["name"])
            stream["mirror"] = mirror
            stream["mirror_direct"] = True
        else:
            stream["subjects"] = [kv_subjects(bucket)]
            if "sources" in v:
                sources = []
                for source in v["sources"]:
                    source = dict(source)
                    origin = source["name"]
                    source["name"] = kv_stream_name(origin)
                    if origin != bucket or not source.get("external"):
                        source["subject_transforms"] = [{"src": kv_subjects(origin), "dest": kv_subjects(bucket)}]
                    sources.append(source)
                stream["sources"] = sources
        values = {STREAM.by_key()[k].name: val for k, val in stream.items()}
        named = frozenset(name for key in v for name in STREAM_FIELDS[key])
        return StreamSpec(values=values, path=self.path, named=named)


def encode_kv_value(value: Any, path: str = "value") -> bytes:
    """The bytes stored for a KV ``value`` (see :func:`~airflow_provider_jetstream.core.arguments.values.value_bytes`);
    None is refused: a delete is the delete operator's."""
    if value is None:
        raise SpecError(
            path, value, f"give a value to store: {V.ALLOWED_VALUES} (to delete a key, use the delete operator)"
        )
    return V.value_bytes(value, path)
