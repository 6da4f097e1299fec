"""Operators for KV buckets: create/update (mirrors and sources across domains), put, delete.

Buckets are KV streams built by the KV conventions exactly as nats.go and nats.js build them
(:mod:`airflow_provider_jetstream.core.manage.buckets`), so those clients read them, mirrors of other domains'
buckets included (under the origin's ``$KV.<origin>.`` prefix, ADR-8). nats-py's
``js.key_value(bucket)`` reads buckets and sourced buckets but not that mirror layout:
:func:`airflow_provider_jetstream.core.manage.buckets.kv_get` reads all three. Puts and deletes address the
bucket's domain (``$JS.<domain>.API.$KV.<bucket>.<key>``, as nats.go does), so a write aimed at
domain X cannot land in a same-named bucket of domain Y; a mirror's writes go to its origin.
The work is :class:`~airflow_provider_jetstream.hooks.kv.JetStreamKeyValueHook`'s (``ensure_key_value``,
``kv_put``, ``kv_delete``).

Lineage: a bucket is its stream ``KV_<bucket>`` (:mod:`airflow_provider_jetstream.assets.lineage`):
the create operator writes it and reads the origins of its mirror or sources (an asset event when
created, updated or recreated); put and delete write it (an asset event with the key and revision).
"""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.manage.specs.kv import kv_stream_name
from airflow_provider_jetstream.core.signatures.operations import ENSURE_BUCKET, KV_DELETE, KV_PUT
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.hooks.kv import JetStreamKeyValueHook
from airflow_provider_jetstream.operators.base import DeclareBucketOperator, JetStreamBaseOperator, declare_arguments


class JetStreamCreateKeyValueOperator(DeclareBucketOperator):
    """Create or update a KV bucket, including a mirror or sources in other domains or accounts.

    :param bucket: the bucket to declare: its name, or its spec: ``{"bucket": "config", "history": 5, "ttl": "1h",
        "max_value_size": 1024, "max_bytes": -1, "storage": "file", "replicas": 1, "placement": {...},
        "compression": true, "mirror": {"bucket": "config", "domain": "leaf"}}`` or
        ``"sources": [{"bucket": "config", "domain": "leaf"}, ...]``.
    :param if_exists: ``update`` | ``skip`` | ``fail`` | ``recreate``. A mirror cannot be changed
        in place; a mirror bucket made by releases before the nats.go layout fails with the exact
        migration recipe (``recreate`` re-mirrors everything the origin still holds).
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.DeclareOptions` or a dict of its
        fields: ``dry_run`` (log the plan, change nothing), ``prune_sources``, ``allow_data_loss`` (apply a change
        that discards stored data in place: ``history``, ``max_bytes`` or ``ttl`` lowered, or set where there was
        none, or ``replicas`` lowered; refused by default, naming each field ``old -> new``; an existing bucket's
        fields the spec does not name are never changed), ``allow_double_store`` (create even if a bucket of
        this name takes writes in another connected domain of this account, or a domain cannot be checked;
        refused by default, quoting the NATS docs' advice), ``peer_domains`` (more domains for that check),
        ``allow_unreachable_origins`` (declare a mirror or source of an origin domain that does not answer and
        was never seen: refused by default, a wrong domain name?).
    """

    hook_class = JetStreamKeyValueHook
    arguments: Args = OPERATOR + Args("create bucket", {"bucket": ENSURE_BUCKET.args["bucket"]}) + declare_arguments()

    def ensure(self, hook: JetStreamKeyValueHook, spec: Any, **reconcile: Any) -> dict[str, Any]:
        return hook.ensure_key_value(spec, **reconcile)


class _KeyOperator(JetStreamBaseOperator):
    """A write to one key: bucket and key names, and an optional compare-and-set revision."""

    hook_class = JetStreamKeyValueHook

    def __init__(self, *, bucket: str, key: str, expected_revision: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.key = key
        self.expected_revision = expected_revision
        self.declare_lineage_outlet()

    def record_key_lineage(self, context: Any, revision: int) -> None:
        """The bucket's stream ``KV_<bucket>`` is written; its asset event carries the key and revision."""
        args = self.checked_arguments()
        self.record_stream_lineage(
            context, [(kv_stream_name(args["bucket"]), None)], extra={"key": args["key"], "revision": revision}
        )


class JetStreamKeyValuePutOperator(_KeyOperator):
    """Put a value in a bucket of the target domain; XCom: the new revision (an int).

    :param value: bytes, str (stored as UTF-8), or a dict, list, number or bool (stored as JSON).
        Anything else (a set, a datetime, an object) is refused, at parse time when known.
    :param expected_revision: compare-and-set: store only if the key's latest revision is this one
        (0: only if the key does not exist yet); otherwise the task fails. A template that renders
        empty is refused, never taken as "no condition".
    """

    arguments: Args = OPERATOR + KV_PUT

    def __init__(self, *, value: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value

    def execute(self, context: Any) -> int:
        args = self.checked_arguments()
        revision = self.get_hook().kv_put(
            args["bucket"],
            args["key"],
            args["value"],
            expected_revision=args["expected_revision"],
            request_timeout=args["request_timeout"],
        )
        self.record_key_lineage(context, revision)
        return revision


class JetStreamKeyValueDeleteOperator(_KeyOperator):
    """Delete a key (a delete marker; ``purge=True`` also drops its history). XCom: the marker's revision."""

    arguments: Args = OPERATOR + KV_DELETE

    def __init__(self, *, purge: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.purge = purge

    def execute(self, context: Any) -> int:
        args = self.checked_arguments()
        revision = self.get_hook().kv_delete(
            args["bucket"],
            args["key"],
            purge=args["purge"],
            expected_revision=args["expected_revision"],
            request_timeout=args["request_timeout"],
        )
        self.record_key_lineage(context, revision)
        return revision
