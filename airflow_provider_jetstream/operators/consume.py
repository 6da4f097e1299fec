"""``JetStreamConsumeOperator``: a durable pull consumer's messages through a function, each acked once processed.

At-least-once, and never an ack before the work: each message is acked only after ``apply_function``
returned for it (or ``apply_function_batch`` for its batch). A function that raises naks the message with
a growing delay (it comes back), or, for an exception class named in ``term_on``, terminates it after
copying it to ``dead_letter_stream``. A task killed between processing and ack leaves the message unacked:
the consumer delivers it again after its ``ack_wait``, to the retry, which processes it again and acks it
once; a retry that starts sooner than the consumer's ``ack_wait`` after the attempt that died ends without the
messages that attempt held (they come back only once their ``ack_wait`` is over). One batch (``batch_size``) is
held at a time; the function runs in the task's own thread, message after message, while the connection's
event loop (a thread of its own) keeps the batch's unsettled messages alive with ``+WPI`` every third of the
consumer's ``ack_wait``. Each ack, nak and term goes out at once and is confirmed by the consumer before the
next batch is pulled (sent again across a failover), so ``acked`` counts what the consumer stored, on every
replica of a clustered one.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
from collections.abc import Callable
from typing import Any

from airflow_provider_jetstream.core.arguments import Args, Rule
from airflow_provider_jetstream.core.arguments.options import options_arg
from airflow_provider_jetstream.core.consume.dead_letter import dead_letter
from airflow_provider_jetstream.core.consume.fetch import Reading
from airflow_provider_jetstream.core.errors import JetStreamConfigError, SpecError
from airflow_provider_jetstream.core.read.delivery import Delivery
from airflow_provider_jetstream.core.signatures.consume import CONSUME, CONSUME_OPERATOR
from airflow_provider_jetstream.core.signatures.options import ConsumeOptions
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.core.sync import hold, run_sync
from airflow_provider_jetstream.core.tasks import stop_task
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator

__all__ = ["ConsumeOptions", "JetStreamConsumeOperator"]


def _read_start_without_a_consumer(values: Any, prefix: str) -> None:
    options = values["options"]
    for name in ("start_seq", "start_time", "filter_subjects"):
        value = getattr(options, name)
        if value is not None and values["consumer"] is not None:
            raise SpecError(
                f"{prefix}options.{name}",
                value,
                "only without a consumer: a durable consumer delivers what its declaration says (its filter, and "
                "its start, from where its acks left it)",
            )


def _dead_letter_subject_needs_a_stream(values: Any, prefix: str) -> None:
    subject = values["options"].dead_letter_subject
    if subject is not None and values["dead_letter_stream"] is None:
        raise SpecError(
            f"{prefix}options.dead_letter_subject", subject, "give dead_letter_stream too (the stream that stores it)"
        )


#: The operator's own arguments: the hook's consume arguments it takes (it pulls batch after batch itself, and an
#: ephemeral read's start and filter are options), its function and its failures; the rest in ``options``.
_CONSUME = (
    CONSUME.without("stop_when_empty", *ConsumeOptions.arguments.args)
    + CONSUME_OPERATOR.without(*ConsumeOptions.arguments.args)
    + Args("options", {"options": options_arg(ConsumeOptions, "ConsumeOptions or a dict of its fields")})
).ruled(
    Rule(("consumer", "options"), _read_start_without_a_consumer, "a read's start and filter only without a consumer"),
    Rule(("dead_letter_stream", "options"), _dead_letter_subject_needs_a_stream, "dead-letter subject: needs a stream"),
)


def resolve(target: Any, field: str) -> Any:
    """A callable or class given as itself or as its dotted path (``package.module.name``), imported now."""
    if not isinstance(target, str):
        return target
    module, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise JetStreamConfigError(f"{field}={target!r} cannot be imported: {err}") from None


class JetStreamConsumeOperator(JetStreamBaseOperator):
    """Consume up to ``max_messages`` messages and apply a function to each (or each batch), acking each only
    after the function returned for it.

    :param stream: the stream.
    :param consumer: a durable pull consumer the DAG declared
        (``JetStreamCreateConsumerOperator``; ``ack_policy`` ``explicit`` or ``all``), never created here.
        Default None: an ephemeral read of the stream (``options``' ``filter_subjects``, from its ``start_seq`` or
        ``start_time``) that acks nothing: a function that raises then fails the task, unless ``term_on``.
    :param apply_function: called as ``apply_function(message, *apply_function_args, **apply_function_kwargs)``
        for each message (a :class:`~airflow_provider_jetstream.core.read.delivery.Delivery`: ``subject``,
        ``seq``, ``time``, ``headers``, ``data``...), in the task's own thread; a callable or an importable
        dotted path.
    :param apply_function_batch: instead, called with each batch (a list of messages); the whole batch is
        acked, nak'd or terminated together.
    :param apply_function_args: more positional arguments of the function (templated). Default none.
    :param apply_function_kwargs: its keyword arguments (templated). Default none.
    :param max_messages: messages at most per run. Default 1000.
    :param batch_size: messages per pull, the most held in memory. Default 100.
    :param max_wait: seconds a pull waits for its batch; a batch that came short ends the run when the consumer
        then says it has nothing left to deliver (a pull lost to a failover does not end it). Default 5.
    :param term_on: exception classes (or dotted paths) that terminate a message instead of a nak: input that
        will never succeed. Default None: every exception naks.
    :param dead_letter_stream: a stream that keeps a copy of each terminated message (headers
        ``Airflow-DLQ-Reason``, ``-Stream``, ``-Sequence``...), deduplicated by ``Nats-Msg-Id``.
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.ConsumeOptions` or a dict of its
        fields: a read without a consumer (``filter_subjects``, ``start_seq``, ``start_time``), the redelivery
        delays after a failure (``nak_delay`` doubling per delivery up to ``nak_max_delay``; 1 and 60 seconds),
        the dead letters' subject, and the results in the XCom (``return_results``, ``max_xcom_bytes``,
        ``results_overflow``). Default: every default.

    XCom: ``{"stream", "consumer", "domain", "processed", "acked", "nakd", "termed", "dead_lettered",
    "first_seq", "last_seq", "batches"}`` (and ``results``, ``results_trimmed``); ``acked``, ``nakd`` and
    ``termed`` count what the consumer confirmed.
    """

    arguments: Args = OPERATOR + _CONSUME

    def __init__(
        self,
        *,
        stream: str,
        consumer: str | None = None,
        apply_function: Callable[..., Any] | str | None = None,
        apply_function_batch: Callable[..., Any] | str | None = None,
        apply_function_args: list[Any] | None = None,
        apply_function_kwargs: dict[str, Any] | None = None,
        max_messages: int = 1000,
        batch_size: int = 100,
        max_wait: float = 5.0,
        term_on: list[Any] | None = None,
        dead_letter_stream: str | None = None,
        options: ConsumeOptions | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream, self.consumer = stream, consumer
        self.apply_function, self.apply_function_batch = apply_function, apply_function_batch
        self.apply_function_args, self.apply_function_kwargs = apply_function_args, apply_function_kwargs
        self.max_messages, self.batch_size, self.max_wait = max_messages, batch_size, max_wait
        self.term_on, self.dead_letter_stream = term_on, dead_letter_stream
        self.options = options

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        return _Run(self, args, self.get_hook()).run()


class _Run:
    """One run of the operator: its arguments, the function, the tally."""

    def __init__(self, operator: JetStreamConsumeOperator, args: dict[str, Any], hook: Any) -> None:
        self.log = operator.log
        self.args, self.hook = {**args, **args["options"].as_kwargs()}, hook
        args = self.args
        per_batch = args["apply_function_batch"] is not None
        self.per_batch = per_batch
        self.function = resolve(args["apply_function_batch" if per_batch else "apply_function"], "apply_function")
        self.extra_args = list(args["apply_function_args"] or [])
        self.extra_kwargs = dict(args["apply_function_kwargs"] or {})
        self.term_on = tuple(resolve(item, "term_on") for item in args["term_on"] or [])
        self.summary: dict[str, Any] = dict.fromkeys(("processed", "acked", "nakd", "termed", "dead_lettered"), 0)
        self.summary.update(stream=args["stream"], consumer=args["consumer"], domain=None, batches=0)
        self.summary.update(first_seq=None, last_seq=None)
        self.results: list[Any] = []
        self.results_bytes = 2
        self.overflow: str | None = None
        self.unconfirmed: list[Delivery] = []  # settled, their confirmation not yet counted

    def run(self) -> dict[str, Any]:
        """Batch after batch in this thread, the reading on the connection's own event loop (a hold)."""
        args = self.args
        request = {"request_timeout": args["request_timeout"]}  # in the hook's target
        reading_args = (args["stream"], args["consumer"], args["filter_subjects"], args["start_seq"])
        with hold(self.hook._reading(*reading_args, args["start_time"], request)) as reading:
            if args["consumer"] is not None and not reading.consumer.ackable:
                raise JetStreamConfigError(
                    f"consumer {reading.consumer.name!r} on stream {args['stream']!r} has ack_policy none: nothing "
                    "it delivers can be acked after processing; declare it with ack_policy explicit"
                )
            self.reading = reading
            while self.summary["processed"] < args["max_messages"] and self.overflow != "fail":
                want = min(args["batch_size"], args["max_messages"] - self.summary["processed"])
                batch = run_sync(reading.batch(want, args["max_wait"]))  # the last batch's settles confirmed first
                self._tally()
                if batch:
                    self._process(batch)
                if len(batch) < want and not run_sync(self._more_waiting(reading)):
                    break  # it waited max_wait for more, and the consumer has nothing left now
        self._tally()  # the reading confirmed every settle as it closed
        if self.overflow == "fail":
            raise JetStreamConfigError(self._overflow_text())
        return self._xcom()

    async def _more_waiting(self, reading: Reading) -> bool:
        """Whether the consumer still holds messages it has not delivered: a short batch is not "nothing left"
        when the pull was lost to a failover (a node leading the consumer died as it waited)."""
        if not reading.consumer.ackable:
            return False
        info = await reading.api.consumer_info(self.args["stream"], reading.consumer.name)
        return bool(info and info.get("num_pending"))

    def _process(self, batch: list[Delivery]) -> None:
        summary = self.summary
        summary["batches"] += 1
        summary["domain"] = batch[0].domain
        if summary["first_seq"] is None:
            summary["first_seq"] = batch[0].seq
        summary["last_seq"] = batch[-1].seq
        renewer = run_sync(self._keep_alive(batch)) if batch[0].ackable else None
        try:
            if self.per_batch:
                self._apply(batch, batch)
            else:
                for message in batch:
                    if self.overflow == "fail":
                        break
                    self._apply([message], message)
        finally:
            with contextlib.suppress(asyncio.CancelledError):  # interrupted meanwhile: the naks below still go out
                run_sync(stop_task(renewer))
            # What this run did not settle (a failure, an overflow) comes back at once, to the retry.
            for message in batch:
                if message.ackable and message.verdict is None:
                    message.nak()
            self.unconfirmed.extend(message for message in batch if message.ackable)

    def _apply(self, messages: list[Delivery], argument: Any) -> None:
        self.summary["processed"] += len(messages)
        try:
            result = self.function(argument, *self.extra_args, **self.extra_kwargs)
        except Exception as err:
            self._failed(messages, err)
            return
        if not self._keep(result):
            return  # does not fit the XCom: not acked (fail), it comes back
        for message in messages:
            if message.ackable:
                message.ack()

    def _failed(self, messages: list[Delivery], err: Exception) -> None:
        first = messages[0]
        what = f"message {first.seq}" if len(messages) == 1 else f"batch {first.seq}..{messages[-1].seq}"
        reason = f"{type(err).__name__}: {err}"[:300]
        if self.term_on and isinstance(err, self.term_on):
            self.log.warning("%s of %r: %s; terminating it", what, first.stream, type(err).__name__)
            for message in messages:
                if self.args["dead_letter_stream"]:
                    run_sync(self._dead_letter(message, reason))
                if message.ackable:
                    message.term()
            return
        if not first.ackable:
            raise err  # an ephemeral read: nothing would bring it back
        self.log.warning("%s of %r failed (%s); it is delivered again later", what, first.stream, type(err).__name__)
        for message in messages:
            message.nak(min(self.args["nak_max_delay"], self.args["nak_delay"] * 2 ** max(0, message.delivered - 1)))

    async def _dead_letter(self, message: Delivery, reason: str) -> None:
        stream = self.args["dead_letter_stream"]
        subject = self.args["dead_letter_subject"] or f"{stream}.{message.stream}.{self.reading.consumer.name}"
        await dead_letter(self.reading.api.nc, message, dead_letter_stream=stream, subject=subject, reason=reason)
        self.summary["dead_lettered"] += 1

    def _tally(self) -> None:
        """Count what the consumer confirmed of the settles sent (a batch's are confirmed before the next one)."""
        for message in self.unconfirmed:
            if message.confirmed:
                key = {"ack": "acked", "nak": "nakd", "term": "termed"}[message.verdict]  # type: ignore[index]
                self.summary[key] += 1
        self.unconfirmed = []

    def _keep(self, result: Any) -> bool:
        """Record the function's result for the XCom; False when it does not fit and the run must fail."""
        if not self.args["return_results"]:
            return True
        size = len(json.dumps(result, default=str)) + 1
        if self.results_bytes + size <= self.args["max_xcom_bytes"] and self.overflow is None:
            self.results.append(result)
            self.results_bytes += size
            return True
        if self.args["results_overflow"] == "trim":
            self.overflow = self.overflow or "trim"
            self.summary["results_trimmed"] = self.summary.get("results_trimmed", 0) + 1
            return True
        self.overflow = "fail"
        return False

    def _overflow_text(self) -> str:
        return (
            f"the function's results exceed max_xcom_bytes={self.args['max_xcom_bytes']} after "
            f"{len(self.results)} results: the message whose result did not fit was not acked (it is delivered "
            "again); raise max_xcom_bytes, set results_overflow='trim', or return smaller results"
        )

    async def _keep_alive(self, batch: list[Delivery]) -> asyncio.Task[None]:
        """Start renewing the batch's unsettled messages on the connection's loop; the renewing task."""
        period = max(0.5, (self.reading.consumer.ack_wait or 30.0) / 3)

        async def renew() -> None:
            while True:
                await asyncio.sleep(period)
                unsettled = [message for message in batch if message.verdict is None]
                await asyncio.gather(*(message.ain_progress() for message in unsettled), return_exceptions=True)

        return asyncio.get_running_loop().create_task(renew())

    def _xcom(self) -> dict[str, Any]:
        out = dict(self.summary)
        if self.args["return_results"]:
            out["results"] = self.results
        self.log.info(
            "consumed %r: %d processed, %d acked, %d nak'd, %d terminated, sequences %s..%s",
            out["stream"],
            out["processed"],
            out["acked"],
            out["nakd"],
            out["termed"],
            out["first_seq"],
            out["last_seq"],
        )
        return out
