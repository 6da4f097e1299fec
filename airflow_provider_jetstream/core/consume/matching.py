"""Waiting for the first message a function matches: each delivery examined once, acked as ``ack_mode`` says.

The await-message sensor's poke and its trigger's wait both look through :class:`MessageMatcher`: one
look (:meth:`MessageMatcher.look`) takes what a consumer delivers for up to a few seconds, calls the
user's ``apply_function`` on each message and settles it:

- ``all_seen``: every message examined and not matched is acked as soon as the function returned;
- ``on_match``: a message that did not match is left unacknowledged (the consumer delivers it again
  after its ``ack_wait``, to a later run); the matcher does not examine it again;
- ``none``: nothing is acked: the look reads with a consumer of its own (``ack_policy: none``) from a
  sequence fixed when the wait started, and notes how far it got.

The match itself is never acked here: it is held (``+WPI``) until Airflow stored the result, then the sensor
acks it, confirmed (:func:`~airflow_provider_jetstream.core.read.delivery.ack_by_reply`; ``all_seen``
and ``on_match``).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.arguments.values import check_json
from airflow_provider_jetstream.core.consume.deliveries import Ticket, delivery_payload
from airflow_provider_jetstream.core.consume.durable import DurablePuller, ensure_consumer
from airflow_provider_jetstream.core.errors import (
    JetStreamConfigError,
    JetStreamError,
    JetStreamNotFoundError,
    SpecError,
)
from airflow_provider_jetstream.core.manage.specs.consumer import ConsumerSpec
from airflow_provider_jetstream.core.read.delivery import Delivery
from airflow_provider_jetstream.core.read.pull import create_ephemeral_consumer, discard_consumer
from airflow_provider_jetstream.core.tasks import next_item, stop_task

log = logging.getLogger(__name__)

#: How the sensor acknowledges what it examined (see the module doc).
ACK_MODES = ("all_seen", "on_match", "none")
#: What the refusal of a second puller of the sensor's consumer advises (another run of the task, mostly).
SHARING_ADVICE = (
    "One run of the await-message sensor at a time pulls its consumer: keep the sensor's max_active_tis_per_dag "
    "at 1 (its default with a durable consumer), or give each task its own consumer"
)
#: Most examined-and-left sequences an ``on_match`` wait remembers (and hands from the pokes to the trigger).
MAX_REMEMBERED = 10_000


def task_consumer_name(dag_id: str, task_id: str, map_index: int = -1) -> str:
    """The durable consumer of one sensor task: ``af_await_`` and a hash of its DAG id, task id and map index.

    The same task of every DAG run uses it, so a run goes on where the previous one stopped.
    """
    key = f"{dag_id}\n{task_id}" + (f"\n{map_index}" if map_index >= 0 else "")
    return "af_await_" + hashlib.sha256(key.encode()).hexdigest()[:20]


def load_function(path: str, field: str = "apply_function") -> Callable[..., Any]:
    """The callable at the dotted ``path`` (``package.module.function``); a clear refusal when it is not one."""
    module_name, _, name = path.rpartition(".")
    try:
        target = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise SpecError(field, path, f"use the importable dotted path of a function ({err})") from None
    if not callable(target):
        raise SpecError(field, path, "use the dotted path of a function (that one is not callable)")
    return target


def match_xcom(value: Any, delivery: Delivery) -> dict[str, Any]:
    """What the sensor returns: the function's ``value`` and the matching message's metadata (an event
    payload's, without the payload)."""
    metadata = delivery_payload(delivery, decode="base64", max_payload_bytes=0)
    for key in ("encoding", "data", "size"):
        metadata.pop(key)
    return {"value": value, **metadata}


@dataclass(frozen=True)
class LookResult:
    """One look: a match (``done``, what the sensor returns and where to ack it) or how many messages it examined."""

    done: bool
    examined: int = 0
    #: The function's value and the matching message's metadata (:func:`match_xcom`).
    match: dict[str, Any] | None = None
    #: The match's ack subject (None with ``ack_mode='none'``).
    ack_subject: str | None = None

    def to_xcom(self) -> dict[str, Any] | None:
        """The trigger event's ``result``: ``{"match": ..., "ack_subject": ...}``."""
        return {"match": self.match, "ack_subject": self.ack_subject} if self.done else None


class MessageMatcher:
    """Looks through a consumer's messages for the first one ``function`` returns a truthy value for.

    :param nc: a connected client.
    :param api: the JetStream API of the stream's domain or prefix.
    :param stream: stream name.
    :param consumer: durable consumer (``all_seen`` / ``on_match``); None with ``ack_mode='none'``.
    :param create: create the consumer (the task's own) if missing, from ``deliver_policy`` and
        ``filter_subjects``; else it must exist (the user's), with ``ack_policy: explicit``.
    :param function: called as ``function(delivery, **kwargs)`` (in a thread, or awaited if a coroutine
        function); its value must be JSON (it goes to XCom).
    :param ack_mode: one of :data:`ACK_MODES`.
    :param start_sequence: ``ack_mode='none'``: the first sequence to examine.
    :param left: ``on_match``: sequences already examined and left (not examined again).
    :param max_wait: seconds one pull request waits on the server.
    """

    def __init__(
        self,
        nc: Client,
        api: JetStreamApi,
        stream: str,
        consumer: str | None,
        *,
        function: Callable[..., Any],
        kwargs: Mapping[str, Any] | None = None,
        ack_mode: str = "all_seen",
        create: bool = False,
        deliver_policy: str = "new",
        filter_subjects: list[str] | str | None = None,
        ack_wait: float = 30.0,
        start_sequence: int | None = None,
        left: Iterable[int] = (),
        max_wait: float = 5.0,
        function_name: str = "apply_function",
    ) -> None:
        if ack_mode not in ACK_MODES:
            raise JetStreamConfigError(f"ack_mode={ack_mode!r} is not allowed: use one of {', '.join(ACK_MODES)}")
        self.nc, self.api, self.stream, self.consumer = nc, api, stream, consumer
        self.function, self.kwargs, self.function_name = function, dict(kwargs or {}), function_name
        self.ack_mode, self.create, self.deliver_policy = ack_mode, create, deliver_policy
        self.filter_subjects = [filter_subjects] if isinstance(filter_subjects, str) else list(filter_subjects or [])
        self.ack_wait, self.max_wait = ack_wait, max_wait
        #: ``ack_mode='none'``: the next sequence to examine (kept by the caller across looks).
        self.next_sequence = start_sequence
        #: ``on_match``: examined and left unacknowledged, by stream sequence.
        self.left: dict[int, None] = dict.fromkeys(left)
        self.max_ack_pending: int | None = None
        self.puller: DurablePuller | None = None
        #: The match, held until Airflow stored it, and the function's value for it.
        self.match: Ticket | None = None
        self.match_value: Any = None
        self._queue: asyncio.Queue[Ticket | BaseException] = asyncio.Queue(maxsize=1)
        self._pump: asyncio.Task[None] | None = None
        self._ephemeral: str | None = None
        #: The stream's config, once asked (a filter is checked against its subjects).
        self._stream_config: dict[str, Any] | None = None

    @property
    def where(self) -> str:
        return f"stream {self.stream!r} in {self.api.target}"

    # -- starting --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Ensure (or check) the consumer and start pulling: one message at a time, so nothing is delivered
        that this matcher would not examine."""
        if self.puller is not None:
            return
        if self.ack_mode == "none":
            if self.next_sequence is None:
                self.next_sequence = await self.stream_end() + 1
            filters = self.filter_subjects
            name, *_ = await create_ephemeral_consumer(
                self.api, self.stream, where=self.where, start_seq=self.next_sequence, filter_subjects=filters,
                kind="await", stream_config=self._stream_config,
            )  # fmt: skip
            self._ephemeral = consumer = name
        else:
            assert self.consumer is not None
            consumer = self.consumer
            await self._ensure_durable()
        expires = max(1.0, self.max_wait)
        self.puller = DurablePuller(
            self.nc, self.api, self.stream, consumer, max_in_flight=1, ack_wait=self.ack_wait, expires=expires,
            heartbeat=min(2.5, expires / 4), sharing_advice=SHARING_ADVICE,
        )  # fmt: skip
        self._pump = asyncio.create_task(self._feed(), name=f"jetstream-await[{self.stream}>{consumer}]")

    async def stream_end(self) -> int:
        """The stream's last sequence now (where a wait with ``ack_mode='none'`` starts after)."""
        info = await self.api.stream_info(self.stream)
        if info is None:
            raise JetStreamNotFoundError(f"{self.where} does not exist")
        self._stream_config = info.get("config") or {}
        return int((info.get("state") or {}).get("last_seq") or 0)

    async def _ensure_durable(self) -> None:
        what = f"consumer {self.consumer!r} on {self.where}"
        if self.create:
            values: dict[str, Any] = {
                "name": self.consumer, "ack_policy": "explicit", "deliver_policy": self.deliver_policy,
                "ack_wait": f"{self.ack_wait}s",
            }  # fmt: skip
            if len(self.filter_subjects) == 1:
                values["filter_subject"] = self.filter_subjects[0]
            elif self.filter_subjects:
                values["filter_subjects"] = self.filter_subjects
            await ensure_consumer(self.api, self.stream, ConsumerSpec.from_dict(values, "consumer"), logger=log)
        info = await self.api.consumer_info(self.stream, str(self.consumer))
        if info is None:
            if await self.api.stream_info(self.stream) is None:
                raise JetStreamNotFoundError(f"{self.where} does not exist")
            raise JetStreamNotFoundError(f"{what} does not exist: declare it (or leave consumer unset)")
        config = info.get("config") or {}
        if config.get("deliver_subject"):
            raise JetStreamConfigError(f"{what} is a push consumer: the sensor pulls; use a pull consumer")
        if config.get("ack_policy", "explicit") != "explicit":
            raise JetStreamConfigError(
                f"{what} has ack_policy={config.get('ack_policy')!r}: acking each message apart needs "
                "ack_policy 'explicit' (or use ack_mode='none')"
            )
        self.ack_wait = float(config.get("ack_wait") or self.ack_wait * 1e9) / 1e9
        if self.ack_mode == "on_match":
            self.max_ack_pending = int(config.get("max_ack_pending") or 0) or None

    async def _feed(self) -> None:
        assert self.puller is not None
        try:
            async for ticket in self.puller.deliveries():
                await self._queue.put(ticket)
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # handed to the look that waits
            await self._queue.put(err)

    # -- looking ---------------------------------------------------------------------------------

    async def look(self, window: float) -> LookResult:
        """Examine what is delivered within ``window`` seconds; stop at the first match (held, not acked)."""
        if self.match is not None:
            return self._result(self.match)
        await self.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + window
        examined = 0
        while True:
            self._check_room()
            try:
                item = await next_item(self._queue, max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return LookResult(False, examined)
            if isinstance(item, BaseException):
                raise item
            if await self._examine(item):
                return self._result(item)
            examined += 1

    async def _examine(self, ticket: Ticket) -> bool:
        assert self.puller is not None
        delivery = ticket.delivery
        if self.ack_mode == "on_match" and delivery.seq in self.left:
            await self.puller.settle([(ticket, "leave")])  # examined before: not again
            return False
        value = await self._apply(delivery)
        if value:
            self.match, self.match_value = ticket, value
            return True
        if self.ack_mode == "all_seen":
            await self.puller.settle([(ticket, "ack")])
        else:
            await self.puller.settle([(ticket, "leave")])
            if self.ack_mode == "on_match":
                self.left[delivery.seq] = None
                while len(self.left) > MAX_REMEMBERED:
                    del self.left[next(iter(self.left))]
        if self.ack_mode == "none":
            self.next_sequence = delivery.seq + 1
        return False

    async def _apply(self, delivery: Delivery) -> Any:
        try:
            if inspect.iscoroutinefunction(self.function):
                value = await self.function(delivery, **self.kwargs)
            else:  # in a thread: the event loop (the triggerer's) is never blocked
                value = await asyncio.to_thread(self.function, delivery, **self.kwargs)
        except Exception as err:
            raise JetStreamError(
                f"{self.function_name} raised on message #{delivery.seq} ({delivery.subject}) of {self.where}: "
                f"{type(err).__name__}: {err}; it is not acknowledged: it goes back to the consumer for the retry"
            ) from err
        if value:
            try:
                check_json(value, "value")
            except SpecError as err:
                raise JetStreamConfigError(
                    f"{self.function_name} returned a value for message #{delivery.seq} that cannot go to XCom: {err}"
                ) from None
        return value

    def _check_room(self) -> None:
        """``on_match``: once the consumer holds ``max_ack_pending`` messages left unacknowledged it delivers
        nothing new; fail then, instead of waiting for ever."""
        if self.max_ack_pending is not None and len(self.left) >= self.max_ack_pending:
            raise JetStreamConfigError(
                f"consumer {self.consumer!r} on {self.where}: {len(self.left)} examined messages left "
                f"unacknowledged (ack_mode='on_match') reach its max_ack_pending {self.max_ack_pending}: it delivers "
                "nothing new until they are acked. Use ack_mode='all_seen', raise max_ack_pending, or let another "
                "reader take them"
            )

    def _result(self, ticket: Ticket) -> LookResult:
        xcom = match_xcom(self.match_value, ticket.delivery)
        return LookResult(True, 0, xcom, None if self.ack_mode == "none" else ticket.reply)

    # -- stopping --------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop pulling. A held match is left pending (not naked): it is acked once Airflow stored it, or
        comes back after ``ack_wait`` if it never is."""
        if self.match is not None and self.puller is not None:
            self.puller.in_flight.pop(self.match.seq, None)
        await stop_task(self._pump)
        self._pump = None
        if self._ephemeral is not None:
            await discard_consumer(self.api, self.stream, self._ephemeral)
            self._ephemeral = None
        self.puller = None
