"""Operators for KV buckets: create/update (mirrors and sources across domains), put, delete.

Buckets are KV streams built by the KV conventions exactly as nats.go and nats.js build them
(:mod:`airflow_provider_jetstream.core.manage.buckets`), so those clients read them, mirrors of other domains'
buckets included (under the origin's ``$KV.<origin>.`` prefix, ADR-8). nats-py's
``js.key_value(bucket)`` reads buckets and sourced buckets but not that mirror layout:
:func:`airflow_provider_jetstream.core.manage.buckets.kv_get` reads all three. Puts and deletes address the
bucket's domain (``$JS.<domain>.API.$KV.<bucket>.<key>``, as nats.go does), so a write aimed at
domain X cannot land in a same-named bucket of domain Y; a mirror's writes go to its origin.
The work is :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`'s (``ensure_key_value``,
``kv_put``, ``kv_delete``).

Lineage: a bucket is its stream ``KV_<bucket>`` (:mod:`airflow_provider_jetstream.assets.lineage`):
the create operator writes it and reads the origins of its mirror or sources (an asset event when
created, updated or recreated); put and delete write it (an asset event with the key and revision).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_jetstream.core.manage.specs import KeyValueSpec, encode_kv_value
from airflow_provider_jetstream.core.manage.specs.kv import kv_stream_name
from airflow_provider_jetstream.core.names import validate_bucket, validate_key
from airflow_provider_jetstream.hooks.args import expected_revision_arg
from airflow_provider_jetstream.operators.base import (
    JetStreamBaseOperator,
    ReconcileOperator,
    as_bool,
    check_bool_args,
    one_spec_error,
)
from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time


class JetStreamCreateKeyValueOperator(ReconcileOperator):
    """Create or update a KV bucket, including a mirror or sources in other domains or accounts.

    :param bucket: a name, or a spec: ``{"bucket": "config", "history": 5, "ttl": "1h",
        "max_value_size": 1024, "max_bytes": -1, "storage": "file", "replicas": 1, "placement": {...},
        "compression": true, "mirror": {"bucket": "config", "domain": "leaf"}}`` or
        ``"sources": [{"bucket": "config", "domain": "leaf"}, ...]``.
    :param if_exists: ``update`` | ``skip`` | ``fail`` | ``recreate``. A mirror cannot be changed
        in place; a mirror bucket made by releases before the nats.go layout fails with the exact
        migration recipe (``recreate`` re-mirrors everything the origin still holds).
    :param dry_run: log the plan, change nothing.
    :param allow_double_store: create even if a bucket of this name takes writes in another
        connected domain of this account, or if a domain cannot be checked. Default False: refused,
        quoting the NATS docs' advice.
    :param peer_domains: more domains for that check, besides the connection's own.
    """

    template_fields: Sequence[str] = (*ReconcileOperator.template_fields, "bucket")
    template_fields_renderers = {"bucket": "json"}

    def __init__(self, *, bucket: str | dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        if not is_resolved_at_run_time(bucket):
            KeyValueSpec.from_dict(bucket)
        self.declare_lineage_outlet()

    def execute(self, context: Any) -> dict[str, Any]:
        spec = KeyValueSpec.from_dict(self.bucket)
        self.check_options()
        result = self.get_hook().ensure_key_value(spec, **self.reconcile_kwargs())
        self.record_spec_lineage(context, spec.stream_spec(), result)
        return result


class _KeyOperator(JetStreamBaseOperator):
    """A write to one key: bucket and key names, and an optional compare-and-set revision."""

    def __init__(self, *, bucket: str, key: str, expected_revision: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.key = key
        self.expected_revision = expected_revision
        if not is_resolved_at_run_time([bucket, key, expected_revision]):
            self._check()
        self.declare_lineage_outlet()

    def record_key_lineage(self, context: Any, revision: int) -> None:
        """The bucket's stream ``KV_<bucket>`` is written; its asset event carries the key and revision."""
        self.record_stream_lineage(
            context, [(kv_stream_name(self.bucket), None)], extra={"key": self.key, "revision": revision}
        )

    def _check(self) -> int | None:
        one_spec_error(validate_bucket, self.bucket, "bucket")
        one_spec_error(validate_key, self.key, "key")
        return expected_revision_arg(self.expected_revision)


class JetStreamKeyValuePutOperator(_KeyOperator):
    """Put a value in a bucket of the target domain; XCom: the new revision (an int).

    :param value: bytes, str (stored as UTF-8), or a dict, list, number or bool (stored as JSON).
        Anything else (a set, a datetime, an object) is refused, at parse time when known.
    :param expected_revision: compare-and-set: store only if the key's latest revision is this one
        (0: only if the key does not exist yet); otherwise the task fails.
    """

    template_fields: Sequence[str] = (
        *JetStreamBaseOperator.template_fields,
        "bucket",
        "key",
        "value",
        "expected_revision",
    )

    def __init__(self, *, value: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value
        if not is_resolved_at_run_time(value):
            one_spec_error(encode_kv_value, value, "value")

    def execute(self, context: Any) -> int:
        expected = self._check()
        revision = self.get_hook().kv_put(
            self.bucket, self.key, self.value, expected_revision=expected, timeout=self.request_timeout
        )
        self.record_key_lineage(context, revision)
        return revision


class JetStreamKeyValueDeleteOperator(_KeyOperator):
    """Delete a key (a delete marker; ``purge=True`` also drops its history). XCom: the marker's revision."""

    template_fields: Sequence[str] = (
        *JetStreamBaseOperator.template_fields,
        "bucket",
        "key",
        "expected_revision",
        "purge",
    )

    def __init__(self, *, purge: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.purge = purge
        check_bool_args(purge=purge)

    def execute(self, context: Any) -> int:
        expected = self._check()
        revision = self.get_hook().kv_delete(
            self.bucket,
            self.key,
            purge=as_bool("purge", self.purge),
            expected_revision=expected,
            timeout=self.request_timeout,
        )
        self.record_key_lineage(context, revision)
        return revision
