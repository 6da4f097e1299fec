"""``BaseJetStreamSensor``: the poke / reschedule / deferrable plumbing the JetStream sensors share.

A sensor's poke is one step of its trigger's wait
(:meth:`~airflow_provider_jetstream.triggers.base.JetStreamWaitTrigger.step`): the same check, the same
outcome and the same classification of errors (:func:`~airflow_provider_jetstream.core.errors.disposition`)
as the trigger's wait in the triggerer.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_provider_jetstream.compat import (
    AirflowFailException,
    AirflowSkipException,
    conf,
    require_airflow,
)
from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.errors import REFUSE, RETRY, JetStreamConfigError, JetStreamError
from airflow_provider_jetstream.core.signatures.waits import SENSOR
from airflow_provider_jetstream.core.status.waiting import DONE, WAITING, WaitOutcome
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.triggers.base import JetStreamWaitTrigger
from airflow_provider_jetstream.utils.target import JetStreamTarget

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Error events of triggers that carried no ``disposition`` (serialized before it existed): the reasons
#: that failed at once.
REFUSED_REASONS = ("not_found", "invalid", "replication_error", "permission", "unreachable")
#: Key of the sensor's state in Airflow's task state store (kept across reschedules).
STATE_KEY = "airflow_provider_jetstream.sensor_state"


class BaseJetStreamSensor(JetStreamTarget, BaseSensorOperator, abc.ABC):
    """Poke, reschedule and deferrable modes over one async check shared with the trigger.

    Where JetStream is: :class:`~airflow_provider_jetstream.utils.target.JetStreamTarget`'s ``jetstream_conn_id``,
    ``domain`` (the domain to look in) and ``api_prefix``.

    :param deferrable: wait in the triggerer instead of a worker slot. Default: Airflow's
        ``[operators] default_deferrable`` (False unless configured).
    :param unreachable_timeout: how long the target domain may go without answering (a leaf that
        is offline, or a wrong domain name) before the task fails: seconds, ``timedelta`` or text
        like ``"10m"`` (templated). Default None: keep waiting until the sensor's ``timeout``. With
        ``mode="reschedule"`` it needs Airflow 3.3 (the task state store that keeps since when across
        reschedules): on older releases the DAG fails to parse, saying so.

    Each sensor declares its signature (``arguments``: :data:`~airflow_provider_jetstream.core.signatures.waits.SENSOR`
    and its check's, :mod:`airflow_provider_jetstream.core.signatures.operations`): literal values are
    checked when the DAG is parsed, templated ones once rendered, and a bad one fails the task at once
    (skipped with ``soft_fail=True``), before any request.

    Every check runs once on the worker first: a condition already met succeeds without
    deferring, and a missing stream, consumer or bucket, a refused request (``Permissions
    Violation``) or an imported API prefix this account has no import for fails at once (skipped
    with ``soft_fail=True``). In deferrable mode the trigger polls (or watches) every
    ``poke_interval`` seconds until ``timeout``. What a check must remember for the next one (since
    when the domain has not answered...) is kept in the sensor in poke mode, in Airflow's task state
    store (``context["task_state_store"]``) across reschedules, and handed to the trigger.
    """

    arguments: Args = SENSOR
    ui_color = "#27aae1"
    #: The role hook the sensor's checks use (every role: :class:`JetStreamHook`).
    hook_class: type[JetStreamBaseHook] = JetStreamHook

    def __init__(
        self,
        *,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        unreachable_timeout: float | str | timedelta | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if unreachable_timeout is not None and self.reschedule:
            # Each reschedule is a new process: without the task state store it would forget since when.
            require_airflow('unreachable_timeout with mode="reschedule"', "3.3")
        self.deferrable = deferrable
        self.unreachable_timeout = unreachable_timeout
        self._state: dict[str, Any] = {}
        self._state_persisted = False

    def validate(self) -> dict[str, Any]:
        """The (rendered) arguments, checked: :meth:`checked_arguments`; raises
        :class:`~airflow_provider_jetstream.core.errors.SpecErrors` naming every bad one."""
        return self.checked_arguments()

    def trigger_arguments(self, trigger: type[JetStreamWaitTrigger]) -> dict[str, Any]:
        """The checked arguments this sensor and its ``trigger`` class share (the same declarations)."""
        args = self.checked_arguments()
        return {name: args[name] for name in trigger.arguments.args if name in args}

    # -- what each sensor defines -------------------------------------------------------------

    @abc.abstractmethod
    def trigger(self) -> JetStreamWaitTrigger:
        """The trigger that waits for the same condition (with what earlier pokes left, ``self._state``)."""

    #: Key of the trigger's success event that holds the XCom value.
    event_key: str = ""

    # -- shared plumbing ------------------------------------------------------------------------

    def fail(self, message: str) -> NoReturn:
        """Fail the task without retries, or skip it with ``soft_fail=True``."""
        if self.soft_fail:
            raise AirflowSkipException(message)
        raise AirflowFailException(message)

    def finish(self, message: str, disposition: str, error: BaseException | None = None) -> NoReturn:
        """End a wait that failed: a refusal fails at once (:meth:`fail`); anything else is raised, so
        Airflow's retries apply."""
        if disposition == REFUSE:
            self.fail(message)
        raise error or JetStreamError(message)

    def poke(self, context: Context) -> bool | PokeReturnValue:
        store = context.get("task_state_store") if isinstance(context, Mapping) and self.reschedule else None
        if store is not None:
            # A rescheduled sensor is a new process at each poke: its state comes from the store.
            self._state = dict(store.get(STATE_KEY) or {})
        self._state_persisted = store is not None
        outcome: WaitOutcome | None = None
        try:
            outcome = self.step()
        finally:
            if store is not None:
                if outcome is not None and outcome.status == DONE:
                    store.delete(STATE_KEY)
                else:
                    store.set(STATE_KEY, self._state)
        if outcome.status == DONE:
            return PokeReturnValue(True, outcome.xcom)
        if outcome.status == WAITING:
            return False
        self.finish(outcome.message, outcome.disposition, outcome.error)

    def step(self) -> WaitOutcome:
        """One check, as one step of the trigger's wait: what it must remember goes on in ``self._state``."""
        try:
            self.checked_arguments()  # once rendered, before any request
            hook = self.get_hook()
            trigger = self.trigger()
        except JetStreamConfigError as err:
            self.fail(str(err))
        outcome = hook.run(trigger.poke_step(hook))
        self._state = trigger.state
        return outcome

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        result = self.poke(context)
        if result:
            return result.xcom_value
        self.defer(trigger=self.trigger(), method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger fired: return its reading, or fail with its message.

        As in poke mode, what waiting cannot fix (missing stream/consumer/bucket, bad argument, a
        refused request, a lasting replication error, a domain unreachable beyond
        ``unreachable_timeout``) fails without retries (or skips with ``soft_fail``); anything else
        (a connection failure) fails as any error does, so Airflow's retries apply.
        """
        if event.get("status") == "success":
            self.log.info("Success criteria met in the triggerer.")
            return event.get(self.event_key)
        message = event.get("message") or f"the trigger failed: {event!r}"
        disposition = event.get("disposition") or (REFUSE if event.get("reason") in REFUSED_REASONS else RETRY)
        self.finish(message, disposition)
