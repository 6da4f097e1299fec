"""``JetStreamAwaitMessageSensor``: wait for the next message an ``apply_function`` matches, in any domain."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.consume.matching import task_consumer_name
from airflow_provider_jetstream.core.read.delivery import ack_by_reply
from airflow_provider_jetstream.core.signatures.waits import AWAIT_MESSAGE, SENSOR
from airflow_provider_jetstream.sensors.base import BaseJetStreamSensor
from airflow_provider_jetstream.triggers.await_message import JetStreamAwaitMessageTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class JetStreamAwaitMessageSensor(BaseJetStreamSensor):
    """Wait for the next message of a stream (in any domain) for which ``apply_function`` returns a truthy value.

    Returns (XCom) ``{"value": <what the function returned>, "stream", "domain", "consumer", "subject",
    "seq", "timestamp", "timestamp_ns", "delivered", "headers"}``. The function is called as
    ``apply_function(message, **apply_function_kwargs)`` with a
    :class:`~airflow_provider_jetstream.core.read.delivery.Delivery` (``subject``, ``data`` bytes,
    ``headers``, ``seq``, ``timestamp``...): in the triggerer when deferrable, in the worker otherwise.
    Its value must have a JSON form. Messages are examined one at a time, in stream order.

    Which consumer: by default the task's own durable consumer, ``af_await_<hash of DAG id, task id and
    map index>``, created at the first look from ``deliver_policy`` (``new``: messages stored from then on)
    and ``filter_subjects``; every run of the task goes on where the previous one stopped. Or ``consumer``:
    the user's durable pull consumer (``ack_policy: explicit``), which must exist. One run of the task at a
    time pulls a consumer: ``max_active_tis_per_dag`` defaults to 1 (unless ``ack_mode='none'``), so the sensor
    of an overlapping run waits (queued) until this one is done, then goes on after its match. A second
    puller all the same (that limit raised, or another task on the same ``consumer``) is refused within a
    few ``max_wait`` periods, saying so.

    What ``ack_mode`` does:

    - ``all_seen`` (default): each message examined and not matched is acked as soon as the function
      returned for it; the match is acked once Airflow stored the result. The next run starts after the
      match.
    - ``on_match``: only the match is acked (once Airflow stored the result). A message that did not match
      is left unacknowledged: the consumer delivers it again after its ``ack_wait`` (to the consumer's other
      readers, such as a consume operator, or to a later run of this task). Within one wait it is not
      examined again: the sequences examined are remembered by the pokes and handed to the trigger; a
      triggerer restart forgets those the trigger examined, so they are examined once more after
      ``ack_wait``. Left messages count against the consumer's ``max_ack_pending``: when they reach it the
      consumer delivers nothing new, and the sensor fails saying so rather than waiting for ever.
    - ``none``: nothing is acked and no durable consumer is used: each look reads with a consumer of its
      own (``ack_policy: none``, deleted after) from the stream's end when the wait started (kept by the
      pokes and handed to the trigger). A restarted trigger reads again from that start and finds the same
      first match.

    A function that raises fails the task with its error; the message it raised for is not acked but given
    back (``-NAK``) as the look stops, so the retry examines it again at once.

    Across a triggerer restart nothing is lost and no message matched twice: the match is acked only
    after Airflow stored the trigger's event, by the task (``execute_complete``); until then the trigger
    holds it (``+WPI``). A triggerer that dies before the event is stored leaves the match unacknowledged:
    the consumer delivers it again after ``ack_wait`` to the trigger that takes over, which matches it
    then. A leaf (or hub node) that does not answer is waited for, up to ``unreachable_timeout``.

    :param stream: stream name (templated).
    :param apply_function: dotted path of the function (templated); imported where it runs.
    :param apply_function_kwargs: its keyword arguments, JSON (templated). Default none.
    :param consumer: the user's durable pull consumer (templated). Default: the task's own.
    :param filter_subjects: subjects the task's own consumer (or, with ``ack_mode='none'``, each look) delivers
        (templated). Default all.
    :param ack_mode: ``all_seen`` (default), ``on_match`` or ``none`` (templated).
    :param deliver_policy: where the task's own consumer starts when created: ``new`` (default), ``all``,
        ``last`` or ``last_per_subject``.
    :param ack_wait: the task's own consumer's ack wait, seconds. Default 60.
    :param max_wait: seconds one look (a poke) waits for messages. Default 5.

    Also takes :class:`BaseJetStreamSensor`'s ``jetstream_conn_id``, ``domain``, ``api_prefix``,
    ``deferrable``, ``unreachable_timeout`` and Airflow's sensor arguments.
    """

    arguments: Args = SENSOR + AWAIT_MESSAGE
    event_key = "result"

    def __init__(
        self,
        *,
        stream: str,
        apply_function: str,
        apply_function_kwargs: dict[str, Any] | None = None,
        consumer: str | None = None,
        filter_subjects: list[str] | str | None = None,
        ack_mode: str = "all_seen",
        deliver_policy: str = "new",
        ack_wait: float | str | timedelta = 60.0,
        max_wait: float | str | timedelta = 5.0,
        **kwargs: Any,
    ) -> None:
        if ack_mode != "none":  # a durable consumer has one puller: the next run's sensor waits for this one's
            kwargs.setdefault("max_active_tis_per_dag", 1)
        super().__init__(**kwargs)
        self.stream = stream
        self.apply_function = apply_function
        self.apply_function_kwargs = apply_function_kwargs
        self.consumer = consumer
        self.filter_subjects = filter_subjects
        self.ack_mode = ack_mode
        self.deliver_policy = deliver_policy
        self.ack_wait = ack_wait
        self.max_wait = max_wait
        self._map_index = -1

    def task_consumer(self) -> str | None:
        """The task's own consumer (None when the user's is given, or with ``ack_mode='none'``)."""
        args = self.checked_arguments()
        if args["consumer"] or args["ack_mode"] == "none":
            return None
        return task_consumer_name(self.dag_id, self.task_id, self._map_index)

    def trigger(self) -> JetStreamAwaitMessageTrigger:
        return JetStreamAwaitMessageTrigger(
            **self.trigger_arguments(JetStreamAwaitMessageTrigger),
            task_consumer=self.task_consumer(),
            state=dict(self._state),
        )

    def execute(self, context: Context) -> Any:
        ti = context.get("ti") if hasattr(context, "get") else None
        map_index = getattr(ti, "map_index", None)
        self._map_index = -1 if map_index is None else int(map_index)
        return self._settle(super().execute(context))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger fired: ack the match (Airflow stored the event), return it."""
        return self._settle(super().execute_complete(context, event))

    def _settle(self, result: dict[str, Any] | None) -> Any:
        """Ack the match (if ``ack_mode`` says so) now that Airflow has it; the XCom value is the match."""
        if not result:
            return result
        subject = result.get("ack_subject")
        if subject:
            seq = result["match"]["seq"]
            hook = self.get_hook()
            hook.run(_ack(hook, subject, f"message {seq} of stream {self.stream!r}"))
            self.log.info("Acknowledged message #%s of stream %r", seq, self.stream)
        return result["match"]


async def _ack(hook: Any, reply: str, what: str) -> None:
    async with hook.aapi() as api:
        await ack_by_reply(api, reply, what)
