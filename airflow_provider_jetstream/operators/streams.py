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

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.specs import StreamSpec
from airflow_provider_jetstream.core.names import validate_name
from airflow_provider_jetstream.hooks.args import purge_request
from airflow_provider_jetstream.operators.base import (
    JetStreamBaseOperator,
    ReconcileOperator,
    as_bool,
    one_spec_error,
)
from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time


class JetStreamCreateStreamOperator(ReconcileOperator):
    """Create or update a stream from a spec dict (every StreamConfig field; see docs/management.md).

    :param stream: the spec, e.g. ``{"name": "test", "subjects": ["test"], "max_age": "7d"}``.
        Sources and mirrors name their origin's ``domain`` or ``api_prefix`` (+ ``deliver_prefix``).
    :param if_exists: ``update`` | ``skip`` | ``fail`` | ``recreate`` (only this deletes data).
    :param dry_run: log the plan, change nothing; the XCom action is ``planned``.
    :param prune_sources: remove sources the spec does not name. Default False: they are kept.
    :param allow_double_store: create even if a stream of this account in another connected domain
        listens on the same subjects (both would store every message), or if a domain cannot be
        checked (no answer, an error reply). Default False: refused.
    :param peer_domains: more domains for that check, besides the connection's own.
    """

    template_fields: Sequence[str] = (*ReconcileOperator.template_fields, "stream")
    template_fields_renderers = {"stream": "json"}

    def __init__(self, *, stream: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        if not is_resolved_at_run_time(stream):
            self.build_spec()  # invalid specs fail when the DAG is parsed
        self.declare_lineage_outlet()

    def build_spec(self) -> StreamSpec:
        return StreamSpec.from_dict(self.stream)

    def execute(self, context: Any) -> dict[str, Any]:
        spec = self.build_spec()
        self.check_options()
        result = self.get_hook().ensure_stream(spec, **self.reconcile_kwargs())
        self.record_spec_lineage(context, spec, result)
        return result


def _overrides(overrides: Mapping[str, Any] | None, reserved: tuple[str, ...]) -> dict[str, Any]:
    overrides = dict(overrides or {})
    clash = [k for k in overrides if k in reserved]
    if clash:
        raise SpecError(
            f"stream_overrides.{clash[0]}", overrides[clash[0]], "this operator sets it from its own argument"
        )
    return overrides


class JetStreamCreateMirrorOperator(JetStreamCreateStreamOperator):
    """Create or update a mirror of a stream in another domain or account, in one task.

    The seed's ``backup-test-leaf``: ``JetStreamCreateMirrorOperator(task_id=..., name="backup-test-leaf",
    source_stream="test", source_domain="leaf", domain="hub")``. Across accounts, give
    ``source_api_prefix="JS.acc@hub.API"`` and ``deliver_prefix=...`` instead of ``source_domain``.

    :param stream_overrides: other stream fields (storage, max_age, replicas...).
    """

    template_fields: Sequence[str] = (
        *ReconcileOperator.template_fields,
        "name",
        "source_stream",
        "source_domain",
        "source_api_prefix",
        "deliver_prefix",
        "filter_subject",
        "start_seq",
        "start_time",
        "stream_overrides",
    )

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
        super().__init__(stream=self._stream_dict(), **kwargs)

    def _stream_dict(self) -> dict[str, Any]:
        mirror = {
            "name": self.source_stream,
            "domain": self.source_domain or None,
            "api_prefix": self.source_api_prefix or None,
            "deliver_prefix": self.deliver_prefix or None,
            "filter_subject": self.filter_subject or None,
            "subject_transforms": self.subject_transforms or None,
            "start_seq": self.start_seq or None,
            "start_time": self.start_time or None,
        }
        return {**_overrides(self.stream_overrides, ("name", "mirror", "sources")), "name": self.name, "mirror": mirror}

    def build_spec(self) -> StreamSpec:
        return StreamSpec.from_dict(self._stream_dict())


class JetStreamCreateSourcedStreamOperator(JetStreamCreateStreamOperator):
    """Create or update a stream that aggregates other streams (any domains/accounts), in one task.

    The seed's ``aggregate-test-leaf``: ``sources=[{"name": "test", "domain": "leaf"}]``. Updating
    one source keeps the others the server has (unless ``prune_sources=True``).

    :param sources: source specs: ``name``, ``domain`` | ``api_prefix`` (+ ``deliver_prefix``),
        ``filter_subject`` | ``subject_transforms``, ``start_seq`` | ``start_time``.
    :param subjects: subjects the stream also listens on (optional).
    :param stream_overrides: other stream fields.
    """

    template_fields: Sequence[str] = (
        *ReconcileOperator.template_fields,
        "name",
        "sources",
        "subjects",
        "stream_overrides",
    )

    def __init__(
        self,
        *,
        name: str,
        sources: list[dict[str, Any]],
        subjects: list[str] | None = None,
        stream_overrides: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self.sources = sources
        self.subjects = subjects
        self.stream_overrides = stream_overrides
        super().__init__(stream=self._stream_dict(), **kwargs)

    def _stream_dict(self) -> dict[str, Any]:
        stream = {**_overrides(self.stream_overrides, ("name", "mirror", "sources", "subjects")), "name": self.name}
        stream["sources"] = self.sources
        if self.subjects:
            stream["subjects"] = self.subjects
        return stream

    def build_spec(self) -> StreamSpec:
        return StreamSpec.from_dict(self._stream_dict())


class JetStreamDeleteStreamOperator(JetStreamBaseOperator):
    """Delete a stream and its data. XCom: ``{"deleted": bool, "name", "domain"}``.

    :param ignore_missing: a missing stream is success (``deleted: False``). Default True.
    """

    template_fields: Sequence[str] = (*JetStreamBaseOperator.template_fields, "name")

    def __init__(self, *, name: str, ignore_missing: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not is_resolved_at_run_time(name):
            one_spec_error(validate_name, name, "name")
        self.name = name
        self.ignore_missing = as_bool("ignore_missing", ignore_missing)

    def execute(self, context: Any) -> dict[str, Any]:
        result = self.get_hook().delete_stream(
            self.name, ignore_missing=self.ignore_missing, timeout=self.request_timeout, logger=self.log
        )
        if result["deleted"]:
            self.record_lifecycle_lineage(context, self.name, "DROP")
        return result


class JetStreamPurgeStreamOperator(JetStreamBaseOperator):
    """Purge messages from a stream. XCom: ``{"purged": n, "name", "domain"}``.

    :param subject: purge only messages on this subject (wildcards allowed).
    :param keep: keep this many newest messages (per subject when ``subject`` is given).
    :param up_to_sequence: purge messages below this sequence (not with ``keep``); at most the
        stream's last sequence + 1 (checked before purging: a later one would renumber the stream).
    """

    template_fields: Sequence[str] = (
        *JetStreamBaseOperator.template_fields,
        "name",
        "subject",
        "keep",
        "up_to_sequence",
    )

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
        if not is_resolved_at_run_time([name, subject, keep, up_to_sequence]):
            purge_request(name, subject, keep, up_to_sequence)

    def execute(self, context: Any) -> dict[str, Any]:
        result = self.get_hook().purge_stream(
            self.name,
            subject=self.subject,
            keep=self.keep,
            up_to_sequence=self.up_to_sequence,
            timeout=self.request_timeout,
            logger=self.log,
        )
        self.record_lifecycle_lineage(context, self.name, "TRUNCATE")
        return result
