"""Operators that manage streams declaratively: create/update (plain, mirror, sourced), delete, purge.

Every "create" operator reconciles (see :mod:`airflow_provider_jetstream.core.manage.reconcile`):
``if_exists`` is ``"update"`` (default), ``"skip"``, ``"fail"`` or ``"recreate"``; ``dry_run=True``
logs the plan and changes nothing. Specs are plain dicts, validated when the DAG is parsed (or,
when they hold Jinja templates, before any request once rendered). Each returns an XCom dict:
``{"action": "created|updated|unchanged|recreated|planned", "changes": {...}, "domain": ...,
"name": ..., "state": {...}}``.

Lineage (:mod:`airflow_provider_jetstream.assets.lineage`): a create operator's OpenLineage output is
the declared stream, its inputs the origins of its mirror and sources; unless ``outlets`` are given,
its ``AssetAlias`` outlet gets an event for the stream's asset when the stream was created, updated
or recreated. Delete and purge report the stream as an OpenLineage output with a
``lifecycleStateChange`` facet (``DROP``, ``TRUNCATE``), and emit no asset event.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.manage.specs import StreamSpec
from airflow_provider_jetstream.core.signatures.durable import ENSURE_DURABLE_SOURCE
from airflow_provider_jetstream.core.signatures.operations import (
    DELETE_STREAM,
    ENSURE_STREAM,
    PURGE,
)
from airflow_provider_jetstream.core.signatures.operator_only import CREATE_MIRROR, CREATE_SOURCED
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator, ReconcileOperator


class _DeclareStreamOperator(ReconcileOperator):
    """A "create" operator of streams: reconcile the spec its arguments declare (:meth:`spec`)."""

    def spec(self) -> StreamSpec:
        """The checked spec of the stream to declare."""
        return self.checked_arguments()["spec"]

    def execute(self, context: Any) -> dict[str, Any]:
        spec = self.spec()
        result = self.get_hook().ensure_stream(spec, **self.reconcile_kwargs())
        self.record_spec_lineage(context, spec, result)
        return result


class JetStreamCreateStreamOperator(_DeclareStreamOperator):
    """Create or update a stream from a spec dict (every StreamConfig field; see docs/management.md).

    :param stream: the spec, e.g. ``{"name": "test", "subjects": ["test"], "max_age": "7d"}``.
        Sources and mirrors name their origin's ``domain`` or ``api_prefix`` (+ ``deliver_prefix``).
    :param if_exists: ``update`` | ``skip`` | ``fail`` | ``recreate`` (only this deletes data).
    :param dry_run: log the plan, change nothing; the XCom action is ``planned``.
    :param prune_sources: remove sources the spec does not name. Default False: they are kept.
    :param allow_data_loss: apply a change that discards stored data in place (``max_msgs``,
        ``max_bytes``, ``max_age`` or ``max_msgs_per_subject`` lowered, or set where there was none), or
        lowers its durability (``replicas`` lowered). Default False: refused, naming each field
        ``old -> new`` (``dry_run=True`` shows the plan).
    :param allow_double_store: create even if a stream of this account in another connected domain
        listens on the same subjects (both would store every message), or if a domain cannot be
        checked (no answer, an error reply). Default False: refused.
    :param peer_domains: more domains for that check, besides the connection's own.
    """

    arguments: Args = JetStreamBaseOperator.arguments + ENSURE_STREAM.renamed(spec="stream")
    template_fields: Sequence[str] = arguments.template_fields()
    template_fields_renderers = {"stream": "json"}

    def __init__(self, *, stream: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.declare_lineage_outlet()

    def spec(self) -> StreamSpec:
        return self.checked_arguments()["stream"]


class JetStreamCreateMirrorOperator(_DeclareStreamOperator):
    """Create or update a mirror of a stream in another domain or account, in one task.

    The seed's ``backup-test-leaf``: ``JetStreamCreateMirrorOperator(task_id=..., name="backup-test-leaf",
    source_stream="test", source_domain="leaf", domain="hub")``. Across accounts, give
    ``source_api_prefix="JS.acc@hub.API"`` and ``deliver_prefix=...`` instead of ``source_domain``.

    :param stream_overrides: other stream fields (storage, max_age, replicas...).
    """

    arguments: Args = ReconcileOperator.arguments + CREATE_MIRROR
    template_fields: Sequence[str] = arguments.template_fields()

    def __init__(
        self,
        *,
        name: str,
        source_stream: str,
        source_domain: str | None = None,
        source_api_prefix: str | None = None,
        deliver_prefix: str | None = None,
        filter_subject: str | None = None,
        subject_transforms: list[dict[str, str]] | None = None,
        start_seq: int | None = None,
        start_time: Any = None,
        stream_overrides: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.source_stream = source_stream
        self.source_domain = source_domain
        self.source_api_prefix = source_api_prefix
        self.deliver_prefix = deliver_prefix
        self.filter_subject = filter_subject
        self.subject_transforms = subject_transforms
        self.start_seq = start_seq
        self.start_time = start_time
        self.stream_overrides = stream_overrides
        self.declare_lineage_outlet()


class JetStreamCreateSourcedStreamOperator(_DeclareStreamOperator):
    """Create or update a stream that aggregates other streams (any domains/accounts), in one task.

    The seed's ``aggregate-test-leaf``: ``sources=[{"name": "test", "domain": "leaf"}]``. Updating
    one source keeps the others the server has (unless ``prune_sources=True``).

    :param sources: source specs: ``name``, ``domain`` | ``api_prefix`` (+ ``deliver_prefix``),
        ``filter_subject`` | ``subject_transforms``, ``start_seq`` | ``start_time``.
    :param subjects: subjects the stream also listens on (optional).
    :param stream_overrides: other stream fields.
    """

    arguments: Args = ReconcileOperator.arguments + CREATE_SOURCED
    template_fields: Sequence[str] = arguments.template_fields()

    def __init__(
        self,
        *,
        name: str,
        sources: list[dict[str, Any]],
        subjects: list[str] | None = None,
        stream_overrides: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.sources = sources
        self.subjects = subjects
        self.stream_overrides = stream_overrides
        self.declare_lineage_outlet()


class JetStreamCreateDurableSourceOperator(JetStreamBaseOperator):
    """Durable sourcing (nats-server 2.14+) in one task: a leaf's work-queue (or interest) stream, its
    flow-control consumer, and the hub stream's source of it through that consumer, so the leaf deletes
    only what the hub stored (see docs/management.md, "Durable sourcing").

    ``JetStreamCreateDurableSourceOperator(task_id=..., domain="hub", name="readings-all",
    origin={"name": "readings", "subjects": ["sensors.a.>"]}, origin_domain="leaf-a")``. Each object is
    reconciled (created, updated in place, unchanged); both domains must run nats-server 2.14+, checked
    before anything is sent. XCom: ``{"action", "origin", "consumer", "stream", "deliver_subject"}``.

    :param name: the hub's copying stream (in ``domain``); its other sources are kept.
    :param origin: the leaf stream's spec; ``retention`` defaults to ``workqueue`` (or ``interest``).
    :param origin_domain: the leaf's JetStream domain.
    :param consumer: more fields of the flow-control consumer (``name``: default ``sourcing-<name>``).
    :param deliver_subject: where it pushes; default ``_sourcing.<name>.<origin_domain>.<origin>``.
    :param subject_transforms: the source's subject transforms (``[{src, dest}]``), applied in the hub.
    :param stream_overrides: other fields of the hub stream.
    :param if_exists, dry_run, allow_data_loss, allow_double_store, peer_domains: as for the stream operators.
    """

    arguments: Args = OPERATOR + ENSURE_DURABLE_SOURCE
    template_fields: Sequence[str] = arguments.template_fields()
    template_fields_renderers = {"origin": "json", "consumer": "json", "stream_overrides": "json"}

    def __init__(
        self,
        *,
        name: str,
        origin: dict[str, Any],
        origin_domain: str,
        consumer: dict[str, Any] | None = None,
        deliver_subject: str | None = None,
        subject_transforms: list[dict[str, str]] | None = None,
        stream_overrides: dict[str, Any] | None = None,
        if_exists: str = "update",
        dry_run: bool = False,
        allow_data_loss: bool = False,
        allow_double_store: bool = False,
        peer_domains: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.origin = origin
        self.origin_domain = origin_domain
        self.consumer = consumer
        self.deliver_subject = deliver_subject
        self.subject_transforms = subject_transforms
        self.stream_overrides = stream_overrides
        self.if_exists = if_exists
        self.dry_run = dry_run
        self.allow_data_loss = allow_data_loss
        self.allow_double_store = allow_double_store
        self.peer_domains = peer_domains
        self.declare_lineage_outlet()

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        names = ("origin", "origin_domain", "name", "consumer", "deliver_subject", "subject_transforms")
        options = ("stream_overrides", "if_exists", "dry_run", "allow_data_loss", "allow_double_store")
        result = self.get_hook().ensure_durable_source(
            **{key: args[key] for key in (*names, *options, "peer_domains")},
            timeout=args["request_timeout"],
            logger=self.log,
        )
        self.record_spec_lineage(context, args["durable_source"].copy, result["stream"])
        return result


class JetStreamDeleteStreamOperator(JetStreamBaseOperator):
    """Delete a stream and its data. XCom: ``{"deleted": bool, "name", "domain"}``.

    :param ignore_missing: a missing stream is success (``deleted: False``). Default True.
    """

    arguments: Args = OPERATOR + DELETE_STREAM
    template_fields: Sequence[str] = arguments.template_fields()

    def __init__(self, *, name: str, ignore_missing: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.ignore_missing = ignore_missing

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        result = self.get_hook().delete_stream(
            args["name"], ignore_missing=args["ignore_missing"], timeout=args["request_timeout"], logger=self.log
        )
        if result["deleted"]:
            self.record_lifecycle_lineage(context, args["name"], "DROP")
        return result


class JetStreamPurgeStreamOperator(JetStreamBaseOperator):
    """Purge messages from a stream. XCom: ``{"purged": n, "name", "domain"}``.

    :param subject: purge only messages on this subject (wildcards allowed).
    :param keep: keep this many newest messages (per subject when ``subject`` is given).
    :param up_to_sequence: purge messages below this sequence (not with ``keep``); at most the
        stream's last sequence + 1 (checked before purging: a later one would renumber the stream).

    Each of ``subject``, ``keep``, ``up_to_sequence`` (and ``domain``, ``api_prefix``) narrows the
    purge: one given empty (a template rendering ``""`` or None) is refused, never taken as "not
    given", which would purge more.
    """

    arguments: Args = OPERATOR + PURGE
    template_fields: Sequence[str] = arguments.template_fields()

    def __init__(
        self,
        *,
        name: str,
        subject: str | None = None,
        keep: int | None = None,
        up_to_sequence: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.subject = subject
        self.keep = keep
        self.up_to_sequence = up_to_sequence

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        result = self.get_hook().purge_stream(
            args["name"],
            subject=args["subject"],
            keep=args["keep"],
            up_to_sequence=args["up_to_sequence"],
            timeout=args["request_timeout"],
            logger=self.log,
        )
        self.record_lifecycle_lineage(context, args["name"], "TRUNCATE")
        return result
