"""What every operator of this provider shares: connection arguments, reconcile options, refusals that fail at once.

A refusal (:class:`airflow_provider_jetstream.core.errors.JetStreamRefusalError`: a bad argument or
spec, a change the reconcile rules refuse, a double store, rejected credentials, a failed
compare-and-set) is raised again from ``execute`` as Airflow's ``AirflowFailException``, so
``retries`` are not spent on something that cannot succeed. The error raised is still an
instance of its own class (``except SpecErrors`` keeps working): a subclass of both.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException
from nats.aio.client import Client

from airflow_provider_jetstream.assets.lineage import (
    Location,
    OperatorLineageMixin,
    domains_of,
    server_of,
    spec_origins,
    stream_location,
)
from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.connection.settings import api_prefix_for
from airflow_provider_jetstream.core.errors import is_refusal
from airflow_provider_jetstream.core.manage.reconcile import check_if_exists
from airflow_provider_jetstream.core.manage.specs import StreamSpec
from airflow_provider_jetstream.core.names import domain_of
from airflow_provider_jetstream.core.values import as_bool, positive_seconds
from airflow_provider_jetstream.hooks.args import one_spec_error, peer_domains_arg
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time

F = TypeVar("F", bound=Callable[..., Any])

#: The methods Airflow calls to run a task (``execute_complete`` after a deferral).
RUN_METHODS = ("execute", "execute_complete")

_FAIL_CLASSES: dict[type[BaseException], type[BaseException]] = {}


def as_task_failure(error: BaseException) -> BaseException:
    """``error`` as an instance of a subclass of both its class and ``AirflowFailException``.

    Returned unchanged if it is already an ``AirflowFailException``.
    """
    if isinstance(error, AirflowFailException):
        return error
    cls = type(error)
    fail_cls = _FAIL_CLASSES.get(cls)
    if fail_cls is None:
        fail_cls = _FAIL_CLASSES[cls] = type(
            cls.__name__,
            (cls, AirflowFailException),
            {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
                "__reduce__": _reduce_to(cls),
            },
        )
    failure = fail_cls.__new__(fail_cls, *error.args)
    failure.__dict__.update(error.__dict__)
    failure.args = error.args
    return failure


def _reduce_to(cls: type[BaseException]) -> Callable[[BaseException], tuple[Any, ...]]:
    """Pickle a task failure as the error it copies (its class is made at run time, not importable)."""

    def reduce(self: BaseException) -> tuple[Any, ...]:
        return _rebuild, (cls, self.args, dict(self.__dict__))

    return reduce


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


def fail_fast_on_refusal(method: F) -> F:
    """Wrap a run method so that a refusal it raises fails the task without retries."""
    if getattr(method, "_jetstream_fail_fast", False):
        return method

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as err:
            if not is_refusal(err) or isinstance(err, AirflowFailException):
                raise
            log = getattr(self, "log", None)
            if log is not None:
                log.error("refused, failing without retries: %s", err)
            raise as_task_failure(err).with_traceback(err.__traceback__) from err.__cause__

    wrapper._jetstream_fail_fast = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class FailFastOnRefusal:
    """Mixin for operators: every ``execute`` / ``execute_complete`` a subclass defines turns
    refusals into ``AirflowFailException`` (see the module doc). Put it before ``BaseOperator``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in RUN_METHODS:
            method = cls.__dict__.get(name)
            if callable(method):
                setattr(cls, name, fail_fast_on_refusal(method))


T = TypeVar("T")

#: Reconcile actions that changed a stream or bucket: they emit an asset event.
CHANGED = ("created", "updated", "recreated")


def check_bool_args(**args: Any) -> None:
    """Validate boolean arguments now, unless Airflow still renders them (then at run time)."""
    for name, value in args.items():
        if not is_resolved_at_run_time(value):
            as_bool(name, value)


def stream_locations(hook: JetStreamHook, streams: Sequence[tuple[str, str | None]], timeout: float) -> list[Location]:
    """The lineage locations of ``(stream, API prefix)`` pairs (prefix None: the hook's target), the
    domain of each prefix taken from the prefix or, for ``$JS.API`` and imports, from the server."""
    server = server_of(hook.get_conn_config())
    target = hook.resolve_api_prefix()
    prefixes = [prefix or target for _, prefix in streams]

    async def resolve() -> dict[str, str | None]:
        if all(domain_of(prefix) for prefix in prefixes):
            return {prefix: domain_of(prefix) for prefix in prefixes}
        async with hook.aconnect() as nc:
            return await domains_of(nc, prefixes, timeout)

    domains = hook.run(resolve())
    return [stream_location(server, domains[prefix], name) for (name, _), prefix in zip(streams, prefixes, strict=True)]


class JetStreamBaseOperator(FailFastOnRefusal, OperatorLineageMixin, BaseOperator):
    """Common arguments: where JetStream is, and how long to wait for its API.

    Refusals (bad arguments, refused changes, double store, rejected credentials) fail the task
    at once, without retries (:mod:`airflow_provider_jetstream.operators.base`).

    :param jetstream_conn_id: Airflow connection (type ``jetstream``). Default ``jetstream_default``.
    :param domain: JetStream domain to act in (``$JS.<domain>.API``). Default: the connection's.
    :param api_prefix: an imported JetStream API prefix (``JS.acc@hub.API``), instead of ``domain``.
    :param request_timeout: seconds to wait for each JetStream API answer. Default 5.
    """

    template_fields: Sequence[str] = ("jetstream_conn_id", "domain", "api_prefix")
    ui_color = "#34b27d"

    def __init__(
        self,
        *,
        jetstream_conn_id: str = JetStreamHook.default_conn_name,
        domain: str | None = None,
        api_prefix: str | None = None,
        request_timeout: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_resolved_at_run_time(domain) and not is_resolved_at_run_time(api_prefix) and (domain or api_prefix):
            api_prefix_for(domain, api_prefix)
        # Finite and > 0: "inf" or nan would let a request wait forever.
        self.request_timeout = positive_seconds("request_timeout", request_timeout)
        self.jetstream_conn_id = jetstream_conn_id
        self.domain = domain
        self.api_prefix = api_prefix

    def get_hook(self) -> JetStreamHook:
        return JetStreamHook(self.jetstream_conn_id, domain=self.domain or None, api_prefix=self.api_prefix or None)

    def record_stream_lineage(
        self,
        context: Any,
        written: Sequence[tuple[str, str | None]],
        read: Sequence[tuple[str, str | None]] = (),
        emit: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Record the streams this run wrote and read, ``(name, API prefix or None for the target)``,
        for OpenLineage, and (``emit``) an asset event for each written one. A failure is logged:
        the work is done, lineage never fails the task."""
        try:
            locations = stream_locations(self.get_hook(), [*written, *read], self.request_timeout)
            outputs, inputs = locations[: len(written)], locations[len(written) :]
            self.record_lineage(context, inputs, outputs, emit=None if emit else [], extra=extra)
        except Exception as err:
            self.log.warning("lineage not recorded: %s: %s", type(err).__name__, err)

    def record_lifecycle_lineage(self, context: Any, stream: str, change: str) -> None:
        """OpenLineage output: ``stream`` (in the target) with a ``lifecycleStateChange`` facet
        (``DROP`` for a delete, ``TRUNCATE`` for a purge); no asset event. A failure is logged."""
        try:
            (location,) = stream_locations(self.get_hook(), [(stream, None)], self.request_timeout)
            self.record_lineage(context, [], [dataclasses.replace(location, lifecycle=change)], emit=[])
        except Exception as err:
            self.log.warning("lineage not recorded: %s: %s", type(err).__name__, err)

    def record_spec_lineage(self, context: Any, spec: StreamSpec, result: dict[str, Any]) -> None:
        """Lineage of a declared stream: it is written, its mirror and sources are read; an asset event
        only when its configuration changed (created, updated, recreated), not for unchanged or a dry run."""
        action = result.get("action") if isinstance(result, dict) else None
        self.record_stream_lineage(
            context,
            [(spec.name, None)],
            spec_origins(spec.values),
            emit=action in CHANGED,
            extra={"action": action},
        )

    def run_api(self, work: Callable[[Client, JetStreamApi, JetStreamHook], Awaitable[T]]) -> T:
        """Connect, build the API client for the target, and run ``work`` to completion (for what the
        hook has no method for: deletes and purges)."""
        hook = self.get_hook()

        async def main() -> T:
            async with hook.aapi(timeout=self.request_timeout) as api:
                return await work(api.nc, api, hook)

        return hook.run(main())


class ReconcileOperator(JetStreamBaseOperator):
    template_fields: Sequence[str] = (
        *JetStreamBaseOperator.template_fields,
        "if_exists",
        "dry_run",
        "allow_double_store",
        "peer_domains",
    )

    def __init__(
        self,
        *,
        if_exists: str = "update",
        dry_run: bool = False,
        prune_sources: bool = False,
        allow_double_store: bool = False,
        peer_domains: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_resolved_at_run_time(if_exists):
            check_if_exists(if_exists)
        check_bool_args(dry_run=dry_run, prune_sources=prune_sources, allow_double_store=allow_double_store)
        if not is_resolved_at_run_time(peer_domains):
            peer_domains_arg(peer_domains)
        self.if_exists = if_exists
        self.dry_run = dry_run
        self.prune_sources = prune_sources
        self.allow_double_store = allow_double_store
        self.peer_domains = peer_domains

    def check_options(self) -> None:
        """Validate the rendered options, before any request: run time's share of the checks."""
        check_if_exists(self.if_exists)
        check_bool_args(
            dry_run=self.dry_run, prune_sources=self.prune_sources, allow_double_store=self.allow_double_store
        )
        peer_domains_arg(self.peer_domains)

    def reconcile_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the hook's ``ensure_*`` methods, from the (rendered, checked)
        operator arguments."""
        return {
            "if_exists": self.if_exists,
            "dry_run": as_bool("dry_run", self.dry_run),
            "prune_sources": as_bool("prune_sources", self.prune_sources),
            "allow_double_store": as_bool("allow_double_store", self.allow_double_store),
            "peer_domains": self.peer_domains,
            "timeout": self.request_timeout,
            "logger": self.log,
        }


__all__ = [
    "FailFastOnRefusal",
    "JetStreamBaseOperator",
    "ReconcileOperator",
    "as_bool",
    "as_task_failure",
    "check_bool_args",
    "fail_fast_on_refusal",
    "one_spec_error",
    "peer_domains_arg",
]
