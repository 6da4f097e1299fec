"""JetStreamConsumeOperator on real servers: ack only after the function returned, nak / term / dead-letter, XCom
results within their limit, and a task killed between processing and ack, then retried: nothing lost, one ack each."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import nats
import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError, SpecErrors
from airflow_provider_jetstream.core.protocol import parse_ack_reply
from airflow_provider_jetstream.operators.consume import ConsumeOptions, JetStreamConsumeOperator
from airflow_provider_jetstream.testing.servers import USERS
from tests.support.consume_functions import BadInput, processed, record
from tests.support.management import uid
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
RECORD = "tests.support.consume_functions.record"


def declare(raw, stream: str, consumer: str, **config) -> None:
    body = {"stream_name": stream, "config": {"durable_name": consumer, "ack_policy": "explicit", **config}}
    reply = raw.api("hub", f"CONSUMER.CREATE.{stream}.{consumer}", body)
    assert "error" not in reply, reply


def consumer_info(raw, stream: str, consumer: str) -> dict:
    return raw.api("hub", f"CONSUMER.INFO.{stream}.{consumer}")


class AckWatch:
    """Every ack body sent to a stream's consumer, by stream sequence, seen by a subscriber of ``$JS.ACK.>``."""

    def __init__(self, url: str, stream: str) -> None:
        self.url, self.stream = url, stream
        self.bodies: dict[int, list[bytes]] = {}
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._watch()), daemon=True)

    async def _watch(self) -> None:
        user, password = USERS["ACC"]
        nc = await nats.connect(self.url, user=user, password=password)
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()

        async def seen(msg) -> None:
            meta = parse_ack_reply(msg.subject)
            if meta is not None and meta.stream == self.stream:
                self.bodies.setdefault(meta.sequence, []).append(msg.data)

        await nc.subscribe("$JS.ACK.>", cb=seen)
        await nc.flush()
        self._ready.set()
        await self._stop.wait()
        await nc.drain()

    def __enter__(self) -> AckWatch:
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def acks(self) -> dict[int, int]:
        return {seq: sum(1 for body in bodies if body == b"+ACK") for seq, bodies in self.bodies.items()}


def consume(conn: str, **kwargs) -> dict:
    kwargs.setdefault("max_wait", 1)
    return JetStreamConsumeOperator(task_id=uid("consume"), jetstream_conn_id=conn, domain="hub", **kwargs).execute({})


def test_each_message_is_acked_after_its_function_returned(hub_conn, hub_leaf, raw, tmp_path) -> None:
    name = uid("cons")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    raw.publish(f"{name}.x", [json.dumps({"n": i}).encode() for i in range(12)])
    declare(raw, name, "work")
    log = str(tmp_path / "seen")
    with AckWatch(hub_leaf.hub.url, name) as watch:
        result = consume(
            hub_conn,
            stream=name,
            consumer="work",
            apply_function=RECORD,
            apply_function_kwargs={"log": log},
            batch_size=5,
            options={"return_results": True},
        )
        wait_until(watch.acks, lambda acks: len(acks) == 12, 30, "12 acks")
    assert processed(log) == list(range(1, 13))
    assert result["results"] == list(range(1, 13))
    expected = {"processed": 12, "acked": 12, "nakd": 0, "termed": 0, "first_seq": 1, "last_seq": 12}
    assert {k: result[k] for k in expected} == expected and result["batches"] == 3
    assert watch.acks() == {seq: 1 for seq in range(1, 13)}
    info = consumer_info(raw, name, "work")
    assert info["num_pending"] == 0 and info["num_ack_pending"] == 0
    # max_messages bounds a run; a second run takes what is left.
    raw.publish(f"{name}.x", [b"{}"] * 5)
    assert consume(hub_conn, stream=name, consumer="work", apply_function=record, apply_function_kwargs={"log": log},
                   max_messages=3)["processed"] == 3  # fmt: skip
    per_batch = consume(
        hub_conn,
        stream=name,
        consumer="work",
        apply_function_batch="tests.support.consume_functions.record_batch",
        apply_function_kwargs={"log": log},
        options={"return_results": True},
    )
    assert per_batch["results"] == [[16, 17]] and per_batch["acked"] == 2


def test_failures_nak_with_backoff_or_terminate_to_the_dead_letter_stream(hub_conn, raw, tmp_path) -> None:
    name, dlq = uid("fail"), uid("dlq")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    raw.create("hub", {"name": dlq, "subjects": [f"{dlq}.>"]})
    raw.publish(f"{name}.x", [b"{}", b"bad", b"{}", b"{}"])
    declare(raw, name, "work")
    log = str(tmp_path / "seen")
    first = consume(
        hub_conn,
        stream=name,
        consumer="work",
        apply_function=RECORD,
        apply_function_kwargs={"log": log, "fail": [3]},
        term_on=[BadInput],
        dead_letter_stream=dlq,
        options=ConsumeOptions(nak_delay=0.5),
    )
    assert (first["acked"], first["nakd"], first["termed"], first["dead_lettered"]) == (2, 1, 1, 1)
    copy = raw.api("hub", f"STREAM.MSG.GET.{dlq}", {"seq": 1})["message"]
    assert copy["subject"] == f"{dlq}.{name}.work"
    # The nak'd message comes back after its delay and is acked; the terminated one never comes back.
    wait_until(
        lambda: consume(
            hub_conn,
            stream=name,
            consumer="work",
            apply_function=RECORD,
            apply_function_kwargs={"log": log, "fail": [3]},
        )["acked"],
        lambda acked: acked == 1,
        30,
        "the redelivered message",
    )
    assert sorted(processed(log)) == [1, 2, 3, 3, 4]
    info = consumer_info(raw, name, "work")
    assert info["num_pending"] == 0 and info["num_ack_pending"] == 0 and info["ack_floor"]["stream_seq"] == 4


def test_results_beyond_the_xcom_limit_fail_or_are_trimmed(hub_conn, raw, tmp_path) -> None:
    name = uid("xcom")
    raw.create("hub", {"name": name, "subjects": [name]})
    raw.publish(name, [b"{}"] * 6)
    declare(raw, name, "work")
    log = str(tmp_path / "seen")
    common = {"stream": name, "consumer": "work", "apply_function": RECORD, "apply_function_kwargs": {"log": log}}
    with pytest.raises(JetStreamConfigError, match="exceed max_xcom_bytes=7 after 2 results"):
        consume(hub_conn, **common, options={"return_results": True, "max_xcom_bytes": 7})
    # Only what fit was acked: the message whose result did not fit comes back first.
    trimmed = consume(
        hub_conn, **common, options={"return_results": True, "max_xcom_bytes": 7, "results_overflow": "trim"}
    )
    assert trimmed["results"] == [3, 4] and trimmed["results_trimmed"] == 2 and trimmed["acked"] == 4
    info = consumer_info(raw, name, "work")
    assert info["num_pending"] == 0 and info["num_ack_pending"] == 0


def test_arguments_are_refused_at_parse_time() -> None:
    with pytest.raises(SpecErrors) as refused:
        JetStreamConsumeOperator(
            task_id="bad",
            stream="s",
            consumer="",
            apply_function="not a path",
            batch_size=0,
            dead_letter_stream="dlq",
        )
    text = str(refused.value)
    for part in ("consumer=''", "apply_function='not a path'", "batch_size=0", "dead_letter_stream='dlq'"):
        assert part in text
    with pytest.raises(SpecErrors, match="exactly one"):
        JetStreamConsumeOperator(task_id="none", stream="s", consumer="c")
    with pytest.raises(SpecErrors, match=r"options\.start_seq=2 is not allowed: only without a consumer"):
        JetStreamConsumeOperator(
            task_id="start", stream="s", consumer="c", apply_function=record, options={"start_seq": 2}
        )
    with pytest.raises(
        SpecErrors, match=r"nak_delay=2 is not allowed: moved into options=ConsumeOptions\(nak_delay=2\)"
    ):
        JetStreamConsumeOperator(task_id="moved", stream="s", consumer="c", apply_function=record, nak_delay=2)


def test_a_task_killed_between_processing_and_ack_then_retried_loses_nothing_and_acks_once(
    hub_conn, hub_leaf, raw, tmp_path
) -> None:
    name = uid("kill")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    raw.publish(f"{name}.x", [json.dumps({"n": i}).encode() for i in range(20)])
    declare(raw, name, "work", ack_wait=2_000_000_000)
    log = str(tmp_path / "seen")
    kwargs = {
        "jetstream_conn_id": hub_conn,
        "domain": "hub",
        "stream": name,
        "consumer": "work",
        "apply_function": RECORD,
        "apply_function_kwargs": {"log": log, "die_at": 7},
        "batch_size": 5,
        "max_wait": 3,
    }

    def run_task() -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "tests.support.consume_functions", json.dumps(kwargs)]
        return subprocess.run(command, cwd=REPO, env=os.environ.copy(), capture_output=True, text=True, timeout=300)

    with AckWatch(hub_leaf.hub.url, name) as watch:
        killed = run_task()
        assert killed.returncode == -9, killed.stderr[-2000:]
        assert processed(log)[-1] == 7 and 7 not in watch.acks()  # processed, never acked
        # Airflow's retries: run again until the consumer has nothing pending (the killed task's
        # unacked messages come back after ack_wait).
        for _attempt in range(5):
            retry = run_task()
            assert retry.returncode == 0, retry.stderr[-2000:]
            info = consumer_info(raw, name, "work")
            if info["num_pending"] == 0 and info["num_ack_pending"] == 0:
                break
        wait_until(watch.acks, lambda acks: len(acks) == 20, 30, "every message acked")
    seen = processed(log)
    assert sorted(set(seen)) == list(range(1, 21))  # none lost: each processed at least once
    assert seen.count(7) == 2  # the one killed before its ack was processed again
    assert watch.acks() == {seq: 1 for seq in range(1, 21)}  # each acked exactly once
    assert consumer_info(raw, name, "work")["ack_floor"]["stream_seq"] == 20
