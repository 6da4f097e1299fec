"""``JetStreamKeyValueHook``: the KV role: declare buckets, get, put and delete keys, check a key (sync and async).

Buckets are laid out as nats.go lays them out (mirrors and sources in other domains included,
:mod:`airflow_provider_jetstream.core.manage.buckets`); puts and deletes address the bucket's domain. Usable
alone, or as part of :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.core.manage.buckets import KvEntry, kv_delete, kv_get, kv_put, reconcile_bucket
from airflow_provider_jetstream.core.manage.specs import KeyValueSpec
from airflow_provider_jetstream.core.manage.specs.kv import kv_subjects
from airflow_provider_jetstream.core.signatures.operations import ENSURE_BUCKET, KEY_CHECK, KV_DELETE, KV_GET, KV_PUT
from airflow_provider_jetstream.core.signatures.shared import LOG, REQUEST, TARGET
from airflow_provider_jetstream.core.status.kv_key import KeyCheck, judge_entry
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.methods import Declaring, Request, Target, blocking, checked

if TYPE_CHECKING:
    from typing_extensions import Unpack


class JetStreamKeyValueHook(JetStreamBaseHook):
    """KV buckets and their keys in any domain, as the KV operators and sensor use them (see
    :class:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook` for the connection arguments)."""

    @checked(ENSURE_BUCKET + REQUEST + LOG)
    async def aensure_key_value(
        self,
        bucket: KeyValueSpec | Mapping[str, Any] | str,
        **declaring: Unpack[Declaring],
    ) -> dict[str, Any]:
        """Create or update a KV bucket (mirrors and sources in other domains included, laid out as
        nats.go makes them), as ``JetStreamCreateKeyValueOperator`` does; returns its XCom dict.

        :param bucket: the bucket to declare: its name, a :class:`KeyValueSpec` or its dict, e.g. ``{"bucket": "config",
            "history": 5}`` or ``{"bucket": "copy", "mirror": {"bucket": "config", "domain": "leaf"}}``.
        :param if_exists: ``"update"`` (default) | ``"skip"`` | ``"fail"`` | ``"recreate"``.
        :param dry_run: plan only, change nothing. Default False.
        :param prune_sources: remove sources the spec does not name. Default False: kept.
        :param allow_data_loss: apply in place a change that discards stored data (``history``,
            ``max_bytes`` or ``ttl`` lowered, or set where there was none), or lowers its durability
            (``replicas`` lowered). Default False:
            :class:`ReconcileError` naming each such field ``old -> new``. Fields the spec does not
            name are never changed.
        :param allow_double_store: create even if a bucket of this name takes writes in another
            connected domain of this account, or a domain cannot be checked. Default False.
        :param peer_domains: more domains for that check, besides the connection's own.
        :param allow_unreachable_origins: declare a mirror or source of an origin domain that does not answer now and
            was never seen (no copy of it in the target, not in ``peer_domains``). Default False:
            :class:`UnknownOriginDomainError` (a wrong domain name?); a known domain that does not answer is declared
            with a warning in the result's ``notes``.
        """
        spec: KeyValueSpec = bucket  # type: ignore[assignment]  # checked: a KeyValueSpec
        stream = spec.stream_spec()
        subjects = [] if stream.is_mirror else [kv_subjects(spec.bucket)]
        what = f"bucket {spec.bucket!r}"
        return await self._reconcile(reconcile_bucket, spec, stream, subjects, what, declaring, spec.bucket)

    ensure_key_value = blocking(aensure_key_value)

    @checked(KV_GET + TARGET)
    async def akv_get(self, bucket: str, key: str, **target: Unpack[Target]) -> KvEntry | None:
        """The latest value of ``key`` in ``bucket`` (``.value`` bytes, ``.revision``, ``.created``), read in
        the bucket's domain, mirror buckets of other domains included (nats-py's ``js.key_value()``
        cannot read those); None when the key holds no value (never put, deleted or purged).
        :class:`JetStreamNotFoundError` if the bucket does not exist."""
        async with self.aapi(**target) as api:
            return await kv_get(api, bucket, key)

    kv_get = blocking(akv_get)

    @checked(KEY_CHECK + TARGET)
    async def acheck_key(
        self,
        bucket: str,
        key: str,
        *,
        value: str | None = None,
        after_revision: int | None = None,
        **target: Unpack[Target],
    ) -> KeyCheck:
        """The key check of ``JetStreamKeyValueSensor``: ``.done`` when the key holds a value (equal to
        ``value`` as UTF-8 text, and at a revision above ``after_revision``, when given); ``.reason`` says why
        not; ``.to_xcom()`` gives the decoded value and revision."""
        entry = await self.akv_get(bucket, key, **target)
        return judge_entry(bucket, key, self.describe_target(**target), entry, value, after_revision)

    check_key = blocking(acheck_key)

    @checked(KV_PUT + REQUEST)
    async def akv_put(
        self,
        bucket: str,
        key: str,
        value: Any,
        *,
        expected_revision: int | None = None,
        **request: Unpack[Request],
    ) -> int:
        """Put ``value`` under ``key`` in the bucket of the target domain (as nats.go addresses it, so
        it cannot land in a same-named bucket of another domain; a mirror bucket's write goes to its
        origin); returns the new revision.

        :param value: bytes, str (stored as UTF-8), or a dict, list, number or bool (stored as JSON).
        :param expected_revision: compare-and-set: store only if the key's latest revision is this one
            (0: only if the key does not exist); else :class:`KeyValueConflictError`. Default None.
        """
        async with self.aapi(**request) as api:
            return await kv_put(api, bucket, key, value, expected_revision=expected_revision)

    kv_put = blocking(akv_put)

    @checked(KV_DELETE + REQUEST)
    async def akv_delete(
        self,
        bucket: str,
        key: str,
        *,
        purge: bool = False,
        expected_revision: int | None = None,
        **request: Unpack[Request],
    ) -> int:
        """Delete ``key`` (a delete marker; ``purge=True`` also drops its history) in the bucket of the
        target domain; returns the marker's revision. ``expected_revision`` as in :meth:`akv_put`."""
        async with self.aapi(**request) as api:
            return await kv_delete(api, bucket, key, purge=purge, expected_revision=expected_revision)

    kv_delete = blocking(akv_delete)
