"""``JetStreamPublishOperator``: publish many messages with bounded in-flight async acks, exactly once.

Each message carries a ``Nats-Msg-Id`` derived from ``msg_id`` (templated; by default
``<dag_id>/<run_id>/<task_id>/<map_index>/<index>``), so a retried task stores nothing twice within
the stream's duplicate window: the retry's acks come back ``duplicate`` and are counted as such.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from airflow_provider_jetstream.api import JetStreamApi, domain_of
from airflow_provider_jetstream.exceptions import JetStreamConfigError, JetStreamError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.kv import encode_value
from airflow_provider_jetstream.operators.streams import JetStreamBaseOperator, _as_bool, _one, has_template
from airflow_provider_jetstream.specs import validate_subject
from airflow_provider_jetstream.topology_guard import guard_double_store

MSG_ID_HEADER = "Nats-Msg-Id"
INDEX = "{index}"
DEFAULT_MSG_ID = "{{ dag.dag_id }}/{{ run_id }}/{{ task.task_id }}/{{ ti.map_index }}/" + INDEX


@contextlib.asynccontextmanager
async def _nothing() -> Any:
    yield None


class JetStreamPublishError(JetStreamError):
    """Some messages were not stored (or stored in another domain than the one aimed at)."""


def msg_id_parts(template: str) -> tuple[str, str]:
    """``(before, after)`` the ``{index}`` placeholder; one is appended when the template has none."""
    if INDEX not in template:
        template = f"{template}/{INDEX}"
    before, _, after = template.partition(INDEX)
    return before, after


async def publish_all(
    nc: Client,
    subject: str,
    messages: Iterable[Any],
    *,
    prefix: str = "$JS.API",
    headers: dict[str, str] | None = None,
    msg_id: str | None = "",
    max_in_flight: int = 4000,
    ack_timeout: float = 30.0,
    expected_stream: str | None = None,
) -> dict[str, Any]:
    """Publish ``messages`` to ``subject``, at most ``max_in_flight`` unacked; the ack summary.

    One reply subscription takes every ack (reply subject ``<inbox>.<index>``); a semaphore bounds
    the messages in flight. Lighter per message than nats-py's ``publish_async`` (no future, token
    or callback per message), so the operator keeps up with a raw ``publish_async`` loop.
    """
    base = dict(headers or {})
    if expected_stream:
        base["Nats-Expected-Stream"] = expected_stream
    before, after = msg_id_parts(msg_id) if msg_id else ("", "")
    inbox = nc.new_inbox() + "."
    cut = len(inbox)
    window = asyncio.Semaphore(max_in_flight)
    state = {"acked": 0, "sent": None}
    all_acked = asyncio.Event()
    acks: dict[int, Any] = {}
    loads = json.loads

    async def on_ack(msg: Any) -> None:
        index = int(msg.subject[cut:])
        if index in acks:
            return
        if msg.headers and msg.headers.get("Status") == "503":
            acks[index] = nats.js.errors.NoStreamResponseError()
        else:
            try:
                acks[index] = loads(msg.data)
            except ValueError as err:
                acks[index] = err
        state["acked"] += 1
        window.release()
        if state["acked"] == state["sent"]:
            all_acked.set()

    sub = await nc.subscribe(inbox + "*", cb=on_ack, pending_msgs_limit=max(65536, max_in_flight * 2))
    publish = nc.publish
    acquire = window.acquire
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    sent = 0
    # A stall watchdog, pushed back as messages go out: with at most max_in_flight unacked, no acks
    # for ack_timeout means no progress at all.
    watchdog = getattr(asyncio, "timeout", None)
    try:
        async with watchdog(ack_timeout) if watchdog else _nothing() as deadline:
            for index, message in enumerate(messages):
                payload = message if isinstance(message, bytes) else encode_value(message)
                if msg_id:
                    hdrs = base.copy()
                    hdrs[MSG_ID_HEADER] = f"{before}{index}{after}"
                else:
                    hdrs = base.copy() if base else None
                await acquire()
                await publish(subject, payload, reply=f"{inbox}{index}", headers=hdrs)
                sent += 1
                if deadline is not None and not index & 1023:
                    deadline.reschedule(loop.time() + ack_timeout)
            state["sent"] = sent
            if state["acked"] >= sent:
                all_acked.set()
            if deadline is not None:
                deadline.reschedule(loop.time() + ack_timeout)
            await all_acked.wait()
    except TimeoutError:
        missing = sent - state["acked"]
        raise JetStreamPublishError(
            f"publish to {subject!r}: {missing} of {sent} messages not acknowledged within {ack_timeout:g}s"
        ) from None
    finally:
        await sub.unsubscribe()
    elapsed = time.perf_counter() - started
    stored = duplicates = 0
    first_seq = last_seq = None
    failures: list[tuple[int, BaseException]] = []
    where: dict[tuple[str, str | None], int] = {}
    for index in range(sent):
        ack = acks.get(index)
        if isinstance(ack, BaseException):
            failures.append((index, ack))
            continue
        if ack is None or "error" in ack:
            error = (ack or {}).get("error") or {}
            failures.append((index, JetStreamError(f"{error.get('description')} (err_code {error.get('err_code')})")))
            continue
        if ack.get("duplicate"):
            duplicates += 1
        else:
            stored += 1
        seq = ack.get("seq")
        if first_seq is None:
            first_seq = seq
        last_seq = seq if last_seq is None else max(last_seq, seq)
        key = (ack.get("stream"), ack.get("domain"))
        where[key] = where.get(key, 0) + 1
    return {
        "count": sent,
        "stored": stored,
        "duplicates": duplicates,
        "first_seq": first_seq,
        "last_seq": last_seq,
        "failed": len(failures),
        "failures": failures,
        "streams": where,
        "seconds": elapsed,
    }


class JetStreamPublishOperator(JetStreamBaseOperator):
    """Publish messages to a subject, each once (``Nats-Msg-Id``), with bounded in-flight acks.

    :param subject: the subject (no wildcards).
    :param messages: the payloads: bytes, str, or JSON-serializable values (an XComArg works too).
    :param messages_callable: instead of ``messages``, a callable returning an iterable (a generator
        streams large volumes); called with ``op_kwargs``.
    :param headers: headers on every message.
    :param msg_id: template of each message's ``Nats-Msg-Id``; ``{index}`` is the message's index
        (appended if missing). Default ``<dag_id>/<run_id>/<task_id>/<map_index>/{index}``; ``None``
        or ``""`` sends none (no deduplication).
    :param max_in_flight: most messages published but not yet acked. Default 4000.
    :param expected_stream: the stream that must store them (``Nats-Expected-Stream``).
    :param domain: the domain whose stream must store them: every ack is checked, and before
        publishing, the double-store guard refuses a subject that streams in other connected domains
        of this account also store (``allow_double_store=True`` publishes anyway).
    XCom: ``{"count", "stored", "duplicates", "first_seq", "last_seq", "stream", "domain", "rate"}``.
    """

    template_fields: Sequence[str] = (
        *JetStreamBaseOperator.template_fields,
        "subject",
        "messages",
        "headers",
        "msg_id",
        "expected_stream",
        "op_kwargs",
        "peer_domains",
    )

    def __init__(
        self,
        *,
        subject: str,
        messages: Any = None,
        messages_callable: Callable[..., Iterable[Any]] | None = None,
        op_kwargs: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        msg_id: str | None = DEFAULT_MSG_ID,
        max_in_flight: int = 4000,
        ack_timeout: float = 30.0,
        expected_stream: str | None = None,
        allow_double_store: bool = False,
        peer_domains: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (messages is None) == (messages_callable is None):
            raise JetStreamConfigError("give messages or messages_callable (exactly one)")
        if messages_callable is not None and not callable(messages_callable):
            raise JetStreamConfigError(f"messages_callable={messages_callable!r} is not callable")
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise JetStreamConfigError(f"max_in_flight={max_in_flight!r} is not allowed: use an integer >= 1")
        if not has_template(subject):
            _one(lambda v, p: validate_subject(v, p, wildcards=False), subject, "subject")
        self.subject = subject
        self.messages = messages
        self.messages_callable = messages_callable
        self.op_kwargs = op_kwargs or {}
        self.headers = headers
        self.msg_id = msg_id
        self.max_in_flight = max_in_flight
        self.ack_timeout = ack_timeout
        self.expected_stream = expected_stream
        self.allow_double_store = allow_double_store
        self.peer_domains = peer_domains

    def _messages(self) -> Iterable[Any]:
        if self.messages_callable is not None:
            return self.messages_callable(**self.op_kwargs)
        if isinstance(self.messages, (str, bytes)):
            return [self.messages]
        return self.messages

    def execute(self, context: Any) -> dict[str, Any]:
        _one(lambda v, p: validate_subject(v, p, wildcards=False), self.subject, "subject")
        messages = self._messages()

        async def work(nc: Client, api: JetStreamApi, hook: JetStreamHook) -> dict[str, Any]:
            await guard_double_store(
                nc,
                target_prefix=api.prefix,
                subjects=[self.subject],
                what=f"publish to {self.subject!r}",
                peer_domains=self.peer_domains_for(hook),
                allow=_as_bool("allow_double_store", self.allow_double_store),
                timeout=self.request_timeout,
                logger=self.log,
            )
            return await publish_all(
                nc,
                self.subject,
                messages,
                prefix=api.prefix,
                headers=self.headers,
                msg_id=self.msg_id or "",
                max_in_flight=self.max_in_flight,
                ack_timeout=self.ack_timeout,
                expected_stream=self.expected_stream or None,
            )

        summary = self.run_api(work)
        return self._report(summary)

    def _report(self, summary: dict[str, Any]) -> dict[str, Any]:
        target_domain = domain_of(self.get_hook().resolve_api_prefix())
        where = summary.pop("streams")
        failures = summary.pop("failures")
        wrong = {k: n for k, n in where.items() if target_domain and k[1] and k[1] != target_domain}
        problems = []
        if failures:
            index, err = failures[0]
            reason = (
                "no stream listens on it"
                if isinstance(err, (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError))
                else f"{type(err).__name__}: {err}"
            )
            problems.append(
                f"{len(failures)} of {summary['count']} messages were not stored (first: #{index}, {reason})"
            )
        if wrong:
            problems.append(
                "stored outside domain "
                + repr(target_domain)
                + ": "
                + ", ".join(f"{n} by stream {s!r} in domain {d!r}" for (s, d), n in wrong.items())
            )
        if problems:
            raise JetStreamPublishError(f"publish to {self.subject!r}: " + "; ".join(problems))
        rate = summary["count"] / summary["seconds"] if summary["seconds"] else None
        streams = sorted({s for s, _ in where})
        domains = sorted({d for _, d in where if d})
        self.log.info(
            "published %d messages to %r: %d stored, %d duplicates, seq %s..%s, %.0f msg/s",
            summary["count"],
            self.subject,
            summary["stored"],
            summary["duplicates"],
            summary["first_seq"],
            summary["last_seq"],
            rate or 0,
        )
        return {
            **{k: summary[k] for k in ("count", "stored", "duplicates", "first_seq", "last_seq")},
            "subject": self.subject,
            "stream": streams[0] if len(streams) == 1 else streams,
            "domain": domains[0] if len(domains) == 1 else (domains or target_domain),
            "rate": round(rate, 1) if rate else None,
        }
