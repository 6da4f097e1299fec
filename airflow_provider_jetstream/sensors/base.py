"""``BaseJetStreamSensor``: the poke / reschedule / deferrable plumbing the JetStream sensors share."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from airflow.triggers.base import BaseTrigger

from airflow_provider_jetstream.connection import api_prefix_for
from airflow_provider_jetstream.exceptions import JetStreamConfigError, JetStreamError, JetStreamNotFoundError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.replication import JetStreamReplicationError
from airflow_provider_jetstream.triggers.consumer_lag import TRANSIENT_ERRORS, transient_reason

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Errors that waiting cannot fix: the task fails at once (or is skipped with ``soft_fail``).
FATAL_ERRORS = (JetStreamNotFoundError, JetStreamConfigError, JetStreamReplicationError)


def templated(value: Any) -> bool:
    """Whether a constructor argument is still a Jinja template (validated after rendering)."""
    return isinstance(value, str) and "{{" in value


class BaseJetStreamSensor(BaseSensorOperator, abc.ABC):
    """Poke, reschedule and deferrable modes over one async check shared with the trigger.

    :param jetstream_conn_id: Airflow connection id. Default ``jetstream_default``.
    :param domain: JetStream domain to look in. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param deferrable: wait in the triggerer instead of a worker slot. Default: Airflow's
        ``[operators] default_deferrable`` (False unless configured).

    Every check runs once on the worker first: a condition already met succeeds without
    deferring, and a missing stream, consumer or bucket fails at once (skipped with
    ``soft_fail=True``). In deferrable mode the trigger polls (or watches) every
    ``poke_interval`` seconds until ``timeout``.
    """

    template_fields: Sequence[str] = ("jetstream_conn_id", "domain", "api_prefix")
    ui_color = "#27aae1"

    def __init__(
        self,
        *,
        jetstream_conn_id: str = JetStreamHook.default_conn_name,
        domain: str | None = None,
        api_prefix: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.jetstream_conn_id = jetstream_conn_id
        self.domain = domain
        self.api_prefix = api_prefix
        self.deferrable = deferrable
        if not templated(domain) and not templated(api_prefix):
            api_prefix_for(domain, api_prefix)

    # -- what each sensor defines -------------------------------------------------------------

    @abc.abstractmethod
    def validate(self) -> None:
        """Check the (rendered) arguments; raise :class:`JetStreamConfigError` naming the bad one."""

    @abc.abstractmethod
    async def acheck(self, hook: JetStreamHook) -> tuple[bool, dict[str, Any] | None]:
        """One check: ``(done, xcom value)``; logs what it saw and why it is not done."""

    @abc.abstractmethod
    def trigger(self) -> BaseTrigger:
        """The trigger that waits for the same condition in the triggerer."""

    #: Key of the trigger's success event that holds the XCom value.
    event_key: str = ""

    # -- shared plumbing ------------------------------------------------------------------------

    def make_hook(self) -> JetStreamHook:
        """The hook for the rendered connection id, domain and API prefix."""
        api_prefix_for(self.domain, self.api_prefix)
        return JetStreamHook(self.jetstream_conn_id, domain=self.domain, api_prefix=self.api_prefix)

    def fail(self, message: str) -> NoReturn:
        """Fail the task without retries, or skip it with ``soft_fail=True``."""
        if self.soft_fail:
            raise AirflowSkipException(message)
        raise AirflowFailException(message)

    def poke(self, context: Context) -> bool | PokeReturnValue:
        try:
            self.validate()
            hook = self.make_hook()
        except JetStreamConfigError as err:
            self.fail(str(err))
        try:
            done, xcom = hook.run(self.acheck(hook))
        except FATAL_ERRORS as err:
            self.fail(str(err))
        except TRANSIENT_ERRORS as err:
            self.log.info("Cannot check yet, will retry: %s", transient_reason(hook, err))
            return False
        return PokeReturnValue(True, xcom) if done else False

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
        lasting replication error) fails without retries (or skips with ``soft_fail``); a
        connection failure fails as any error does, so Airflow's retries apply.
        """
        if event.get("status") == "success":
            self.log.info("Success criteria met in the triggerer.")
            return event.get(self.event_key)
        message = event.get("message") or f"the trigger failed: {event!r}"
        if event.get("reason") in ("not_found", "invalid", "replication_error"):
            self.fail(message)
        raise JetStreamError(message)
