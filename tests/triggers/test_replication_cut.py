"""Issue #9: right after a leaf is cut off, no replication check may say "caught up".

One topology, one cut, every checker at once: for a hub mirror and a hub source of a leaf stream,
and for ``max_inactive`` 10 s and 60 s, the sensor's poke (one object across pokes), its reschedule
path (a new sensor object at each poke, its state restored from a task state store) and its
deferrable path (a first poke, then the trigger it hands its state to, serialized and rebuilt) all
check every 0.4 s. While the leaf is cut off (and holds 25 messages the hub never got) none may say
caught up; after the relink, each may say so only once the copy holds every message.

Before the fix the hub's report alone decided: ``lag 0``, no error and ``active`` below
``max_inactive`` for the first seconds after the cut read as caught up. The ``verify_origin="off"``
checker keeps that rule and must be fooled, which shows the cut really is invisible from the hub.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor
from airflow_provider_jetstream.testing.servers import USERS
from airflow_provider_jetstream.triggers import replication_lag as trigger_module
from tests.support.natsutil import connect, leaf_origin_and_hub_copies, origin_silence, unique
from tests.support.triggers import rebuild
from tests.support.waiting import scaled

CUT_CHECKS = 40  # checks each checker makes while the leaf is cut off (at least)
# How long the hub must have reported no contact from the leaf on each copy before the relink: the smaller
# max_inactive and half again, so that every checker checks while that silence is under the bound and once past it.
# The longest silence seen counts, not the current one: nats-server 2.10 retries a cut-off source about every 10 s
# after the first 19, and each retry resets the source's ``active``.
CUT_SILENCE = 15.0
INTERVAL = 0.4
BEFORE, TOTAL = 10, 35  # messages before the cut; after the 25 published on the cut-off leaf


class DictStateStore:
    """Airflow's ``context["task_state_store"]`` for a rescheduled sensor: values go through JSON."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(self.values[key]) if key in self.values else default

    def set(self, key: str, value: Any) -> None:
        self.values[key] = json.dumps(value)

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


@dataclass
class Checker:
    name: str
    stream: str
    verdicts: list[tuple[str, bool, int | None]] = field(default_factory=list)  # (phase, done, messages)

    def during(self, phase: str) -> list[tuple[str, bool, int | None]]:
        return [v for v in self.verdicts if v[0] == phase]


def test_no_checker_says_caught_up_while_the_leaf_is_cut_off(make_topology, jetstream_conn, monkeypatch) -> None:
    topology = make_topology(leaf_domains=["leaf"])
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password, connect_timeout=2)
    origin = unique("cut")
    aggregate, mirror = asyncio.run(leaf_origin_and_hub_copies(topology, origin, BEFORE))

    def sensor(stream: str, max_inactive: int, **kwargs: Any) -> JetStreamReplicationLagSensor:
        return JetStreamReplicationLagSensor(
            task_id="replicated",
            jetstream_conn_id=conn_id,
            domain="hub",
            stream=stream,
            options={"max_inactive": max_inactive, "verify_origin": kwargs.pop("verify_origin", "auto")},
            poke_interval=INTERVAL,
            **kwargs,
        )

    # Caught up before the cut, exactly: the probe reaches the leaf, the copies hold its last sequence.
    for stream in (aggregate, mirror):
        deadline = time.monotonic() + 30
        while not (result := sensor(stream, 10).poke({})):
            assert time.monotonic() < deadline, f"{stream} never caught up before the cut"
            time.sleep(0.2)
        assert result.xcom_value["messages"] == BEFORE
        assert [o["check"] for o in result.xcom_value["origins"]] == ["exact"]

    topology.disconnect_leaf("leaf")

    async def publish_on_isolated_leaf() -> None:
        leaf = await connect(topology.url("leaf"))
        for i in range(TOTAL - BEFORE):
            await leaf.jetstream().publish(f"{origin}.in", f"late{i}".encode())
        await leaf.close()

    asyncio.run(publish_on_isolated_leaf())

    phase = {"now": "cut"}
    old_rule = Checker("verify_origin='off' mirror 60s", mirror)
    pool = ThreadPoolExecutor(max_workers=16)
    checkers: list[Checker] = []

    async def in_thread(call: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    def record(checker: Checker, result: Any) -> bool:
        done = bool(result)
        messages = result.xcom_value["messages"] if done else None
        checker.verdicts.append((phase["now"], done, messages))
        return done

    async def poke_loop(checker: Checker, poke: Callable[[], Any], until: Callable[[], bool]) -> None:
        while not until():
            started = time.monotonic()
            if record(checker, await in_thread(poke)) and phase["now"] == "relinked":
                return
            await asyncio.sleep(max(0.0, INTERVAL - (time.monotonic() - started)))

    # The trigger's checks, seen through the hook method its run loop calls (a spy, not a stand-in).
    trigger_checks: dict[tuple[str, float], Checker] = {}

    class SpiedHook(JetStreamHook):
        async def acheck_replication(self, watch: Any, **kwargs: Any) -> Any:
            check = await super().acheck_replication(watch, **kwargs)
            checker = trigger_checks[(watch.stream, watch.max_inactive)]
            checker.verdicts.append((phase["now"], check.done, check.messages))
            return check

    monkeypatch.setattr(
        trigger_module.JetStreamReplicationLagTrigger,
        "new_hook",
        lambda self: SpiedHook(self.jetstream_conn_id, domain=self.domain, api_prefix=self.api_prefix),
    )

    async def scenario() -> dict[str, Any]:
        longest_silence = {aggregate: 0.0, mirror: 0.0}

        async def cut_over() -> bool:
            if phase["now"] != "cut":
                return True
            cut_checks = [len(c.during("cut")) for c in checkers if c is not old_rule]
            if min(cut_checks, default=0) < CUT_CHECKS:
                return False
            for stream in longest_silence:
                silence = await origin_silence(topology, {stream: "hub"})
                longest_silence[stream] = max(longest_silence[stream], silence)
            return min(longest_silence.values()) >= CUT_SILENCE

        tasks = []
        trigger_events = {}
        for stream in (aggregate, mirror):
            kind = "source" if stream == aggregate else "mirror"
            for max_inactive in (10, 60):
                poker = sensor(stream, max_inactive)
                checker = Checker(f"poke {kind} {max_inactive}s", stream)
                checkers.append(checker)
                tasks.append(poke_loop(checker, lambda p=poker: p.poke({}), lambda: False))

                store = DictStateStore()
                checker = Checker(f"reschedule {kind} {max_inactive}s", stream)
                checkers.append(checker)

                def reschedule_poke(s=stream, m=max_inactive, st=store) -> Any:
                    return sensor(s, m, mode="reschedule").poke({"task_state_store": st})

                tasks.append(poke_loop(checker, reschedule_poke, lambda: False))

                deferring = sensor(stream, max_inactive, deferrable=True)
                checker = Checker(f"deferrable {kind} {max_inactive}s", stream)
                checkers.append(checker)
                trigger_checks[(stream, float(max_inactive))] = checker
                tasks.append(run_deferred(deferring, checker, trigger_events))

        # The rule before the fix, for contrast: it must be fooled by the cut.
        checkers.append(old_rule)
        off = sensor(mirror, 60, verify_origin="off")
        tasks.append(poke_loop(old_rule, lambda: off.poke({}), lambda: phase["now"] != "cut"))

        async def relink_when_cut_over() -> None:
            while not await cut_over():
                await asyncio.sleep(0.2)
            phase["now"] = "relinking"
            await asyncio.to_thread(topology.reconnect_leaf, "leaf")
            phase["now"] = "relinked"

        async def everything() -> None:
            await asyncio.gather(relink_when_cut_over(), *tasks)

        await asyncio.wait_for(everything(), timeout=scaled(150))
        return trigger_events

    async def run_deferred(deferring: JetStreamReplicationLagSensor, checker: Checker, events: dict) -> None:
        record(checker, await in_thread(lambda: deferring.poke({})))  # the worker's first check
        trigger = rebuild(deferring.trigger())  # serialize -> rebuild, the state handed over inside
        assert trigger.state.get("watch"), "the sensor hands its watch state to the trigger"
        run = trigger.run()
        try:
            event = await anext(run)
        finally:
            await run.aclose()
        events[checker.name] = event.payload
        checker.verdicts.append(("event", event.payload["status"] == "success", None))

    try:
        events = asyncio.run(scenario())
    finally:
        pool.shutdown(wait=False)

    summary = {c.name: (len(c.during("cut")), sum(d for _, d, _ in c.during("cut"))) for c in checkers}
    # Nobody but the old rule said "caught up" while the leaf was cut off, in at least 40 checks each.
    for checker in checkers:
        cut = checker.during("cut")
        if checker is old_rule:
            assert any(done for _, done, _ in cut), f"the hub's report alone should be fooled: {summary}"
            continue
        assert len(cut) >= CUT_CHECKS, f"{checker.name}: only {len(cut)} checks while cut off: {summary}"
        assert not any(done for _, done, _ in cut), f"{checker.name} said caught up while cut off: {summary}"
        # ... and after the relink, caught up only with every message in the copy.
        relinked_done = [messages for when, done, messages in checker.verdicts if done and when != "event"]
        assert relinked_done, f"{checker.name} never caught up after the relink"
        if checker.name.startswith("deferrable"):
            assert events[checker.name]["status"] == "success"
            assert events[checker.name]["replication"]["messages"] == TOTAL
        assert set(relinked_done) == {TOTAL}, f"{checker.name}: caught up with {relinked_done} of {TOTAL} messages"

    async def counts() -> dict[str, int]:
        leaf, hub = await connect(topology.url("leaf")), await connect(topology.url("hub"))
        try:
            found = {origin: (await leaf.jetstream().stream_info(origin)).state.messages}
            for stream in (aggregate, mirror):
                found[stream] = (await hub.jetstream().stream_info(stream)).state.messages
            return found
        finally:
            await leaf.close()
            await hub.close()

    print("checks while cut off (count, caught up):", summary)
    assert asyncio.run(counts()) == {origin: TOTAL, aggregate: TOTAL, mirror: TOTAL}
