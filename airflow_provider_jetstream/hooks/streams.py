"""``JetStreamStreamsHook``: declare streams, consumers and KV buckets, read stream info (sync and async).

The declaring layer of :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook` (use that
class): the reconcile rules and double-store check of the "create" operators, as hook methods.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi, domain_of
from airflow_provider_jetstream.core.errors import JetStreamNotFoundError, SpecError, SpecErrors
from airflow_provider_jetstream.core.manage.buckets import reconcile_bucket
from airflow_provider_jetstream.core.manage.double_store import guard_double_store
from airflow_provider_jetstream.core.manage.durable_source import (
    DurableSource,
    check_deliver_subject,
    check_delivery_kept,
    check_durable_levels,
)
from airflow_provider_jetstream.core.manage.reconcile import reconcile_consumer, reconcile_stream
from airflow_provider_jetstream.core.manage.specs import ConsumerSpec, KeyValueSpec, StreamSpec
from airflow_provider_jetstream.core.manage.specs.kv import kv_subjects
from airflow_provider_jetstream.core.signatures.durable import ENSURE_DURABLE_SOURCE
from airflow_provider_jetstream.core.signatures.operations import (
    DELETE_CONSUMER,
    DELETE_STREAM,
    ENSURE_BUCKET,
    ENSURE_CONSUMER,
    ENSURE_STREAM,
    PURGE,
    STREAM_INFO,
)
from airflow_provider_jetstream.core.signatures.shared import LOG, REQUEST
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook, blocking, checked

Logger = logging.Logger | logging.LoggerAdapter


class JetStreamStreamsHook(JetStreamBaseHook):
    """Streams, consumers and KV buckets declared as the operators declare them (see
    :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`, which adds checks, KV and publish).
    """

    # -- declare: the reconcile rules of the "create" operators ------------------------------------

    @checked(ENSURE_STREAM + REQUEST + LOG)
    async def aensure_stream(
        self,
        spec: StreamSpec | Mapping[str, Any],
        *,
        if_exists: str = "update",
        dry_run: bool = False,
        prune_sources: bool = False,
        allow_data_loss: bool = False,
        allow_double_store: bool = False,
        peer_domains: list[str] | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """Create or update a stream (plain, mirror or sourced) from a spec, as
        ``JetStreamCreateStreamOperator`` does; returns the operator's XCom dict:
        ``{"action": "created|updated|unchanged|recreated|planned", "changes", "domain", "name", "state", ...}``.

        :param spec: a :class:`StreamSpec` or its dict, e.g. ``{"name": "test", "subjects": ["test"]}``.
        :param if_exists: ``"update"`` (default) | ``"skip"`` | ``"fail"`` | ``"recreate"`` (only this
            deletes data). A change the server cannot apply in place raises :class:`ReconcileError`.
        :param dry_run: plan only, change nothing (action ``"planned"``). Default False.
        :param prune_sources: remove sources the spec does not name. Default False: kept.
        :param allow_data_loss: apply in place a change that discards stored data (``max_msgs``,
            ``max_bytes``, ``max_age`` or ``max_msgs_per_subject`` lowered, or set where there was none), or
            lowers its durability (``replicas`` lowered). Default False: :class:`ReconcileError` naming
            each such field ``old -> new``.
        :param allow_double_store: create even if another connected domain of this account stores the
            same subjects, or a domain cannot be checked. Default False: ``DoubleStoreError``.
        :param peer_domains: more domains for that check, besides the connection's own.
        """
        stream: StreamSpec = spec  # type: ignore[assignment]  # checked: a StreamSpec
        logger = logger or self.log
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            guard = await self.double_store_guard(
                api,
                stream.listen_subjects(),
                f"stream {stream.name!r}",
                allow_double_store,
                logger,
                peer_domains,
                stream,
            )
            result = await reconcile_stream(
                api,
                stream,
                if_exists=if_exists,
                dry_run=dry_run,
                prune_sources=prune_sources,
                allow_data_loss=allow_data_loss,
                guard=guard,
                logger=logger,
            )
        return result.as_xcom()

    ensure_stream = blocking(aensure_stream)

    @checked(ENSURE_CONSUMER + REQUEST + LOG)
    async def aensure_consumer(
        self,
        stream: str,
        spec: ConsumerSpec | Mapping[str, Any],
        *,
        if_exists: str = "update",
        dry_run: bool = False,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """Create or update a durable pull consumer on ``stream``, as ``JetStreamCreateConsumerOperator``
        does; returns its XCom dict (``action``, ``changes``, ``state``..., and ``stream``).

        :param spec: a :class:`ConsumerSpec` or its dict, e.g. ``{"name": "dur", "ack_wait": "30s"}``.
        :param if_exists: ``"update"`` (default) | ``"skip"`` | ``"fail"`` | ``"recreate"`` (only this
            deletes the consumer's delivery state).
        :param dry_run: plan only, change nothing. Default False.
        """
        consumer: ConsumerSpec = spec  # type: ignore[assignment]  # checked: a ConsumerSpec
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            result = await reconcile_consumer(
                api, stream, consumer, if_exists=if_exists, dry_run=dry_run, logger=logger or self.log
            )
        return {**result.as_xcom(), "stream": stream}

    ensure_consumer = blocking(aensure_consumer)

    @checked(ENSURE_DURABLE_SOURCE + REQUEST + LOG)
    async def aensure_durable_source(
        self,
        origin: StreamSpec | Mapping[str, Any],
        origin_domain: str,
        name: str,
        *,
        consumer: Mapping[str, Any] | None = None,
        deliver_subject: str | None = None,
        subject_transforms: list[Mapping[str, Any]] | None = None,
        stream_overrides: Mapping[str, Any] | None = None,
        if_exists: str = "update",
        dry_run: bool = False,
        allow_data_loss: bool = False,
        allow_double_store: bool = False,
        peer_domains: list[str] | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """Durable sourcing (nats-server 2.14+) in one call, as ``JetStreamCreateDurableSourceOperator``
        does: the work-queue (or interest) stream ``origin`` in ``origin_domain``, its flow-control consumer,
        and stream ``name`` in ``domain`` sourcing it through that consumer, so the origin deletes only
        what the copy stored (see :mod:`airflow_provider_jetstream.core.manage.durable_source`).

        Both domains' servers are checked first (JetStream API level 4), and the deliver subject (no stream
        of either domain may listen there, and an existing durable source keeps its own: the server cannot
        move it): an older server, such a stream or a moved deliver subject is refused before anything
        is sent to either. Then each object is reconciled in that order, with the rules of
        :meth:`aensure_stream` and :meth:`aensure_consumer` (created, updated in place, unchanged; a change
        needing a new object refused unless ``if_exists="recreate"``). The copy's other sources are kept.
        Returns ``{"action", "origin", "consumer", "stream", "deliver_subject"}``: each object's XCom dict,
        and ``action`` the strongest of theirs (created > recreated > updated > planned > unchanged).

        :param origin: the origin stream's spec; ``retention`` defaults to ``workqueue``.
        :param consumer: more consumer fields (``name``: default ``sourcing-<name>``).
        :param deliver_subject: where the consumer pushes; default ``_sourcing.<name>.<origin_domain>.<origin>``.
        :param subject_transforms: the source's subject transforms, applied in the copy.
        :param stream_overrides: other fields of the copying stream (used when it is created or named).
        """
        plan = DurableSource.build(
            origin=origin,
            origin_domain=origin_domain,
            name=name,
            consumer=consumer,
            deliver_subject=deliver_subject,
            subject_transforms=subject_transforms,
            stream_overrides=stream_overrides,
        )
        logger = logger or self.log
        common = {"if_exists": if_exists, "dry_run": dry_run, "timeout": timeout, "logger": logger}
        guarded = {"allow_data_loss": allow_data_loss, "allow_double_store": allow_double_store}
        peers = [*(peer_domains or []), origin_domain]
        async with (
            self.aapi(origin_domain, None, timeout=timeout) as origin_api,
            self.aapi(domain, api_prefix, timeout=timeout) as copy_api,
        ):
            await check_durable_levels(origin_api, copy_api, plan)
            await check_deliver_subject(copy_api, plan)
            await check_delivery_kept(origin_api, copy_api, plan)
        stream = await self.aensure_stream(
            plan.origin,
            domain=origin_domain,
            peer_domains=[*(peer_domains or []), domain] if domain else peer_domains,
            **common,
            **guarded,
        )
        made = await self.aensure_consumer(plan.origin.name, plan.consumer, domain=origin_domain, **common)
        copy = await self.aensure_stream(
            plan.copy, domain=domain, api_prefix=api_prefix, peer_domains=peers, **common, **guarded
        )
        actions = [stream["action"], made["action"], copy["action"]]
        action = next((a for a in ("created", "recreated", "updated", "planned") if a in actions), "unchanged")
        logger.info(
            "durable source of %r in domain %r into %r: %s (stream %s, consumer %r %s, copy %s)",
            plan.origin.name,
            origin_domain,
            name,
            action,
            stream["action"],
            plan.consumer.name,
            made["action"],
            copy["action"],
        )
        return {
            "action": action,
            "origin": stream,
            "consumer": made,
            "stream": copy,
            "deliver_subject": plan.deliver_subject,
        }

    ensure_durable_source = blocking(aensure_durable_source)

    @checked(ENSURE_BUCKET + REQUEST + LOG)
    async def aensure_key_value(
        self,
        spec: KeyValueSpec | Mapping[str, Any] | str,
        *,
        if_exists: str = "update",
        dry_run: bool = False,
        prune_sources: bool = False,
        allow_data_loss: bool = False,
        allow_double_store: bool = False,
        peer_domains: list[str] | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """Create or update a KV bucket (mirrors and sources in other domains included, laid out as
        nats.go makes them), as ``JetStreamCreateKeyValueOperator`` does; returns its XCom dict.

        :param spec: a bucket name, a :class:`KeyValueSpec` or its dict, e.g. ``{"bucket": "config",
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
        """
        bucket: KeyValueSpec = spec  # type: ignore[assignment]  # checked: a KeyValueSpec
        logger = logger or self.log
        stream = bucket.stream_spec()
        subjects = [] if stream.is_mirror else [kv_subjects(bucket.bucket)]
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            guard = await self.double_store_guard(
                api,
                subjects,
                f"bucket {bucket.bucket!r}",
                allow_double_store,
                logger,
                peer_domains,
                stream,
                bucket=bucket.bucket,
            )
            result = await reconcile_bucket(
                api,
                bucket,
                if_exists=if_exists,
                dry_run=dry_run,
                prune_sources=prune_sources,
                allow_data_loss=allow_data_loss,
                guard=guard,
                logger=logger,
            )
        return result.as_xcom()

    ensure_key_value = blocking(aensure_key_value)

    async def double_store_guard(
        self,
        api: JetStreamApi,
        subjects: list[str],
        what: str,
        allow: bool,
        logger: Logger,
        peers: list[str],
        stream: StreamSpec | None = None,
        bucket: str | None = None,
    ) -> Any:
        """The double-store check run before a create: no other known domain (the connection's, those
        the spec's mirror/sources name, ``peers``) stores these subjects too."""
        config = await self.aget_conn_config()
        named = stream.origin_domains() if stream is not None else []
        domains = [d for d in dict.fromkeys([config.domain, *named, *peers]) if d]

        async def guard() -> Any:
            return await guard_double_store(
                api.nc,
                target_prefix=api.prefix,
                subjects=subjects,
                what=what,
                bucket=bucket,
                peer_domains=domains,
                allow=allow,
                timeout=api.timeout,
                logger=logger,
            )

        return guard

    @checked(STREAM_INFO + REQUEST)
    async def astream_info(
        self, name: str, *, domain: str | None = None, api_prefix: str | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """The server's ``STREAM.INFO`` of stream ``name`` as JSON (``config``, ``state``, ``mirror``,
        ``sources``...), every field the server sends; :class:`JetStreamNotFoundError` if it does not exist."""
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            info = await api.stream_info(name)
        if info is None:
            raise JetStreamNotFoundError(f"stream {name!r} does not exist in {api.target}")
        return info

    stream_info = blocking(astream_info)

    # -- delete and purge: the only calls that remove data, each asked for explicitly --------------

    @checked(DELETE_STREAM + REQUEST + LOG)
    async def adelete_stream(
        self,
        name: str,
        *,
        ignore_missing: bool = True,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """Delete stream ``name`` and its data, as ``JetStreamDeleteStreamOperator`` does; returns
        ``{"deleted": bool, "name", "domain"}``.

        :param ignore_missing: a missing stream is success (``deleted: False``). Default True; False
            raises the server's refusal (:class:`JetStreamApiError`).
        """
        logger = logger or self.log
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            deleted = await api.delete_stream(name, missing_ok=ignore_missing)
        if deleted:
            logger.info("deleted stream %r in %s", name, api.target)
        else:
            logger.info("stream %r does not exist in %s: nothing to delete", name, api.target)
        return {"deleted": deleted, "name": name, "domain": domain_of(api.prefix)}

    delete_stream = blocking(adelete_stream)

    @checked(PURGE + REQUEST + LOG)
    async def apurge_stream(
        self,
        name: str,
        *,
        subject: str | None = None,
        keep: int | None = None,
        up_to_sequence: int | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """Purge messages from stream ``name``, as ``JetStreamPurgeStreamOperator`` does; returns
        ``{"purged": n, "name", "domain"}``. With none of the options, every message is purged.

        :param subject: only messages on this subject (wildcards allowed).
        :param keep: keep this many newest messages (per subject with ``subject``).
        :param up_to_sequence: purge the messages below this sequence (not with ``keep``); at most the
            stream's last sequence + 1, checked before purging: a later one would renumber the stream.

        Each of these (and ``domain``, ``api_prefix``) narrows the purge: given empty (``""``) it is
        refused, never taken as "not given", which would purge more.
        """
        body = {
            key: value
            for key, value in (("filter", subject), ("keep", keep), ("seq", up_to_sequence))
            if value is not None
        }
        logger = logger or self.log
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            if "seq" in body:
                await self._check_purge_bound(api, name, body["seq"])
            purged = await api.purge_stream(name, body)
        logger.info("purged %d messages from stream %r in %s (%s)", purged, name, api.target, body or "all")
        return {"purged": purged, "name": name, "domain": domain_of(api.prefix)}

    purge_stream = blocking(apurge_stream)

    @staticmethod
    async def _check_purge_bound(api: JetStreamApi, name: str, seq: int) -> None:
        """Refuse a purge up to a sequence past ``last_seq + 1``: the server would move the stream's first
        sequence there, and the next message would get that number (every sequence checkpoint of a reader
        would then point at messages that never existed)."""
        info = await api.stream_info(name)
        if info is None:
            raise JetStreamNotFoundError(f"stream {name!r} does not exist in {api.target}")
        last = int((info.get("state") or {}).get("last_seq") or 0)
        if seq > last + 1:
            raise SpecErrors(
                [
                    SpecError(
                        "up_to_sequence",
                        seq,
                        f"use at most {last + 1} (the last sequence of stream {name!r} in {api.target} is "
                        f"{last}): purging up to a later sequence would renumber the stream, so that the next "
                        f"message gets sequence {seq} instead of {last + 1}; nothing was purged",
                    )
                ]
            )

    @checked(DELETE_CONSUMER + REQUEST + LOG)
    async def adelete_consumer(
        self,
        stream: str,
        name: str,
        *,
        ignore_missing: bool = True,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """Delete consumer ``name`` of ``stream``, as ``JetStreamDeleteConsumerOperator`` does; returns
        ``{"deleted": bool, "stream", "name", "domain"}``.

        :param ignore_missing: a missing consumer (or stream) is success. Default True; False raises the
            server's refusal (:class:`JetStreamApiError`).
        """
        logger = logger or self.log
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            deleted = await api.delete_consumer(stream, name, missing_ok=ignore_missing)
        if deleted:
            logger.info("deleted consumer %r on stream %r in %s", name, stream, api.target)
        else:
            logger.info("consumer %r on %r does not exist in %s", name, stream, api.target)
        return {"deleted": deleted, "stream": stream, "name": name, "domain": domain_of(api.prefix)}

    delete_consumer = blocking(adelete_consumer)
