"""What every operator of this provider shares: refusals fail the task at once, without retries.

A refusal (:class:`airflow_provider_jetstream.exceptions.JetStreamRefusalError`: a bad argument or
spec, a change the reconcile rules refuse, a double store, rejected credentials, a failed
compare-and-set) is raised again from ``execute`` as Airflow's ``AirflowFailException``, so
``retries`` are not spent on something that cannot succeed. The error raised is still an
instance of its own class (``except SpecErrors`` keeps working): a subclass of both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_jetstream.exceptions import is_refusal

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
