"""Operators that manage streams declaratively: create/update (plain, mirror, sourced), delete, purge.

Every "create" operator reconciles (see :mod:`airflow_provider_jetstream.core.manage.reconcile`):
``if_exists`` is ``"update"`` (default), ``"skip"``, ``"fail"`` or ``"recreate"``; its ``options``
(:class:`~airflow_provider_jetstream.core.signatures.options.DeclareOptions`, or a dict) hold the dry run
(``{"dry_run": True}`` logs the plan and changes nothing) and the guards of a change. Specs are plain dicts,
validated when the DAG is parsed (or, when they hold Jinja templates, before any request once rendered). Each
returns an XCom dict: ``{"action": "created|updated|unchanged|recreated|planned", "changes": {...}, "domain":
..., "name": ..., "state": {...}}``. The work is
:class:`~airflow_provider_jetstream.hooks.streams.JetStreamStreamsHook`'s.

Lineage (:mod:`airflow_provider_jetstream.assets.lineage`): a create operator's OpenLineage output is
the declared stream, its inputs the origins of its mirror and sources; unless ``outlets`` are given,
its ``AssetAlias`` outlet gets an event for the stream's asset when the stream was created, updated
or recreated. Delete and purge report the stream as an OpenLineage output with a
``lifecycleStateChange`` facet (``DROP``, ``TRUNCATE``), and emit no asset event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.arguments.options import Options
from airflow_provider_jetstream.core.manage.specs import StreamSpec
from airflow_provider_jetstream.core.signatures.durable import create_durable_source
from airflow_provider_jetstream.core.signatures.operations import DELETE_STREAM, ENSURE_STREAM, PURGE
from airflow_provider_jetstream.core.signatures.operator_only import CREATE_SOURCED, create_mirror
from airflow_provider_jetstream.core.signatures.options import (
    DeclareOptions,
    DurableSourceOptions,
    MirrorOptions,
    family_options,
)
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.hooks.streams import JetStreamStreamsHook
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator, ReconcileOperator, declare_arguments

__all__ = [
    "DeclareOptions",
    "DurableSourceOptions",
    "JetStreamCreateDurableSourceOperator",
    "JetStreamCreateMirrorOperator",
    "JetStreamCreateSourcedStreamOperator",
    "JetStreamCreateStreamOperator",
    "JetStreamDeleteStreamOperator",
    "JetStreamPurgeStreamOperator",
    "MirrorOptions",
]

#: The declare options a stream operator takes (all of :class:`DeclareOptions`: ``ensure_stream`` takes each).
_STREAM_DECLARE = declare_arguments()


class _DeclareStreamOperator(ReconcileOperator):
    """A "create" operator of streams: reconcile the spec its arguments declare (:meth:`spec`)."""

    hook_class = JetStreamStreamsHook

    def spec(self) -> StreamSpec:
        """The checked spec of the stream to declare."""
        return self.checked_arguments()["spec"]

    def execute(self, context: Any) -> dict[str, Any]:
        spec = self.spec()
        result = self.get_hook().ensure_stream(spec, **self.reconcile_kwargs())
        self.record_spec_lineage(context, spec, result)
        return result


class _CopyingStreamOperator(_DeclareStreamOperator):
    """A "create" operator of a stream that copies others (a mirror, a sourced stream, a durable source's copy):
    the stream's name (``stream``) and its other fields (``stream_overrides``) are arguments of its own."""

    def __init__(self, *, stream: str, stream_overrides: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.stream_overrides = stream_overrides
        self.declare_lineage_outlet()


class JetStreamCreateStreamOperator(_DeclareStreamOperator):
    """Create or update a stream from a spec dict (every StreamConfig field; see docs/management.md).

    :param stream: the stream to declare, its spec: ``{"name": "test", "subjects": ["test"], "max_age": "7d"}``.
        Sources and mirrors name their origin's ``domain`` or ``api_prefix`` (+ ``deliver_prefix``).
    :param if_exists: ``update`` (default) | ``skip`` | ``fail`` | ``recreate`` (only this deletes data).
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.DeclareOptions` or a dict of its
        fields: ``dry_run`` (log the plan, change nothing; the XCom action is ``planned``), ``prune_sources``
        (remove sources the spec does not name), ``allow_data_loss`` (apply in place a change that discards
        stored data or lowers ``replicas``: refused by default, naming each field ``old -> new``),
        ``allow_double_store`` (create even if a stream of this account in another connected domain listens on
        the same subjects, or a domain cannot be checked: refused by default), ``peer_domains`` (more domains
        for that check), ``allow_unreachable_origins`` (declare a mirror or source of an origin domain that does not
        answer and was never seen: refused by default, a wrong domain name?).
    """

    arguments: Args = OPERATOR + Args("create stream", {"stream": ENSURE_STREAM.args["stream"]}) + _STREAM_DECLARE
    template_fields_renderers = {"stream": "json"}

    def __init__(self, *, stream: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.declare_lineage_outlet()

    def spec(self) -> StreamSpec:
        return self.checked_arguments()["stream"]


class JetStreamCreateMirrorOperator(_CopyingStreamOperator):
    """Create or update a mirror of a stream in another domain or account, in one task.

    The seed's ``backup-test-leaf``: ``JetStreamCreateMirrorOperator(task_id=..., stream="backup-test-leaf",
    origin="test", origin_domain="leaf", domain="hub")``. Across accounts, give
    ``origin_api_prefix="JS.acc@hub.API"`` and ``options={"deliver_prefix": ...}`` instead of ``origin_domain``.

    :param stream: the mirror's name.
    :param origin: the stream it copies.
    :param origin_domain: the origin's JetStream domain.
    :param origin_api_prefix: the origin's API prefix (another account), instead of ``origin_domain``.
    :param filter_subjects: copy only messages on this subject filter (wildcards allowed; text or a list of one).
    :param start_seq: first origin sequence to copy; 0 or None (default): from the first.
    :param start_time: copy from the first message stored at or after this instant (with a time zone).
    :param stream_overrides: other stream fields (storage, max_age, replicas...).
    :param if_exists: as :class:`JetStreamCreateStreamOperator`'s.
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.MirrorOptions` or a dict: the
        declare options, ``deliver_prefix`` (an imported origin's delivery prefix) and ``subject_transforms``.
    """

    arguments: Args = (
        OPERATOR
        + create_mirror(family_options(MirrorOptions, "MirrorOptions or a dict of its fields"))
        + Args("declare", {"if_exists": _STREAM_DECLARE.args["if_exists"]})
    )

    def __init__(
        self,
        *,
        origin: str,
        origin_domain: str | None = None,
        origin_api_prefix: str | None = None,
        filter_subjects: str | list[str] | None = None,
        start_seq: int | None = None,
        start_time: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.origin = origin
        self.origin_domain = origin_domain
        self.origin_api_prefix = origin_api_prefix
        self.filter_subjects = filter_subjects
        self.start_seq = start_seq
        self.start_time = start_time


class JetStreamCreateSourcedStreamOperator(_CopyingStreamOperator):
    """Create or update a stream that aggregates other streams (any domains/accounts), in one task.

    The seed's ``aggregate-test-leaf``: ``stream="aggregate-test-leaf", sources=[{"name": "test", "domain":
    "leaf"}]``. Updating one source keeps the others the server has (unless ``options={"prune_sources": True}``).

    :param stream: the stream's name.
    :param sources: the stream's sources, each a spec: ``name``, ``domain`` | ``api_prefix`` (+
        ``deliver_prefix``), ``filter_subject`` | ``subject_transforms``, ``start_seq`` | ``start_time``.
    :param subjects: subjects the stream also listens on (optional).
    :param stream_overrides: other stream fields.
    :param if_exists, options: as :class:`JetStreamCreateStreamOperator`'s.
    """

    arguments: Args = OPERATOR + CREATE_SOURCED + _STREAM_DECLARE

    def __init__(self, *, sources: list[dict[str, Any]], subjects: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sources = sources
        self.subjects = subjects


class JetStreamCreateDurableSourceOperator(_CopyingStreamOperator):
    """Durable sourcing (nats-server 2.14+) in one task: a leaf's work-queue (or interest) stream, its
    flow-control consumer, and the hub stream's source of it through that consumer, so the leaf deletes
    only what the hub stored (see docs/management.md, "Durable sourcing").

    ``JetStreamCreateDurableSourceOperator(task_id=..., domain="hub", stream="readings-all",
    origin={"name": "readings", "subjects": ["sensors.a.>"]}, origin_domain="leaf-a")``. Each object is
    reconciled (created, updated in place, unchanged); both domains must run nats-server 2.14+, checked
    before anything is sent. XCom: ``{"action", "origin", "consumer", "stream", "deliver_subject"}``.

    :param stream: the hub's copying stream (in ``domain``); its other sources are kept.
    :param origin: the leaf stream's spec; ``retention`` defaults to ``workqueue`` (or ``interest``).
    :param origin_domain: the leaf's JetStream domain.
    :param consumer: the flow-control consumer's fields (``name``: default ``sourcing-<stream>``).
    :param stream_overrides: other fields of the hub stream.
    :param if_exists: as for the stream operators.
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.DurableSourceOptions` or a dict:
        the declare options (without ``prune_sources``), ``deliver_subject`` (where the consumer pushes; default
        ``_sourcing.<stream>.<origin_domain>.<origin>``) and ``subject_transforms`` (``[{src, dest}]``, applied in
        the hub).
    """

    arguments: Args = OPERATOR + create_durable_source(
        declare_arguments(DurableSourceOptions, without=("prune_sources",))
    )
    template_fields_renderers = {"origin": "json", "consumer": "json", "stream_overrides": "json"}
    declare_fields = ("dry_run", "allow_data_loss", "allow_double_store", "peer_domains", "allow_unreachable_origins")

    def __init__(
        self,
        *,
        origin: dict[str, Any],
        origin_domain: str,
        consumer: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.origin = origin
        self.origin_domain = origin_domain
        self.consumer = consumer

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        options: Options = args["options"]
        result = self.get_hook().ensure_durable_source(
            **{key: args[key] for key in ("origin", "origin_domain", "stream", "consumer", "stream_overrides")},
            deliver_subject=options.deliver_subject,  # type: ignore[attr-defined]
            subject_transforms=options.subject_transforms,  # type: ignore[attr-defined]
            **self.reconcile_kwargs(),
        )
        self.record_spec_lineage(context, args["durable_source"].copy, result["stream"])
        return result


class JetStreamDeleteStreamOperator(JetStreamBaseOperator):
    """Delete a stream and its data. XCom: ``{"deleted": bool, "stream", "domain"}``.

    :param stream: the stream's name.
    :param ignore_missing: a missing stream is success (``deleted: False``). Default True.
    """

    hook_class = JetStreamStreamsHook
    arguments: Args = OPERATOR + DELETE_STREAM

    def __init__(self, *, stream: str, ignore_missing: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.ignore_missing = ignore_missing

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        result = self.get_hook().delete_stream(
            args["stream"],
            ignore_missing=args["ignore_missing"],
            request_timeout=args["request_timeout"],
            logger=self.log,
        )
        if result["deleted"]:
            self.record_lifecycle_lineage(context, args["stream"], "DROP")
        return result


class JetStreamPurgeStreamOperator(JetStreamBaseOperator):
    """Purge messages from a stream. XCom: ``{"purged": n, "stream", "domain"}``.

    :param stream: the stream's name.
    :param subject: purge only messages on this subject (wildcards allowed).
    :param keep: keep this many newest messages (per subject when ``subject`` is given).
    :param up_to_seq: purge messages below this sequence (not with ``keep``); at most the
        stream's last sequence + 1 (checked before purging: a later one would renumber the stream).

    Each of ``subject``, ``keep``, ``up_to_seq`` (and ``domain``, ``api_prefix``) narrows the
    purge: one given empty (a template rendering ``""`` or None) is refused, never taken as "not
    given", which would purge more.
    """

    hook_class = JetStreamStreamsHook
    arguments: Args = OPERATOR + PURGE

    def __init__(
        self,
        *,
        stream: str,
        subject: str | None = None,
        keep: int | None = None,
        up_to_seq: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.subject = subject
        self.keep = keep
        self.up_to_seq = up_to_seq

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        result = self.get_hook().purge_stream(
            args["stream"],
            subject=args["subject"],
            keep=args["keep"],
            up_to_seq=args["up_to_seq"],
            request_timeout=args["request_timeout"],
            logger=self.log,
        )
        self.record_lifecycle_lineage(context, args["stream"], "TRUNCATE")
        return result
