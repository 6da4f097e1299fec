"""What an operator read and wrote: JetStream streams and output paths as Airflow assets and OpenLineage datasets.

One naming, used by every operator of the provider:

- a stream is ``jetstream://<server>/<domain>/<stream>`` as an Airflow asset (its name is its URI, so
  ``Asset("jetstream://hub:4222/hub/ORDERS")`` in a downstream DAG's ``schedule`` is the very asset
  the operator emits), and OpenLineage namespace ``jetstream://<server>``, name ``<domain>/<stream>``.
  ``<server>`` is the connection's ``asset_server`` extra when set, else its first server's
  ``host[:port]`` (port 4222 dropped); ``<domain>`` is the JetStream domain that holds the stream,
  ``_`` for none. A KV bucket is its stream ``KV_<bucket>``.
- a path (the Spark job's Parquet output) follows the OpenLineage naming conventions: a local
  path or ``file://`` URI is namespace ``file``, name the absolute path; ``s3://``, ``s3a://`` and
  ``s3n://`` are namespace ``s3://<bucket>``, name the key; ``gs://`` likewise; ``hdfs://nn:8020/x``
  is namespace ``hdfs://nn:8020``, name ``/x``; any other ``scheme://authority/path`` is namespace
  ``scheme://authority``, name the path. The asset URI is ``file:///abs/path``, ``s3://bucket/key``...

:class:`OperatorLineageMixin` gives an operator ``get_openlineage_facets_on_complete`` and, unless
the DAG author passed ``outlets``, an :class:`~airflow.sdk.AssetAlias` outlet that the operator
resolves at run time to the assets it wrote (the Airflow 3 idiom for assets known only at run time:
the server comes from the connection, which is read when the task runs, never when the DAG is parsed).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.assets.jetstream import NO_DOMAIN, SCHEME, StreamUri, parse_stream_uri
from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.arguments.names import domain_of

if TYPE_CHECKING:
    from airflow.sdk import Asset, AssetAlias

    from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig

#: Prefix of the ``AssetAlias`` an operator declares as its outlet: ``jetstream:<dag_id>.<task_id>``.
ALIAS_PREFIX = "jetstream:"
#: Object stores whose OpenLineage namespace is ``<scheme>://<bucket>`` and name the key (no leading slash).
_BUCKET_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}


@dataclass(frozen=True)
class Location:
    """One place a task read or wrote: its Airflow asset URI and its OpenLineage namespace and name."""

    uri: str
    namespace: str
    name: str
    #: OpenLineage lifecycle change of the dataset (``DROP``, ``TRUNCATE``), if the task made one.
    lifecycle: str | None = None

    def asset(self) -> Asset:
        """The Airflow asset, named by its URI (what ``Asset("<uri>")`` in a schedule declares)."""
        from airflow.sdk import Asset

        return Asset(uri=self.uri)

    def dataset(self) -> Any:
        """The OpenLineage dataset (``namespace``, ``name``; a ``lifecycleStateChange`` facet if any)."""
        from airflow.providers.common.compat.openlineage.facet import Dataset

        if not self.lifecycle:
            return Dataset(namespace=self.namespace, name=self.name)
        from airflow.providers.common.compat.openlineage.facet import (
            LifecycleStateChange,
            LifecycleStateChangeDatasetFacet,
        )

        change = LifecycleStateChangeDatasetFacet(lifecycleStateChange=LifecycleStateChange[self.lifecycle])
        return Dataset(namespace=self.namespace, name=self.name, facets={"lifecycleStateChange": change})


def server_of(config: JetStreamConnectionConfig) -> str:
    """The ``<server>`` of a connection's stream URIs: its ``asset_server`` extra, else the first
    server's ``host[:port]`` (lower case, no user or password, no default port 4222)."""
    chosen = getattr(config, "asset_server", None)
    if not chosen:
        first = urllib.parse.urlsplit(config.servers[0])
        host = first.hostname or ""
        host = f"[{host}]" if ":" in host else host
        chosen = f"{host}:{first.port}" if first.port else host
    return parse_stream_uri(f"{SCHEME}://{chosen}/{NO_DOMAIN}/x").server


def stream_location(server: str, domain: str | None, stream: str) -> Location:
    """A stream: ``jetstream://<server>/<domain or _>/<stream>``; namespace ``jetstream://<server>``."""
    parsed = parse_stream_uri(str(StreamUri(server, domain or None, stream)))
    return Location(
        uri=str(parsed), namespace=f"{SCHEME}://{parsed.server}", name=f"{parsed.domain or NO_DOMAIN}/{parsed.stream}"
    )


def kv_location(server: str, domain: str | None, bucket: str) -> Location:
    """A KV bucket: its stream ``KV_<bucket>``."""
    return stream_location(server, domain, f"KV_{bucket}")


def path_location(path: str) -> Location:
    """An output directory (local path or URI), named by the OpenLineage conventions (module doc)."""
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"path={path!r} is not allowed: give a local path or a URI such as s3://bucket/key")
    text = path.strip()
    split = urllib.parse.urlsplit(text)
    scheme = split.scheme.lower()
    if not scheme or len(scheme) == 1 or scheme == "file":  # one letter: a Windows drive
        local = split.path if scheme == "file" else text
        absolute = os.path.normpath(os.path.abspath(local))
        return Location(uri=f"file://{absolute}", namespace="file", name=absolute)
    if not split.netloc:
        raise ValueError(
            f"path={path!r} is not allowed: a {scheme}:// URI needs an authority, e.g. {scheme}://bucket/key"
        )
    netloc = split.netloc.rpartition("@")[2] if scheme not in ("abfs", "abfss", "wasb", "wasbs") else split.netloc
    key = split.path.rstrip("/")
    if scheme in _BUCKET_SCHEMES:
        target = _BUCKET_SCHEMES[scheme]
        name = key.lstrip("/")
        return Location(uri=f"{target}://{netloc}/{name}", namespace=f"{target}://{netloc}", name=name or "/")
    if scheme == "hdfs":
        return Location(uri=f"hdfs://{netloc}{key or '/'}", namespace=f"hdfs://{netloc}", name=key or "/")
    name = key.lstrip("/")
    return Location(uri=f"{scheme}://{netloc}/{name}", namespace=f"{scheme}://{netloc}", name=name or "/")


def operator_lineage(inputs: Sequence[Location], outputs: Sequence[Location]) -> Any:
    """An OpenLineage ``OperatorLineage``, or None when the OpenLineage provider is not installed."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    return OperatorLineage(inputs=[loc.dataset() for loc in inputs], outputs=[loc.dataset() for loc in outputs])


def spec_origins(values: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """The origin streams of a stream spec's mirror and sources (API form): ``(name, API prefix or None)``;
    None means the stream's own JetStream."""
    origins = [values.get("mirror"), *(values.get("sources") or [])]
    found = []
    for origin in origins:
        if isinstance(origin, Mapping) and origin.get("name"):
            api = (origin.get("external") or {}).get("api")
            found.append((str(origin["name"]), str(api).rstrip(".") if api else None))
    return found


async def domains_of(nc: Any, prefixes: Iterable[str], timeout: float) -> dict[str, str | None]:
    """The JetStream domain behind each API prefix: ``$JS.<domain>.API`` names it; for ``$JS.API`` or
    an imported prefix, the domain that JetStream reports in its account info (None: it has none).
    A JetStream that does not answer raises (a guess would name another stream)."""
    found: dict[str, str | None] = {}
    for prefix in dict.fromkeys(prefixes):
        found[prefix] = domain_of(prefix)
        if found[prefix] is None:
            info = await JetStreamApi(nc, prefix, timeout=timeout).account_info()
            found[prefix] = info.get("domain") or None
    return found


def _alias_name(dag_id: str | None, task_id: str) -> str:
    """The name of a task's lineage alias: ``jetstream:<dag_id>.<task_id>`` (without a DAG, the task id alone)."""
    return f"{ALIAS_PREFIX}{dag_id}.{task_id}" if dag_id else f"{ALIAS_PREFIX}{task_id}"


class _classes_only:
    """A classmethod a task (an instance) may not call: as Airflow guards ``BaseOperator.partial``."""

    def __init__(self, method: classmethod) -> None:
        self.method = method

    def __get__(self, task: object | None, cls: type | None = None) -> Callable[..., Any]:
        if task is not None:

            def partial(**kwargs: Any) -> Any:
                raise TypeError("partial can only be called on Operator classes, not Tasks themselves")

            return partial
        return self.method.__get__(None, cls)


class OperatorLineageMixin:
    """Lineage for an operator: an ``AssetAlias`` outlet unless ``outlets`` were given, the assets it
    resolves to at run time, and ``get_openlineage_facets_on_complete``.

    The operator calls :meth:`declare_lineage_outlet` at the end of ``__init__`` and
    :meth:`record_lineage` once its work succeeded (a lineage failure is logged, never raised).
    Outlets given by the DAG author are kept as given: Airflow then emits their events itself, and
    nothing is added (no second event for the same asset).
    """

    _lineage_alias_name: str | None = None
    _lineage_inputs: tuple[Location, ...] = ()
    _lineage_outputs: tuple[Location, ...] = ()
    _lineage_recorded: bool = False

    def declare_lineage_outlet(self) -> None:
        """Declare ``AssetAlias("jetstream:<dag_id>.<task_id>")`` as the outlet, unless outlets were given
        (the alias :meth:`partial` declared for a mapped task is this one)."""
        from airflow.sdk import AssetAlias

        name = _alias_name(self.dag_id if self.has_dag() else None, self.task_id)  # type: ignore[attr-defined]
        outlets = getattr(self, "outlets", None)
        if outlets and outlets != [AssetAlias(name=name)]:
            return
        self._lineage_alias_name = name
        self.outlets = [AssetAlias(name=name)]

    @_classes_only
    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """A mapped task's ``partial``: the alias outlet is declared here, when the DAG is parsed, so Airflow
        registers it with the DAG. Declared only as each mapped instance runs, it would be registered by the
        first instance to succeed, and two succeeding at once both insert it: one fails (a unique key)."""
        if not kwargs.get("outlets"):
            from airflow.sdk import AssetAlias
            from airflow.sdk.definitions._internal.contextmanager import DagContext, TaskGroupContext

            dag = kwargs.get("dag") or DagContext.get_current()
            group = kwargs.get("task_group") or (TaskGroupContext.get_current(dag) if dag else None)
            task_id = group.child_id(kwargs["task_id"]) if group else kwargs["task_id"]
            kwargs["outlets"] = [AssetAlias(name=_alias_name(dag.dag_id if dag else None, task_id))]
        return super().partial(**kwargs)  # type: ignore[misc]

    @property
    def lineage_alias(self) -> AssetAlias | None:
        """The ``AssetAlias`` outlet this operator declared (None when the DAG author gave outlets)."""
        if self._lineage_alias_name is None:
            return None
        from airflow.sdk import AssetAlias

        return AssetAlias(name=self._lineage_alias_name)

    def record_lineage(
        self,
        context: Any,
        inputs: Sequence[Location],
        outputs: Sequence[Location],
        emit: Sequence[Location] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Keep ``inputs``/``outputs`` for OpenLineage and add an asset event for each of ``emit``
        (default: ``outputs``) to the alias outlet, with ``extra`` (JSON values)."""
        self._lineage_inputs, self._lineage_outputs = tuple(inputs), tuple(outputs)
        self._lineage_recorded = True
        alias = self.lineage_alias
        events = context.get("outlet_events") if context else None
        if alias is None or events is None or alias not in (getattr(self, "outlets", None) or []):
            return
        for location in outputs if emit is None else emit:
            events[alias].add(location.asset(), extra=dict(extra or {}))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage inputs and outputs of the run: the JetStream streams read and written (``jetstream://
        <server>`` / ``<domain>/<stream>``), the output path. None if the task recorded nothing (it did
        not get that far) or the OpenLineage provider is not installed."""
        if not self._lineage_recorded:
            return None
        return operator_lineage(self._lineage_inputs, self._lineage_outputs)


__all__ = [
    "ALIAS_PREFIX",
    "Location",
    "OperatorLineageMixin",
    "domains_of",
    "kv_location",
    "operator_lineage",
    "path_location",
    "server_of",
    "spec_origins",
    "stream_location",
]
