"""Connection fields and operator timeouts are checked before anything is sent (issue #10, parts 2-3).

Each bad value is given the way a user gives it (an ``AIRFLOW_CONN_*`` variable, an operator
argument) and must be refused naming the connection or argument, the value and what is allowed,
with no TCP connection made (a listener counts them) or no message stored (a real stream).
``ack_timeout`` is proven on a real server to bound a publish whose acks never come, on every
supported Python (it was a no-op on 3.10).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamPublishError
from airflow_provider_jetstream.core.publish.engine import PublishSummary, publish_messages
from airflow_provider_jetstream.core.sync import run_sync
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from airflow_provider_jetstream.operators.streams import JetStreamCreateStreamOperator
from tests.support.recorder import recording_server


def _outgoing(subject: str, payloads: Iterable[str]) -> Iterator[tuple[str, bytes, None]]:
    return ((subject, payload.encode(), None) for payload in payloads)


BAD_SECONDS = ["abc", -1, 0, "inf", "nan", "-inf", float("inf"), float("nan"), True, [], {"s": 1}]


@pytest.mark.parametrize("value", BAD_SECONDS, ids=repr)
def test_bad_connect_timeout_is_refused_before_connecting(jetstream_conn: Callable[..., str], value) -> None:
    with recording_server() as recorder:
        conn_id = jetstream_conn(f"127.0.0.1:{recorder.port}", login="acc", password="pw", connect_timeout=value)
        ok, message = JetStreamHook(conn_id).test_connection()
        assert not ok
        assert message == (
            f"connection {conn_id!r}: connect_timeout={value!r} is not allowed: use a finite number >= 0.1"
        )
        assert recorder.accepted == 0


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("max_reconnect_attempts", 1.5, "use an integer >= -1"),
        ("max_reconnect_attempts", "1.5", "use an integer >= -1"),
        ("max_reconnect_attempts", "inf", "use an integer >= -1"),
        ("reconnect_time_wait", "inf", "use a finite number >= 0"),
        ("reconnect_time_wait", "nan", "use a finite number >= 0"),
    ],
)
def test_bad_numbers_are_refused_not_truncated(jetstream_conn: Callable[..., str], field, value, allowed) -> None:
    with recording_server() as recorder:
        conn_id = jetstream_conn(f"127.0.0.1:{recorder.port}", **{field: value})
        ok, message = JetStreamHook(conn_id).test_connection()
        assert not ok
        assert message == f"connection {conn_id!r}: {field}={value!r} is not allowed: {allowed}"
        assert recorder.accepted == 0


def test_whole_numbers_in_any_spelling_are_accepted(hub_leaf, jetstream_conn: Callable[..., str]) -> None:
    conn_id = jetstream_conn(
        f"127.0.0.1:{hub_leaf.hub.port}", login="acc", password="acc", max_reconnect_attempts=2.0, connect_timeout="2.5"
    )
    config = JetStreamHook(conn_id).get_conn_config()
    assert (config.max_reconnect_attempts, config.connect_timeout) == (2, 2.5)
    assert isinstance(config.max_reconnect_attempts, int)
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok, message


@pytest.mark.parametrize("junk", ["\n", "\r", "\t", "\x00", " "], ids=repr)
def test_host_with_whitespace_or_control_character_is_refused(jetstream_conn: Callable[..., str], junk: str) -> None:
    """urlsplit drops tabs and newlines: "127.0.0.1:42\\n22" used to connect to port 4222."""
    with recording_server() as recorder:
        port = str(recorder.port)
        conn_id = jetstream_conn(f"127.0.0.1:{port[:2]}{junk}{port[2:]}", login="acc", password="pw")
        ok, message = JetStreamHook(conn_id).test_connection()
        assert not ok
        assert message.startswith(f"connection {conn_id!r}: host entry ")
        assert f"holds the whitespace or control character {junk!r}" in message
        assert recorder.accepted == 0


def test_host_entries_around_commas_may_have_spaces(hub_leaf, jetstream_conn: Callable[..., str]) -> None:
    conn_id = jetstream_conn(f" 127.0.0.1:{hub_leaf.hub.port} , ", login="acc", password="acc")
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok, message


# -- operator timeouts -------------------------------------------------------------------------


@pytest.mark.parametrize("value", BAD_SECONDS, ids=repr)
def test_bad_request_timeout_is_refused_when_the_dag_is_parsed(value) -> None:
    with pytest.raises(JetStreamConfigError) as err:
        JetStreamCreateStreamOperator(task_id="s", stream={"name": "x", "subjects": ["x"]}, request_timeout=value)
    assert str(err.value) == f"request_timeout={value!r} is not allowed: use a finite number of seconds > 0, e.g. 5"


@pytest.mark.parametrize("value", BAD_SECONDS, ids=repr)
def test_bad_ack_timeout_is_refused_when_the_dag_is_parsed(value) -> None:
    with pytest.raises(
        JetStreamConfigError, match=r"^options\.ack_timeout=.* is not allowed: use a finite number of seconds > 0"
    ):
        JetStreamPublishOperator(task_id="p", subject="a.b", messages=["x"], options={"ack_timeout": value})


def test_negative_ack_timeout_stores_nothing(hub_leaf, hub_conn: str) -> None:
    """On main, ``ack_timeout=-1`` stored the messages and then reported them as not acknowledged."""
    name = f"neg_ack_{uuid.uuid4().hex[:8]}"
    hook = JetStreamHook(hub_conn)

    async def attempt() -> tuple[BaseException | None, int]:
        async with hook.ajetstream() as js:
            await js.add_stream(name=name, subjects=[f"{name}.>"])
            error = None
            try:
                await publish_messages(js._nc, _outgoing(f"{name}.x", ["a", "b", "c"]), ack_timeout=-1)
            except Exception as err:
                error = err
            return error, (await js.stream_info(name)).state.messages

    error, stored = run_sync(attempt())
    assert isinstance(error, JetStreamConfigError) and "ack_timeout=-1 is not allowed" in str(error)
    assert stored == 0


def test_ack_timeout_bounds_a_publish_whose_acks_never_come(hub_leaf, hub_conn: str) -> None:
    """A core subscriber takes the messages and never replies: the publish fails after ack_timeout.

    On Python 3.10, main ignored ack_timeout (asyncio.timeout does not exist there) and waited
    forever; the outer bound here turns such a hang into a failure.
    """
    subject = f"black_hole.{uuid.uuid4().hex[:8]}"
    hook = JetStreamHook(hub_conn)

    async def attempt() -> tuple[BaseException, float]:
        async with hook.aconnect() as nc:
            await nc.subscribe(subject)  # takes every message, answers none
            await nc.flush()
            started = time.monotonic()
            try:
                await asyncio.wait_for(
                    publish_messages(
                        nc,
                        _outgoing(subject, [str(i) for i in range(20)]),
                        ack_timeout=0.5,
                        max_in_flight=8,
                        what=subject,
                    ),
                    15,
                )
            except (JetStreamPublishError, asyncio.TimeoutError) as err:
                return err, time.monotonic() - started
            raise AssertionError("the publish succeeded without a single ack")

    error, took = run_sync(attempt())
    assert isinstance(error, JetStreamPublishError), f"ack_timeout was not honoured: {error!r} after {took:.1f}s"
    assert str(error).startswith(f"{subject}: 8 of 8 messages not acknowledged within 0.5s; stored 0, duplicates 0,")
    assert "not republished: it has no Nats-Msg-Id" in str(error)
    assert 0.5 <= took < 5


def test_slow_producer_is_not_a_stall(hub_leaf, hub_conn: str) -> None:
    """The watchdog counts time without acks while messages are unacked, not time between messages."""
    ack_timeout = 0.3
    name = f"slow_{uuid.uuid4().hex[:8]}"
    hook = JetStreamHook(hub_conn)

    async def attempt() -> PublishSummary:
        async with hook.ajetstream() as js:
            await js.add_stream(name=name, subjects=[f"{name}.>"])

            def slow():
                for i in range(3):
                    if i:  # a producer slower than ack_timeout between messages: measured, not assumed
                        gap_from = time.monotonic()
                        while time.monotonic() - gap_from <= ack_timeout:
                            time.sleep(0.05)
                    yield str(i)

            return await publish_messages(js._nc, _outgoing(f"{name}.x", slow()), ack_timeout=ack_timeout)

    summary = run_sync(attempt())
    assert (summary.stored, summary.failures) == (3, [])
