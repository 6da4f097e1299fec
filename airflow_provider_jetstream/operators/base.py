"""What every operator of this provider shares: connection arguments, reconcile options, refusals that fail at once.

Each operator declares its signature (``arguments``, :mod:`airflow_provider_jetstream.core.signatures.operations`);
:class:`~airflow_provider_jetstream.utils.arguments.CheckedArguments` refuses a retired name naming its
replacement, checks literal values when the DAG is parsed and the rest once rendered, and ``execute`` passes
the checked values to the role hook it uses (``hook_class``). Advanced tuning is one ``options`` argument per
operator family (:mod:`airflow_provider_jetstream.core.signatures.options`).

A refusal (:class:`airflow_provider_jetstream.core.errors.JetStreamRefusalError`: a bad argument or
spec, a change the reconcile rules refuse, a double store, rejected credentials, a failed
compare-and-set) is raised again from ``execute`` as Airflow's ``AirflowFailException``, so
``retries`` are not spent on something that cannot succeed. The error raised is still an
instance of its own class (``except SpecErrors`` keeps working): a subclass of both.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from airflow.sdk import BaseOperator

from airflow_provider_jetstream.assets.lineage import (
    Location,
    OperatorLineageMixin,
    domains_of,
    server_of,
    spec_origins,
    stream_location,
)
from airflow_provider_jetstream.compat import AirflowFailException
from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.arguments.options import Options
from airflow_provider_jetstream.core.errors import is_refusal
from airflow_provider_jetstream.core.manage.specs import StreamSpec
from airflow_provider_jetstream.core.signatures.options import DeclareOptions, family_options
from airflow_provider_jetstream.core.signatures.shared import IF_EXISTS_ARG, OPERATOR
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.utils.target import JetStreamTarget

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


def stream_locations(
    hook: JetStreamBaseHook, streams: Sequence[tuple[str, str | None]], timeout: float
) -> list[Location]:
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


class JetStreamBaseOperator(FailFastOnRefusal, JetStreamTarget, OperatorLineageMixin, BaseOperator):
    """Common arguments: where JetStream is (:class:`~airflow_provider_jetstream.utils.target.JetStreamTarget`:
    ``jetstream_conn_id``, ``domain``, ``api_prefix``), and how long to wait for its API.

    Refusals (bad arguments, refused changes, double store, rejected credentials) fail the task
    at once, without retries (:mod:`airflow_provider_jetstream.operators.base`).

    :param request_timeout: seconds to wait for each JetStream API answer. Default None: the connection's
        ``connect_timeout``.
    """

    arguments: Args = OPERATOR
    ui_color = "#34b27d"
    #: The role hook the operator works with (every role: :class:`JetStreamHook`).
    hook_class: type[JetStreamBaseHook] = JetStreamHook

    def __init__(self, *, request_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.request_timeout = request_timeout

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
        """Seconds to wait for each JetStream API answer: the checked ``request_timeout``, else the connection's
        ``connect_timeout``."""
        timeout = self.checked_arguments()["request_timeout"]
        return timeout if timeout is not None else self.get_hook().get_conn_config().connect_timeout


def declare_arguments(options: type[DeclareOptions] = DeclareOptions, without: Sequence[str] = ()) -> Args:
    """What a declaring operator takes besides its object: ``if_exists``, and ``options`` of ``options``'s class
    (the fields ``without`` refused: they do not apply to it)."""
    doc = f"{options.__name__} or a dict of its fields: dry run, the guards of a change; default: every default"
    return Args("declare", {"if_exists": IF_EXISTS_ARG, "options": family_options(options, doc, without)})


class ReconcileOperator(JetStreamBaseOperator):
    """What the declaring operators share: ``if_exists`` and their typed options (:class:`DeclareOptions`: a
    dry run, the double-store check, what a change may discard)."""

    arguments: Args = OPERATOR + declare_arguments()
    #: The options fields the operator's hook method takes (the others are refused by its ``options``).
    declare_fields: Sequence[str] = tuple(DeclareOptions.arguments.args)

    def __init__(
        self,
        *,
        if_exists: str = "update",
        options: Options | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.if_exists = if_exists
        self.options = options

    def reconcile_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the hook's ``ensure_*`` methods, from the checked operator arguments."""
        args = self.checked_arguments()
        options = args["options"]
        return {
            "if_exists": args["if_exists"],
            **{name: getattr(options, name) for name in self.declare_fields},
            "request_timeout": args["request_timeout"],
            "logger": self.log,
        }


class DeclareBucketOperator(ReconcileOperator):
    """A "create" operator of a bucket (KV or object store): reconcile the bucket its ``bucket`` argument declares
    with its role hook (:meth:`ensure`). Lineage: the bucket's stream is written, the origins of its mirror or
    sources read (an asset event when it was created, updated or recreated)."""

    template_fields_renderers = {"bucket": "json"}

    def __init__(self, *, bucket: str | dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.declare_lineage_outlet()

    @abc.abstractmethod
    def ensure(self, hook: Any, spec: Any, **reconcile: Any) -> dict[str, Any]:
        """Reconcile the checked bucket ``spec`` with the role hook's method of its kind; its XCom dict."""

    def execute(self, context: Any) -> dict[str, Any]:
        spec = self.checked_arguments()["bucket"]
        result = self.ensure(self.get_hook(), spec, **self.reconcile_kwargs())
        self.record_spec_lineage(context, spec.stream_spec(), result)
        return result


__all__ = [
    "DeclareBucketOperator",
    "FailFastOnRefusal",
    "JetStreamBaseOperator",
    "ReconcileOperator",
    "as_task_failure",
    "declare_arguments",
    "fail_fast_on_refusal",
]
