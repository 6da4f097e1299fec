"""Drives event triggers the way the running Airflow's triggerer does: on 3.3+ with Airflow's own
``SharedStreamManager``; before 3.3 (no shared streams) each trigger's ``run()`` alone, as 3.1's and 3.2's
``TriggerRunner.run_trigger`` does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider_jetstream.compat import AIRFLOW_V_3_3_PLUS
from tests.support.triggers import rebuild
from tests.support.waiting import eventually


@dataclass
class Fired:
    trigger_id: int
    event: TriggerEvent
    seq: int | None


@dataclass
class Triggerer:
    """The shared-stream lines of ``TriggerRunner.run_trigger`` (triggerer_job_runner.py) around a real manager.

    ``run(trigger_id, trigger)`` subscribes and filters exactly as the runner does; events land in
    ``fired`` with their persist seq; ``persist(...)`` is what the supervisor's commit confirms. Before
    Airflow 3.3 there is no manager: each trigger runs alone, its events carry no seq and ``persist`` confirms
    nothing (the trigger acks ``fallback_ack_delay`` seconds after an event fired).
    """

    ack_timeout: float = 300.0
    manager: Any = field(init=False)
    fired: list[Fired] = field(default_factory=list)
    errors: dict[int, BaseException] = field(default_factory=dict)
    tasks: dict[int, asyncio.Task] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not AIRFLOW_V_3_3_PLUS:
            self.manager = None
            return
        from airflow.configuration import conf
        from airflow.triggers.shared_stream import SharedStreamManager

        self.manager = SharedStreamManager(  # as TriggerRunner builds it
            log=structlog.get_logger("test-shared-stream"),
            max_subscriber_queue=conf.getint("triggerer", "shared_stream_subscriber_queue_size"),
            ack_timeout=self.ack_timeout,
        )

    def start(self, trigger_id: int, trigger: BaseEventTrigger) -> None:
        """Serialize -> rebuild (as the DB round trip does) -> subscribe and run."""
        self.tasks[trigger_id] = asyncio.create_task(self._run(trigger_id, rebuild(trigger)))

    async def _run(self, trigger_id: int, trigger: Any) -> None:
        if self.manager is None:
            await self._run_alone(trigger_id, trigger)
            return
        key = trigger.shared_stream_key()
        stream = self.manager.subscribe(trigger_id=trigger_id, trigger=trigger, key=key)
        try:
            async for event in trigger.filter_shared_stream(stream):
                seq = self.manager.bind_pending_event(trigger_id=trigger_id, key=key)
                self.fired.append(Fired(trigger_id, event, seq))
        except Exception as err:
            self.errors[trigger_id] = err
        finally:
            await self.manager.unsubscribe(trigger_id, key)
            with contextlib.suppress(Exception):
                await trigger.cleanup()

    async def _run_alone(self, trigger_id: int, trigger: Any) -> None:
        """Airflow < 3.3's ``run_trigger``: the trigger's own ``run()``, then its ``cleanup()``."""
        try:
            async for event in trigger.run():
                self.fired.append(Fired(trigger_id, event, None))
        except Exception as err:
            self.errors[trigger_id] = err
        finally:
            with contextlib.suppress(Exception):
                await trigger.cleanup()

    def persist(self, which: Callable[[Fired], bool] = lambda f: True) -> int:
        """Confirm the events ``which`` selects as stored; returns how many (none before Airflow 3.3)."""
        chosen = [f for f in self.fired if f.seq is not None and which(f)]
        if self.manager is None:
            return 0
        self.manager.confirm_persisted([f.seq for f in chosen])
        for f in chosen:
            f.seq = None
        return len(chosen)

    async def wait_fired(self, count: int, timeout: float = 30.0, ignore_errors: bool = False) -> list[Fired]:
        """Wait until ``count`` events fired; fail at once when a watcher failed (unless ``ignore_errors``)."""
        failed = (lambda: False) if ignore_errors else (lambda: bool(self.errors))
        got = await eventually(lambda: len(self.fired), lambda n: n >= count or failed(), timeout)
        assert ignore_errors or not self.errors, self.errors
        assert got >= count, f"{got} events fired, expected {count}"
        return self.fired

    async def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        if self.manager is not None:
            await self.manager.stop_all()


async def published_so_far_reached_the_server(conn_id: str, round_trips: int = 2) -> None:
    """Round trips (PING/PONG) on this event loop's shared connection of ``conn_id``: the one the watchers of a
    :class:`Triggerer` in this loop publish their acks on. When they return, whatever was published on it before
    has been processed by the server, including what a task woken by the test's last step (a persist
    confirmation) sent: the first round trip lets that task run, the second follows what it published."""
    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

    async with JetStreamHook(conn_id).aconnect() as nc:
        for _ in range(round_trips):
            await nc.flush()
