"""What every operator of this provider shares: connection arguments, reconcile options, refusals that fail at once.

Each operator declares its signature (``arguments``, :mod:`airflow_provider_jetstream.core.signatures.operations`);
:class:`~airflow_provider_jetstream.utils.arguments.CheckedArguments` checks literal values when the DAG
is parsed and the rest once rendered, and ``execute`` passes the checked values to the hook.

A refusal (:class:`airflow_provider_jetstream.core.errors.JetStreamRefusalError`: a bad argument or
spec, a change the reconcile rules refuse, a double store, rejected credentials, a failed
compare-and-set) is raised again from ``execute`` as Airflow's ``AirflowFailException``, so
``retries`` are not spent on something that cannot succeed. The error raised is still an
instance of its own class (``except SpecErrors`` keeps working): a subclass of both.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_jetstream.assets.lineage import (
    Location,
    OperatorLineageMixin,
    domains_of,
    server_of,
    spec_origins,
    stream_location,
)
from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.errors import is_refusal
from airflow_provider_jetstream.core.manage.specs import StreamSpec
from airflow_provider_jetstream.core.signatures.operations import ENSURE_STREAM
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.utils.arguments import CheckedArguments

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


class JetStreamBaseOperator(FailFastOnRefusal, CheckedArguments, OperatorLineageMixin, BaseOperator):
    """Common arguments: where JetStream is, and how long to wait for its API.

    Refusals (bad arguments, refused changes, double store, rejected credentials) fail the task
    at once, without retries (:mod:`airflow_provider_jetstream.operators.base`).

    :param jetstream_conn_id: Airflow connection (type ``jetstream``). Default ``jetstream_default``.
    :param domain: JetStream domain to act in (``$JS.<domain>.API``). Default: the connection's.
    :param api_prefix: an imported JetStream API prefix (``JS.acc@hub.API``), instead of ``domain``.
    :param request_timeout: seconds to wait for each JetStream API answer. Default 5.
    """

    arguments: Args = OPERATOR
    template_fields: Sequence[str] = OPERATOR.template_fields()
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
        self.request_timeout = request_timeout
        self.jetstream_conn_id = jetstream_conn_id
        self.domain = domain
        self.api_prefix = api_prefix

    def get_hook(self) -> JetStreamHook:
        """The hook for the checked connection id, domain and API prefix."""
        args = self.checked_arguments()
        return JetStreamHook(args["jetstream_conn_id"], domain=args["domain"], api_prefix=args["api_prefix"])

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
            locations = stream_locations(self.get_hook(), [*written, *read], self.request_seconds())
            outputs, inputs = locations[: len(written)], locations[len(written) :]
            self.record_lineage(context, inputs, outputs, emit=None if emit else [], extra=extra)
        except Exception as err:
            self.log.warning("lineage not recorded: %s: %s", type(err).__name__, err)

    def record_lifecycle_lineage(self, context: Any, stream: str, change: str) -> None:
        """OpenLineage output: ``stream`` (in the target) with a ``lifecycleStateChange`` facet
        (``DROP`` for a delete, ``TRUNCATE`` for a purge); no asset event. A failure is logged."""
        try:
            (location,) = stream_locations(self.get_hook(), [(stream, None)], self.request_seconds())
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

    def request_seconds(self) -> float:
        """The checked ``request_timeout``: seconds to wait for each JetStream API answer."""
        return self.checked_arguments()["request_timeout"]


class ReconcileOperator(JetStreamBaseOperator):
    """What the "create" operators share: the reconcile options and the double-store check's."""

    #: The reconcile options of declaring a stream (the operation's own arguments come on top).
    reconcile_arguments = ENSURE_STREAM.without("spec")
    arguments: Args = OPERATOR + reconcile_arguments
    template_fields: Sequence[str] = arguments.template_fields()

    def __init__(
        self,
        *,
        if_exists: str = "update",
        dry_run: bool = False,
        prune_sources: bool = False,
        allow_data_loss: bool = False,
        allow_double_store: bool = False,
        peer_domains: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.if_exists = if_exists
        self.dry_run = dry_run
        self.prune_sources = prune_sources
        self.allow_data_loss = allow_data_loss
        self.allow_double_store = allow_double_store
        self.peer_domains = peer_domains

    def reconcile_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the hook's ``ensure_*`` methods, from the checked operator arguments."""
        args = self.checked_arguments()
        options = ("if_exists", "dry_run", "prune_sources", "allow_data_loss", "allow_double_store", "peer_domains")
        return {
            **{name: args[name] for name in options},
            "timeout": args["request_timeout"],
            "logger": self.log,
        }


__all__ = [
    "FailFastOnRefusal",
    "JetStreamBaseOperator",
    "ReconcileOperator",
    "as_task_failure",
    "fail_fast_on_refusal",
]
