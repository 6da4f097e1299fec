"""How a role hook's method is made: its arguments checked, the ones it shares typed once, its blocking twin.

:func:`checked` checks a method's arguments with its operation's one declaration
(:mod:`airflow_provider_jetstream.core.signatures`) when it is called, before anything is sent. The keyword
arguments many methods share and only pass on (where JetStream is, how long a request waits, the reconcile
ladder's choices) are typed once here (:class:`Target`, :class:`Request`, :class:`Logged`,
:class:`Declaring`) and taken as one ``**`` parameter; :func:`blocking` makes a method's synchronous twin,
:func:`passing_arguments_to` a method taking exactly another's arguments.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypedDict, TypeVar

from airflow_provider_jetstream.core.arguments import REQUIRED, Args

T = TypeVar("T")
P = ParamSpec("P")
M = TypeVar("M", bound=Callable[..., Any])


class RunsCoroutines(Protocol):
    """A hook: what runs its coroutines from synchronous code (:meth:`JetStreamBaseHook.run`)."""

    def run(self, coro: Coroutine[Any, Any, T]) -> T: ...


H = TypeVar("H", bound=RunsCoroutines)

#: Where a hook method that changes something logs what it did.
Logger = logging.Logger | logging.LoggerAdapter


class Target(TypedDict, total=False):
    """Where a hook method acts: a JetStream ``domain`` or an ``api_prefix`` (default: the hook's, then the
    connection's)."""

    domain: str | None
    api_prefix: str | None


class Request(Target, total=False):
    """Where a hook method acts, and how long each JetStream API request waits (``request_timeout``, seconds;
    default: the connection's ``connect_timeout``)."""

    request_timeout: float | None


class Logged(Request, total=False):
    """A :class:`Request` of a method that changes something, and the ``logger`` of what it did (default: the
    hook's)."""

    logger: Logger | None


class Declaring(Logged, total=False):
    """What a declaring method (``ensure_*``) takes besides what it declares: the reconcile ladder's choices
    (``if_exists``, ``dry_run``) and the guards of a change (``prune_sources``, ``allow_data_loss``,
    ``allow_double_store``, ``peer_domains``, ``allow_unreachable_origins``), as far as its declaration takes
    them."""

    if_exists: str
    dry_run: bool
    prune_sources: bool
    allow_data_loss: bool
    allow_double_store: bool
    peer_domains: Sequence[str] | None
    allow_unreachable_origins: bool


def request_of(values: dict[str, Any]) -> Request:
    """The :class:`Request` of a method's ``**`` dict, taken out of it (what is left goes on elsewhere)."""
    return {name: values.pop(name) for name in Request.__annotations__}  # type: ignore[return-value]


def checked(signature: Args) -> Callable[[M], M]:
    """A hook method whose arguments are checked with ``signature`` (its operation's one declaration)
    when it is called, before anything is sent; its body gets the checked values. A refusal raises
    :class:`~airflow_provider_jetstream.core.errors.SpecErrors` naming every bad argument; a retired name
    (``timeout=5``) is refused naming its replacement (``request_timeout``).

    The arguments a method only passes on may be one ``**`` parameter typed with one of this module's
    TypedDicts (``**request: Unpack[Request]``): the method's signature then names each argument of
    ``signature`` it does not name itself, keyword-only with its declared default, and its body gets them,
    checked, in that one dict, with the values the declaration's rules derive from them (a durable source's
    ``durable_source``)."""

    def decorate(method: M) -> M:
        call = _public_signature(method, signature)
        names = [name for name in call.parameters if name != "self"]
        takes_rest = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(method).parameters.values())

        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            unknown = {name: value for name, value in kwargs.items() if name not in call.parameters}
            if unknown:
                signature.refuse_retired(unknown, method.__qualname__)
            bound = call.bind(self, *args, **kwargs)
            values = signature.check({name: bound.arguments[name] for name in names if name in bound.arguments})
            return method(self, **(values if takes_rest else {name: values[name] for name in names}))

        wrapper.arguments = signature  # type: ignore[attr-defined]
        wrapper.__signature__ = call  # type: ignore[attr-defined]
        if takes_rest:
            # Its public signature is not the one in its source: nothing (the docs' defaults read from the
            # source, among them) is to take that one for it.
            del wrapper.__wrapped__  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def _public_signature(method: Callable[..., Any], signature: Args) -> inspect.Signature:
    """``method``'s signature, its ``**`` parameter (if any) replaced by the arguments of ``signature`` it stands
    for, typed as its TypedDict types them."""
    call = inspect.signature(method)
    parameters = list(call.parameters.values())
    if not parameters or parameters[-1].kind is not inspect.Parameter.VAR_KEYWORD:
        return call
    # Annotations are text here (postponed): ``Unpack[Request]`` names a TypedDict of the method's module.
    typed_dict = method.__globals__.get(str(parameters[-1].annotation).removeprefix("Unpack[").removesuffix("]"))
    types = getattr(typed_dict, "__annotations__", {})
    shared = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if arg.default is REQUIRED else arg.default,
            annotation=types.get(name, inspect.Parameter.empty),
        )
        for name, arg in signature.args.items()
        if name not in call.parameters
    ]
    return call.replace(parameters=[*parameters[:-1], *shared])


def passing_arguments_to(checked_method: Callable[..., Any]) -> Callable[[M], M]:
    """A hook method that takes exactly the arguments of ``checked_method`` (a :func:`checked` one) and passes them
    on to it, which checks them: its signature and declaration are that method's (its own return type kept)."""

    def decorate(method: M) -> M:
        returns = inspect.signature(method).return_annotation
        method.__signature__ = inspect.signature(checked_method).replace(return_annotation=returns)  # type: ignore[attr-defined]
        method.arguments = checked_method.arguments  # type: ignore[attr-defined]
        return method

    return decorate


def blocking(method: Callable[Concatenate[H, P], Coroutine[Any, Any, T]]) -> Callable[Concatenate[H, P], T]:
    """The synchronous form of an async hook method (``ensure_stream = blocking(aensure_stream)``):
    same arguments, run through the hook's one sync bridge, :meth:`JetStreamBaseHook.run`."""

    @functools.wraps(method)
    def sync(self: H, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run(method(self, *args, **kwargs))

    name = method.__name__.removeprefix("a")
    sync.__name__ = name
    sync.__qualname__ = f"{method.__qualname__.rpartition('.')[0]}.{name}".lstrip(".")
    sync.__doc__ = (
        f"Blocking form of ``{method.__name__}`` (runs it through :meth:`run`; inside a running event loop, "
        f"await ``{method.__name__}`` instead).\n\n" + inspect.cleandoc(method.__doc__ or "")
    )
    return sync
