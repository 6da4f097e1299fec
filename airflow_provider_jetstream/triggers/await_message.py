"""``JetStreamAwaitMessageTrigger``: waits for the first message an ``apply_function`` matches, in any domain.

One look (:meth:`JetStreamAwaitMessageTrigger.check`) is one
:meth:`~airflow_provider_jetstream.core.consume.matching.MessageMatcher.look`: what the consumer delivers
within ``max_wait`` seconds, examined one message at a time; the trigger repeats looks through the shared
wait loop (a domain that does not answer is waited for up to ``unreachable_timeout``) and the sensor's
poke is one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.matching import MAX_REMEMBERED, LookResult, MessageMatcher, load_function
from airflow_provider_jetstream.core.signatures.waits import AWAIT_MESSAGE_TRIGGER
from airflow_provider_jetstream.core.status.waiting import DONE, WaitOutcome, failure_of
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.triggers.base import JetStreamWaitTrigger, keeps_arguments


class JetStreamAwaitMessageTrigger(JetStreamWaitTrigger):
    """Fires with the first message of a stream (in any domain) for which ``apply_function`` returns a truthy value.

    Fires ``{"status": "success", "result": {"match": {...}, "ack_subject": ...}}``: ``match`` is what the
    sensor returns (the function's ``value`` and the message's stream, domain, consumer, subject,
    sequence, timestamp, delivered count and headers); ``ack_subject`` is where the sensor acks the
    match once Airflow stored the event (None with ``ack_mode='none'``). Until then the trigger holds the
    match (``+WPI``), so the consumer does not deliver it again; it keeps running until Airflow cancels
    it. Fires ``{"status": "error", ...}`` when the stream or consumer does not exist, an argument is
    refused, the function cannot be imported, raises or returns a value with no JSON form.

    :param jetstream_conn_id: Airflow connection id (resolved in the triggerer).
    :param stream: stream name.
    :param apply_function: dotted path of ``f(message, **apply_function_kwargs)``, imported in the
        triggerer; ``message`` is a :class:`~airflow_provider_jetstream.core.read.delivery.Delivery`.
    :param apply_function_kwargs: its keyword arguments (JSON). Default none.
    :param consumer: the user's durable pull consumer.
    :param task_consumer: the task's own (created).
        Neither with ``ack_mode='none'``.
    :param filter_subjects: subjects the task's own consumer delivers. Default all.
    :param ack_mode: ``all_seen`` (default), ``on_match`` or ``none``: see the sensor.
    :param deliver_policy: where the task's own consumer starts when created. Default ``new``.
    :param ack_wait: the task's own consumer's ack wait (seconds). Default 60.
    :param max_wait: seconds one look waits for messages. Default 5.
    :param domain: JetStream domain of the stream; or ``api_prefix``. Default: the connection's.
    :param unreachable_timeout: how long the domain may go without answering before the trigger fails;
        None (default): no bound.
    :param state: what the sensor's pokes left: ``start_sequence`` (``ack_mode='none'``: where the wait
        started), ``left`` (``on_match``: the sequences examined and left), ``unreachable_since``.
    """

    arguments = AWAIT_MESSAGE_TRIGGER
    event_key = "result"
    what_format = "stream {stream!r}"

    @keeps_arguments
    def __init__(
        self,
        jetstream_conn_id: str,
        stream: str,
        apply_function: str,
        apply_function_kwargs: dict[str, Any] | None = None,
        consumer: str | None = None,
        task_consumer: str | None = None,
        filter_subjects: list[str] | str | None = None,
        ack_mode: str = "all_seen",
        deliver_policy: str = "new",
        ack_wait: float = 60.0,
        max_wait: float = 5.0,
        domain: str | None = None,
        api_prefix: str | None = None,
        unreachable_timeout: float | str | None = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        # A look takes max_wait seconds: the next one starts as it ends (a failed one, max_wait later).
        self.poll_interval = self.max_wait
        self.api: JetStreamApi | None = None
        self.matcher: MessageMatcher | None = None

    def make_matcher(self, api: JetStreamApi) -> MessageMatcher:
        """The matcher of this wait (the function imported here: in the triggerer, or the worker's poke)."""
        return MessageMatcher(
            api.nc,
            api,
            self.stream,
            self.consumer or self.task_consumer,
            function=load_function(self.apply_function),
            kwargs=self.apply_function_kwargs,
            ack_mode=self.ack_mode,
            create=self.task_consumer is not None,
            deliver_policy=self.deliver_policy,
            filter_subjects=self.filter_subjects,
            ack_wait=self.ack_wait,
            start_sequence=self.state.get("start_sequence"),
            left=self.state.get("left") or (),
            max_wait=self.max_wait,
        )

    async def check(self, hook: JetStreamHook) -> LookResult:
        if self.matcher is None:
            assert self.api is not None, "check() runs inside run() or the sensor's look"
            self.matcher = self.make_matcher(self.api)
            self.log.info(
                "%s in %s: looking for the first message %s matches (ack_mode=%s)",
                self.what, self.api.target, self.apply_function, self.ack_mode,
            )  # fmt: skip
        try:
            result = await self.matcher.look(self.max_wait)
        finally:
            self._remember(self.matcher)
        if result.done:
            match = result.match or {}
            self.log.info("%s: message #%s (%s) matched", self.what, match["seq"], match["subject"])
        elif result.examined:
            self.log.info("%s: %d message(s) examined, none matched yet", self.what, result.examined)
        return result

    def _remember(self, matcher: MessageMatcher) -> None:
        """What the next look (a later poke, or the trigger) must know: where ``none`` goes on, what was left."""
        if matcher.next_sequence is not None:
            self.state["start_sequence"] = matcher.next_sequence
        if matcher.left:
            self.state["left"] = list(matcher.left)[-MAX_REMEMBERED:]

    async def poke_step(self, hook: JetStreamHook) -> WaitOutcome:
        """One step of the wait with a matcher of its own, closed after it (the sensor's poke)."""
        async with hook.aapi() as api:
            self.api = api
            try:
                return await self.step(hook)
            finally:
                if self.matcher is not None:
                    await self.matcher.close()
                    self.matcher = None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.new_hook()
        self.log.info("%s: waiting in the triggerer", self.what)
        async with contextlib.AsyncExitStack() as stack:
            try:
                self.api = await stack.enter_async_context(hook.aapi())
                stack.push_async_callback(self._close)
                outcome = await self.wait(hook)
            except Exception as err:  # connecting failed: the same classification as a look's errors
                outcome = failure_of(err, f"connection {self.jetstream_conn_id!r}")
            yield TriggerEvent(outcome.event(self.event_key))
            if outcome.status == DONE and self.ack_mode != "none":
                # The match stays held (+WPI) until Airflow stored the event: then it cancels this trigger,
                # and the sensor acks the match.
                await asyncio.Event().wait()

    async def _close(self) -> None:
        if self.matcher is not None:
            await self.matcher.close()
            self.matcher = None
