"""Stream and source/mirror specs: plain dicts in, validated JetStream API config out.

Every field of the NATS docs' "Stream configuration" table is accepted, under its documented
snake_case name (``replicas``, ``allow_rollup``...) or its API name (``num_replicas``,
``allow_rollup_hdrs``...). Only the fields given are ever sent.

Sources and mirrors (where their origin lives) are :mod:`.sources`. Most of this module is
:data:`STREAM`, one entry per field of that table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.arguments import durations as D
from airflow_provider_jetstream.core.arguments import names as N
from airflow_provider_jetstream.core.arguments import values as V
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.specs import fields as F
from airflow_provider_jetstream.core.manage.specs.fields import Field, Spec, Struct
from airflow_provider_jetstream.core.manage.specs.sources import (
    TRANSFORM,
    check_transform,
    norm_source,
    norm_sources,
    parse_source,
    requirements_of_sources,
    show_source,
)

PLACEMENT = Struct(
    "placement",
    (
        Field("cluster", "cluster", V.text, "cluster to place the stream in"),
        Field("tags", "tags", V.list_of(V.text), "server tags the placement must match"),
    ),
)
REPUBLISH = Struct(
    "republish",
    (
        Field("src", "src", N.stream_filter, "subjects to republish (default all)", aliases=("source",)),
        Field("dest", "dest", N.stored_subject, "destination subject", aliases=("destination",)),
        Field("headers_only", "headers_only", V.boolean, "republish headers only"),
    ),
)
CONSUMER_LIMITS = Struct(
    "consumer limits",
    (
        Field("inactive_threshold", "inactive_threshold", D.nanoseconds(), "default inactive threshold"),
        Field("max_ack_pending", "max_ack_pending", V.integer(-1), "default max ack pending"),
    ),
)

_RETENTION = {"limits": "limits", "interest": "interest", "workqueue": "workqueue", "work_queue": "workqueue"}
_STORAGE = {"file": "file", "memory": "memory", "mem": "memory"}
_DISCARD = {"old": "old", "new": "new"}
_COMPRESSION = {"none": "none", "s2": "s2", "": "none"}
_PERSIST = {"default": "default", "async": "async"}


STREAM = Struct(
    "stream",
    (
        Field("name", "name", N.stream_name, "stream name", editable=F.IMMUTABLE),
        Field("description", "description", V.text, "free text", since="2.3", normalize=F.norm_text),
        Field(
            "subjects",
            "subjects",
            N.subject_list(N.stored_subject),
            "subjects the stream listens on (wildcards allowed)",
            normalize=F.norm_sorted,
        ),
        F.choice_field(
            "retention", "retention", _RETENTION, "limits | interest | workqueue", "limits", editable=F.IMMUTABLE
        ),
        F.choice_field("storage", "storage", _STORAGE, "file | memory", "file", editable=F.IMMUTABLE),
        F.choice_field("discard", "discard", _DISCARD, "old | new", "old"),
        F.flag(
            "discard_new_per_subject",
            "discard_new_per_subject",
            "discard new per subject (needs discard new and max_msgs_per_subject)",
            since="2.9",
        ),
        F.limit_field("max_consumers", "max_consumers", editable=F.IMMUTABLE),
        F.limit_field("max_msgs", "max_msgs", discards=True),
        F.limit_field("max_bytes", "max_bytes", discards=True),
        F.duration_field("max_age", "max_age", "0: unlimited", discards=True),
        F.limit_field("max_msgs_per_subject", "max_msgs_per_subject", since="2.3", discards=True),
        F.limit_field("max_msg_size", "max_msg_size", parse=V.integer(-1, 2**31 - 1, " (-1: unlimited)")),
        Field("duplicate_window", "duplicate_window", D.nanoseconds(), "dedupe window", show=F.show_duration),
        Field(
            "replicas",
            "num_replicas",
            V.integer(1, 5),
            "1-5",
            normalize=lambda v: v or 1,
            durability=True,
        ),
        F.flag("no_ack", "no_ack", "do not ack publishes"),
        Field("placement", "placement", F.nested(PLACEMENT), "cluster / tags", normalize=F.norm_struct),
        Field(
            "mirror",
            "mirror",
            parse_source,
            "the one origin of a mirror",
            normalize=norm_source,
            show=show_source,
            editable=F.IMMUTABLE,  # the server refuses any change to a mirror's configuration
        ),
        Field(
            "sources",
            "sources",
            V.list_of(parse_source, min_items=1),
            "origins to aggregate",
            normalize=norm_sources,
        ),
        Field(
            "sealed", "sealed", V.boolean, "no more writes or deletes", since="2.6.2", editable=F.ONCE, show=F.show_bool
        ),
        F.flag("deny_delete", "deny_delete", "refuse message deletes", since="2.6.2", editable=F.IMMUTABLE),
        F.flag("deny_purge", "deny_purge", "refuse purges", since="2.6.2", editable=F.IMMUTABLE),
        F.flag(
            "allow_rollup",
            "allow_rollup_hdrs",
            "honour Nats-Rollup headers",
            since="2.6.2",
        ),
        Field(
            "republish",
            "republish",
            F.nested(REPUBLISH),
            "src / dest / headers_only",
            since="2.8.3",
            normalize=F.norm_struct,
        ),
        F.flag("allow_direct", "allow_direct", "direct get", since="2.9"),
        F.flag("mirror_direct", "mirror_direct", "mirror serves direct get", since="2.9"),
        Field(
            "subject_transform",
            "subject_transform",
            F.nested(TRANSFORM, check_transform),
            "transform subjects before storing",
            since="2.10",
            normalize=F.norm_struct,
        ),
        F.choice_field("compression", "compression", _COMPRESSION, "none | s2", "none", since="2.10"),
        Field(
            "first_seq",
            "first_seq",
            V.integer(1),
            "first sequence of a new stream",
            since="2.10",
            editable=F.CREATE_ONLY,
        ),
        Field("metadata", "metadata", V.string_map, "string -> string", since="2.10", normalize=F.norm_metadata),
        Field(
            "consumer_limits",
            "consumer_limits",
            F.nested(CONSUMER_LIMITS),
            "defaults for consumers",
            since="2.10",
            normalize=F.norm_struct,
        ),
        F.flag(
            "allow_msg_ttl",
            "allow_msg_ttl",
            "per-message TTL (Nats-TTL header)",
            since="2.11",
            level=1,
            editable=F.ENABLE_ONLY,
        ),
        F.duration_field(
            "subject_delete_marker_ttl",
            "subject_delete_marker_ttl",
            "TTL of delete markers left when max_age removes a subject's last message",
            allow_zero=False,
            since="2.11",
            level=1,
        ),
        F.flag(
            "allow_atomic",
            "allow_atomic",
            "atomic batch publish",
            aliases=("allow_atomic_publish",),
            since="2.12",
            level=2,
        ),
        F.flag(
            "allow_batched",
            "allow_batched",
            "fast-ingest batch publish (flow-controlled acks)",
            aliases=("allow_batch_publish",),
            since="2.14",
            level=4,
        ),
        F.flag(
            "allow_msg_counter",
            "allow_msg_counter",
            "distributed counter CRDT",
            since="2.12",
            level=2,
            editable=F.IMMUTABLE,
        ),
        F.flag(
            "allow_msg_schedules",
            "allow_msg_schedules",
            "delayed message schedules",
            since="2.12",
            level=2,
            editable=F.ENABLE_ONLY,
        ),
        F.choice_field(
            "persist_mode",
            "persist_mode",
            _PERSIST,
            "default | async (R1 only)",
            "default",
            since="2.12",
            level=2,
            editable=F.IMMUTABLE,
            active=lambda v: v not in (None, "default"),
        ),
    ),
)


@dataclass(frozen=True)
class StreamSpec(Spec):
    """A validated stream spec: ``values`` maps field names to API values, for the fields given."""

    path: str = "stream"
    #: The fields the user named, when ``values`` also holds conventions used only to create the stream
    #: (a KV bucket's, :meth:`KeyValueSpec.stream_spec`); None: every field of ``values`` is named.
    named: frozenset[str] | None = None

    struct = STREAM

    def named_values(self) -> dict[str, Any]:
        """The fields a reconcile compares with an existing stream and lays over its config: those the
        user named (the others keep the server's values)."""
        return {k: v for k, v in self.values.items() if self.named is None or k in self.named}

    unnamed = "a stream needs a name"

    @classmethod
    def check(cls, values: dict[str, Any], path: str) -> list[SpecError]:
        errors: list[SpecError] = []
        _check_stream(values, path, errors)
        return errors

    @property
    def name(self) -> str:
        return self.values["name"]

    def requirements(self) -> list[F.Requirement]:
        """The fields given that need a newer server than API level 0, the mirror's and sources' own
        included (durable sourcing: ``stream.sources[0].consumer``)."""
        return super().requirements() + requirements_of_sources(self.values, self.path)

    @property
    def is_mirror(self) -> bool:
        return "mirror" in self.values

    def listen_subjects(self) -> list[str]:
        """The subjects this stream will store messages from clients on."""
        if self.is_mirror:
            return []
        if "subjects" in self.values:
            return list(self.values["subjects"])
        if "sources" in self.values:
            return []
        return [self.name]  # the server's default: the stream's name

    def origin_domains(self) -> list[str]:
        """Domains the mirror and sources name (``$JS.<domain>.API``), for the double-store check."""
        origins = [self.values.get("mirror"), *(self.values.get("sources") or [])]
        return [d for o in origins if o and (d := domain_of((o.get("external") or {}).get("api")))]


def _check_stream(values: dict[str, Any], path: str, errors: list[SpecError]) -> None:
    if "mirror" in values:
        if values.get("subjects"):
            errors.append(
                SpecError(
                    f"{path}.subjects",
                    values["subjects"],
                    "a mirror has no subjects: it stores exactly what its origin stores (use sources to "
                    "aggregate and also listen on subjects)",
                )
            )
        if values.get("sources"):
            errors.append(SpecError(f"{path}.sources", "...", "a mirror has one origin: give mirror or sources"))
    elif values.get("mirror_direct"):
        errors.append(SpecError(f"{path}.mirror_direct", True, "mirror_direct is for mirrors only"))
    if values.get("discard_new_per_subject") and (
        values.get("discard") != "new" or F.norm_limit(values.get("max_msgs_per_subject")) == -1
    ):
        errors.append(
            SpecError(
                f"{path}.discard_new_per_subject",
                True,
                "it needs discard 'new' and max_msgs_per_subject > 0",
            )
        )
    if values.get("allow_rollup") and values.get("deny_purge"):
        errors.append(SpecError(f"{path}.allow_rollup", True, "a rollup purges: it cannot go with deny_purge"))
    if "subject_delete_marker_ttl" in values:
        if not values.get("allow_msg_ttl"):
            errors.append(
                SpecError(
                    f"{path}.subject_delete_marker_ttl",
                    F.show_duration(values["subject_delete_marker_ttl"]),
                    "delete markers need allow_msg_ttl: true",
                )
            )
        elif values["subject_delete_marker_ttl"] < 1_000_000_000:
            errors.append(
                SpecError(
                    f"{path}.subject_delete_marker_ttl",
                    F.show_duration(values["subject_delete_marker_ttl"]),
                    "use at least 1s",
                )
            )
    sources = values.get("sources") or []
    seen: dict[tuple, int] = {}
    for i, source in enumerate(sources):
        key = (
            source["name"],
            (source.get("external") or {}).get("api"),
            source.get("filter_subject"),
            repr(source.get("subject_transforms")),
        )
        if key in seen:
            errors.append(SpecError(f"{path}.sources[{i}]", source["name"], f"the same source as sources[{seen[key]}]"))
        seen[key] = i
