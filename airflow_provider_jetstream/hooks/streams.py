"""``JetStreamStreamsHook``: the streams role: declare streams, mirrors, sources and durable sources, read a
stream's info, delete and purge (sync and async).

The reconcile rules and double-store check of the stream operators, as hook methods; usable alone, or as
part of :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.core.api import JetStreamApi, domain_of
from airflow_provider_jetstream.core.errors import JetStreamNotFoundError, SpecError, SpecErrors
from airflow_provider_jetstream.core.manage.durable_source import (
    DurableSource,
    check_deliver_subject,
    check_delivery_kept,
    check_durable_levels,
    check_origin_answers,
)
from airflow_provider_jetstream.core.manage.reconcile import plan_new_consumer, reconcile_stream
from airflow_provider_jetstream.core.manage.specs import StreamSpec
from airflow_provider_jetstream.core.signatures.durable import ENSURE_DURABLE_SOURCE
from airflow_provider_jetstream.core.signatures.operations import DELETE_STREAM, ENSURE_STREAM, PURGE, STREAM_INFO
from airflow_provider_jetstream.core.signatures.shared import LOG, REQUEST
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.consumers import JetStreamConsumersHook
from airflow_provider_jetstream.hooks.methods import Declaring, Logged, Request, blocking, checked

if TYPE_CHECKING:
    from typing_extensions import Unpack


class JetStreamStreamsHook(JetStreamBaseHook):
    """Streams declared as the stream operators declare them (plain, mirror, sourced, durable source), a
    stream's info, delete and purge; every method in any domain (see
    :class:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook` for the connection arguments).
    """

    # -- declare: the reconcile rules of the "create" operators ------------------------------------

    @checked(ENSURE_STREAM + REQUEST + LOG)
    async def aensure_stream(
        self, stream: StreamSpec | Mapping[str, Any], **declaring: Unpack[Declaring]
    ) -> dict[str, Any]:
        """Create or update a stream (plain, mirror or sourced) from a spec, as
        ``JetStreamCreateStreamOperator`` does; returns the operator's XCom dict:
        ``{"action": "created|updated|unchanged|recreated|planned", "changes", "domain", "name", "state", ...}``.

        :param stream: the stream to declare: a :class:`StreamSpec` or its dict, e.g. ``{"name": "test",
            "subjects": ["test"]}``.
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
        :param allow_unreachable_origins: declare a mirror or source of an origin domain that does not answer now and
            was never seen (no copy of it in the target, not in ``peer_domains``). Default False:
            :class:`UnknownOriginDomainError` (a wrong domain name?); a known domain that does not answer is declared
            with a warning in the result's ``notes``.
        """
        spec: StreamSpec = stream  # type: ignore[assignment]  # checked: a StreamSpec
        what = f"stream {spec.name!r}"
        return await self._reconcile(reconcile_stream, spec, spec, spec.listen_subjects(), what, declaring)

    ensure_stream = blocking(aensure_stream)

    @checked(ENSURE_DURABLE_SOURCE + REQUEST + LOG)
    async def aensure_durable_source(
        self,
        origin: StreamSpec | Mapping[str, Any],
        origin_domain: str,
        stream: str,
        *,
        consumer: Mapping[str, Any] | None = None,
        deliver_subject: str | None = None,
        subject_transforms: list[Mapping[str, Any]] | None = None,
        stream_overrides: Mapping[str, Any] | None = None,
        **declaring: Unpack[Declaring],
    ) -> dict[str, Any]:
        """Durable sourcing (nats-server 2.14+) in one call, as ``JetStreamCreateDurableSourceOperator``
        does: the work-queue (or interest) stream ``origin`` in ``origin_domain``, its flow-control consumer,
        and ``stream`` in ``domain`` sourcing it through that consumer, so the origin deletes only
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
        :param consumer: the flow-control consumer's fields (``name``: default ``sourcing-<stream>``).
        :param deliver_subject: where the consumer pushes; default ``_sourcing.<stream>.<origin_domain>.<origin>``.
        :param subject_transforms: the source's subject transforms, applied in the copy.
        :param stream_overrides: other fields of the copying stream (used when it is created or named).
        """
        # The declaration's rule built the three objects from these arguments when it checked them.
        plan: DurableSource = declaring.pop("durable_source")  # type: ignore[typeddict-item]
        logger = declaring["logger"] = declaring["logger"] or self.log
        domain, request_timeout, peers = declaring["domain"], declaring["request_timeout"], declaring["peer_domains"]
        async with (
            self.aapi(origin_domain, None, request_timeout=request_timeout) as origin_api,
            self.aapi(domain, declaring["api_prefix"], request_timeout=request_timeout) as copy_api,
        ):
            await check_origin_answers(
                copy_api, plan, peer_domains=peers or (), allow=declaring["allow_unreachable_origins"]
            )
            await check_durable_levels(origin_api, copy_api, plan)
            await check_deliver_subject(copy_api, plan)
            await check_delivery_kept(origin_api, copy_api, plan)
        in_origin = {"domain": origin_domain, "api_prefix": None, "peer_domains": [*peers, domain] if domain else peers}
        origin_result = await self.aensure_stream(plan.origin, **{**declaring, **in_origin})
        reconciling = {name: declaring[name] for name in ("if_exists", "dry_run", "request_timeout", "logger")}
        consumers = self.role(JetStreamConsumersHook)
        if declaring["dry_run"] and origin_result.get("plan") in ("create", "recreate"):
            # The origin stream is planned, not there: its consumer would be created with it.
            async with self.aapi(origin_domain, None, request_timeout=request_timeout) as origin_api:
                made = plan_new_consumer(origin_api, plan.origin.name, plan.consumer, logger=logger).as_xcom()
        else:
            made = await consumers.aensure_consumer(
                plan.origin.name, plan.consumer, domain=origin_domain, **reconciling
            )
        copy = await self.aensure_stream(plan.copy, **{**declaring, "peer_domains": [*peers, origin_domain]})
        actions = [origin_result["action"], made["action"], copy["action"]]
        action = next((a for a in ("created", "recreated", "updated", "planned") if a in actions), "unchanged")
        logger.info(
            "durable source of %r in domain %r into %r: %s (stream %s, consumer %r %s, copy %s)",
            plan.origin.name,
            origin_domain,
            stream,
            action,
            origin_result["action"],
            plan.consumer.name,
            made["action"],
            copy["action"],
        )
        return {
            "action": action,
            "origin": origin_result,
            "consumer": made,
            "stream": copy,
            "deliver_subject": plan.deliver_subject,
        }

    ensure_durable_source = blocking(aensure_durable_source)

    @checked(STREAM_INFO + REQUEST)
    async def astream_info(self, stream: str, **request: Unpack[Request]) -> dict[str, Any]:
        """The server's ``STREAM.INFO`` of ``stream`` as JSON (``config``, ``state``, ``mirror``, ``sources``...),
        every field the server sends; :class:`JetStreamNotFoundError` if it does not exist."""
        async with self.aapi(**request) as api:
            info = await api.stream_info(stream)
        if info is None:
            raise JetStreamNotFoundError(f"stream {stream!r} does not exist in {api.target}")
        return info

    stream_info = blocking(astream_info)

    # -- delete and purge: the only calls that remove data, each asked for explicitly --------------

    @checked(DELETE_STREAM + REQUEST + LOG)
    async def adelete_stream(
        self, stream: str, *, ignore_missing: bool = True, **logged: Unpack[Logged]
    ) -> dict[str, Any]:
        """Delete ``stream`` and its data, as ``JetStreamDeleteStreamOperator`` does; returns
        ``{"deleted": bool, "stream", "domain"}``.

        :param ignore_missing: a missing stream is success (``deleted: False``). Default True; False
            raises the server's refusal (:class:`JetStreamApiError`).
        """
        deleted, domain = await self._delete(
            f"stream {stream!r}", lambda api: api.delete_stream(stream, missing_ok=ignore_missing), **logged
        )
        return {"deleted": deleted, "stream": stream, "domain": domain}

    delete_stream = blocking(adelete_stream)

    @checked(PURGE + REQUEST + LOG)
    async def apurge_stream(
        self,
        stream: str,
        *,
        subject: str | None = None,
        keep: int | None = None,
        up_to_seq: int | None = None,
        **logged: Unpack[Logged],
    ) -> dict[str, Any]:
        """Purge messages from ``stream``, as ``JetStreamPurgeStreamOperator`` does; returns
        ``{"purged": n, "stream", "domain"}``. With none of the options, every message is purged.

        :param subject: only messages on this subject (wildcards allowed).
        :param keep: keep this many newest messages (per subject with ``subject``).
        :param up_to_seq: purge the messages below this sequence (not with ``keep``); at most the
            stream's last sequence + 1, checked before purging: a later one would renumber the stream.

        Each of these (and ``domain``, ``api_prefix``) narrows the purge: given empty (``""``) it is
        refused, never taken as "not given", which would purge more.
        """
        body = {
            key: value for key, value in (("filter", subject), ("keep", keep), ("seq", up_to_seq)) if value is not None
        }
        logger = logged.pop("logger") or self.log
        async with self.aapi(**logged) as api:
            if "seq" in body:
                await self._check_purge_bound(api, stream, body["seq"])
            purged = await api.purge_stream(stream, body)
        logger.info("purged %d messages from stream %r in %s (%s)", purged, stream, api.target, body or "all")
        return {"purged": purged, "stream": stream, "domain": domain_of(api.prefix)}

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
                        "up_to_seq",
                        seq,
                        f"use at most {last + 1} (the last sequence of stream {name!r} in {api.target} is "
                        f"{last}): purging up to a later sequence would renumber the stream, so that the next "
                        f"message gets sequence {seq} instead of {last + 1}; nothing was purged",
                    )
                ]
            )
