"""What the waiting triggers share: their base class, one check over the shared wait loop, and its events.

Each waiting trigger (consumer lag, replication lag, KV key) defines one check of its condition
(:meth:`JetStreamWaitTrigger.check`); the trigger's ``run()`` repeats it every ``poll_interval`` seconds
with :func:`~airflow_provider_jetstream.core.status.waiting.wait_until_final`, and the matching sensor
makes one :meth:`~JetStreamWaitTrigger.step` per poke: the same check, the same outcome, the same
classification of errors (:mod:`airflow_provider_jetstream.core.status.waiting`).
"""

from __future__ import annotations

import abc
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix, unavailable_hint
from airflow_provider_jetstream.core.arguments import Args, refusing_retired
from airflow_provider_jetstream.core.arguments.options import Options
from airflow_provider_jetstream.core.signatures.waits import WAIT
from airflow_provider_jetstream.core.status.waiting import (
    Reading,
    UnreachableClock,
    WaitOutcome,
    failure_of,
    wait_step,
    wait_until_final,
)
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

#: The arguments every waiting trigger takes, in the order of :class:`JetStreamWaitTrigger`'s constructor.
SHARED = ("jetstream_conn_id", "domain", "api_prefix", "unreachable_timeout", "state")
Init = TypeVar("Init", bound=Callable[..., None])


def keeps_arguments(init: Init) -> Init:
    """A waiting trigger's ``__init__`` whose signature alone declares the trigger's arguments (their names, order,
    types and defaults): called, its arguments (every default filled in) go to
    :meth:`JetStreamWaitTrigger.__init__`, which checks them and keeps each in the attribute of its name; then its
    body runs, for a set-up of its own. The arguments besides :data:`SHARED` are the class's
    :attr:`~JetStreamWaitTrigger.fields`."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def wrapper(self: JetStreamWaitTrigger, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        given = {name: value for name, value in bound.arguments.items() if name != "self"}
        JetStreamWaitTrigger.__init__(self, **given)
        init(self, *args, **kwargs)

    wrapper.keeps_arguments = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def no_answer_reason(hook: JetStreamBaseHook, err: BaseException) -> str:
    """Why a check got no answer, in words (nats-py's 503 error prints as ``code=None``); the hint is the
    JetStream API's own (:func:`~airflow_provider_jetstream.core.api.unavailable_hint`)."""
    prefix = hook.resolve_api_prefix()
    # Servers of a cluster: a node down or an election is the likely cause, not a leaf or a domain name.
    hint = unavailable_hint(prefix, len(hook.get_conn_config().servers) > 1)
    if isinstance(err, (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError)):
        return f"no JetStream responded in {describe_prefix(prefix)}: {hint} Waiting"
    if isinstance(err, nats.errors.TimeoutError):
        return f"JetStream in {describe_prefix(prefix)} did not answer in time: {hint} Waiting"
    return str(err) or type(err).__name__


class JetStreamWaitTrigger(BaseTrigger, abc.ABC):
    """What the waiting triggers (consumer lag, replication lag, KV key) share: where JetStream is, how
    long it may go unanswering, what earlier checks left, their serialization and the wait loop.

    :param jetstream_conn_id: Airflow connection id (resolved in the triggerer).
    :param domain: JetStream domain. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param unreachable_timeout: how long (seconds, or text like ``"10m"``) the target may go without
        answering before the wait fails; None (default): no bound (the sensor's timeout applies).
    :param state: what earlier checks (the sensor's pokes) left (``{"unreachable_since": epoch
        seconds}``, ...): the trigger goes on where they were.

    What ``run()`` opens (its use of the triggerer's shared connection) is held by its context manager
    and released when ``run()`` returns, is cancelled or is closed: ``cleanup()`` has nothing left to do.
    """

    #: A subclass's own constructor arguments, each kept in the attribute of its name: serialized
    #: with the shared ones, so the triggerer rebuilds the trigger from them (the parameters of an ``__init__``
    #: that :func:`keeps_arguments`, besides :data:`SHARED`).
    fields: tuple[str, ...] = ()
    #: The signature of the trigger's constructor (its kwargs are checked with it, by the subclass).
    arguments: Args = WAIT
    #: The condition's subject in messages, of the trigger's :attr:`fields`: ``"stream {stream!r}"``.
    what_format: str = ""
    #: Key of the success event that holds the reading's XCom value.
    event_key: str = ""
    #: Whether the final event carries :attr:`state` (what the checks remembered), for the sensor to keep.
    event_state: bool = False
    #: Seconds between two checks (subclasses set it from their arguments).
    poll_interval: float = 5.0
    #: The role hook the checks use (every role: :class:`JetStreamHook`).
    hook_class: type[JetStreamBaseHook] = JetStreamHook

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's constructor refuses a retired name among its kwargs, naming its replacement (a trigger
        serialized by an earlier release, or written by hand)."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            if getattr(init, "keeps_arguments", False):
                cls.fields = tuple(name for name in inspect.signature(init).parameters if name not in ("self", *SHARED))
            cls.__init__ = refusing_retired(init)  # type: ignore[method-assign]

    def __init__(self, **values: Any) -> None:
        """Check the constructor's kwargs (the shared ones and the subclass's own :attr:`fields`) with the
        class's :attr:`arguments`, every bad one at once, raised where the trigger is made (the DAG's
        import, the sensor's defer); keep each in the attribute of its name."""
        super().__init__()
        args = type(self).arguments.check(values)
        for name in (*SHARED, *self.fields):
            setattr(self, name, args[name])
        self.state = self.state or {}
        self._unreachable = UnreachableClock(
            self.unreachable_timeout, self.state.get("unreachable_since"), self.state.get("unreachable_logged")
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        names = ("jetstream_conn_id", *self.fields, "domain", "api_prefix", "unreachable_timeout", "state")
        kwargs = {name: getattr(self, name) for name in names}
        # Typed options go as the JSON dict of their fields (the triggerer rebuilds them from it).
        kwargs = {k: v.as_kwargs() if isinstance(v, Options) else v for k, v in kwargs.items()}
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    def new_hook(self) -> Any:
        """The trigger's role hook (``hook_class``) for its connection and target (its checks share the
        triggerer's connection)."""
        return self.hook_class(self.jetstream_conn_id, domain=self.domain, api_prefix=self.api_prefix)

    # -- the condition -----------------------------------------------------------------------------

    @property
    def what(self) -> str:
        """The condition's subject in messages: ``stream 'agg'``, ``consumer 's' > 'c'``... (:attr:`what_format`
        filled in with the trigger's arguments)."""
        return self.what_format.format(**{name: getattr(self, name) for name in self.fields})

    @abc.abstractmethod
    async def check(self, hook: Any) -> Reading:
        """One reading of the condition; logs what it saw and why it is not done."""

    # -- the wait loop -----------------------------------------------------------------------------

    async def step(self, hook: Any, check: Callable[[], Awaitable[Reading]] | None = None) -> WaitOutcome:
        """One check (``check``, default :meth:`check`) through the shared wait step; what it must
        remember for the next one is kept in :attr:`state`."""
        outcome = await wait_step(
            check or (lambda: self.check(hook)),
            self._unreachable,
            what=self.what,
            no_answer=lambda err: no_answer_reason(hook, err),
            log=self.log,
        )
        clock = self._unreachable
        for key, value in (("unreachable_since", clock.since), ("unreachable_logged", clock.logged)):
            if value is None:
                self.state.pop(key, None)
            else:
                self.state[key] = value
        return outcome

    async def poke_step(self, hook: Any) -> WaitOutcome:
        """The sensor's poke: one :meth:`step` (a trigger that holds something across steps releases it after)."""
        return await self.step(hook)

    async def wait(self, hook: Any) -> WaitOutcome:
        """Check every :attr:`poll_interval` seconds until done or failed (what ``run()`` awaits)."""
        return await wait_until_final(lambda: self.step(hook), self.poll_interval)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.new_hook()
        try:
            # Held for the trigger's life: every check reuses the triggerer's shared connection.
            async with hook.aconnect():
                outcome = await self.wait(hook)
        except Exception as err:  # connecting failed: the same classification as a check's errors
            outcome = failure_of(err, f"connection {self.jetstream_conn_id!r}")
        event = outcome.event(self.event_key)
        if self.event_state:
            event["state"] = self.state
        yield TriggerEvent(event)


class JetStreamWatchTrigger(JetStreamWaitTrigger):
    """A waiting trigger that watches instead of polling (the KV key's, the object's): the server sends each change as
    it is stored to an ordered consumer of its own; while the domain does not answer it watches again every
    ``poll_interval`` seconds, up to ``unreachable_timeout``. Its :meth:`check` (a sensor's poke) reads once. The
    watch, like the connection, is held by ``run()``'s context managers: ``cleanup()`` has nothing left to do."""

    async def wait(self, hook: Any) -> WaitOutcome:
        """Watch (no polling) until the condition holds; while the domain does not answer, watch again every
        ``poll_interval`` seconds: the shared wait loop with :meth:`watch` as its check."""
        async with hook.aapi() as api:
            return await wait_until_final(lambda: self.step(hook, lambda: self.watch(api)), self.poll_interval)

    @abc.abstractmethod
    async def watch(self, api: JetStreamApi) -> Reading:
        """Watch until the condition holds (errors end the watch: the wait loop judges them)."""
