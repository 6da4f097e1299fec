"""A seeded, bounded schedule of hub node kills and restarts, and Airflow's task retries, for the nemesis test.

The schedule is the scenario, so it is timed: round ``i`` (from 0) kills node ``rng.randrange(nodes)`` at
``first_at + i * every`` seconds after :meth:`Nemesis.start` (SIGKILL) and starts it again ``down_for``
seconds later (waiting until it is healthy). ``down_for < every``: never more than one node is down.
The same seed gives the same nodes in the same order. Stopping the nemesis ends the schedule early and
starts a node that is down, so the cluster is whole when it returns.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow_provider_jetstream.compat import AirflowFailException
from airflow_provider_jetstream.core.errors import is_refusal
from airflow_provider_jetstream.testing.servers import LocalTopology

T = TypeVar("T")


@dataclass(frozen=True)
class Fault:
    """One step of the schedule: ``action`` (``"kill"`` or ``"start"``) on hub node ``node``, ``at`` seconds
    after the start."""

    at: float
    action: str
    node: int


def schedule(seed: int, nodes: int, rounds: int, every: float, down_for: float, first_at: float = 0.5) -> list[Fault]:
    """The faults of ``rounds`` rounds (see the module doc); refuses ``down_for >= every`` (two nodes down)."""
    if not 0 < down_for < every:
        raise ValueError(f"down_for={down_for} must be > 0 and < every={every}: never more than one node down")
    rng = random.Random(seed)
    faults = []
    for i in range(rounds):
        node, at = rng.randrange(nodes), first_at + i * every
        faults += [Fault(at, "kill", node), Fault(at + down_for, "start", node)]
    return faults


class Nemesis(threading.Thread):
    """Runs a :func:`schedule` against ``topology``'s hub nodes in a thread of its own.

    ``done`` lists ``(seconds after the start, action, node name)`` as carried out; :meth:`wait_for` waits
    until a number of faults have been carried out (the pipeline starts its runs after given kills).
    """

    def __init__(self, topology: LocalTopology, faults: list[Fault]) -> None:
        super().__init__(daemon=True, name="nemesis")
        self.topology = topology
        self.faults = faults
        self.done: list[tuple[float, str, str]] = []
        self.error: BaseException | None = None
        self._ending = threading.Event()
        self._progress = threading.Condition()
        self._down: int | None = None
        self.started_at = 0.0

    def run(self) -> None:
        self.started_at = time.monotonic()
        try:
            for fault in self.faults:
                if self._ending.wait(max(0.0, self.started_at + fault.at - time.monotonic())):
                    break
                self._apply(fault)
        except BaseException as err:  # re-raised by stop()
            self.error = err
        finally:
            if self._down is not None:
                self._apply(Fault(0, "start", self._down))
            with self._progress:
                self._progress.notify_all()

    def _apply(self, fault: Fault) -> None:
        if fault.action == "kill":
            assert self._down is None, "two nodes down at once"
            self.topology.kill_hub_node(fault.node)
            self._down = fault.node
        else:
            self.topology.start_hub_node(fault.node)
            self._down = None
        with self._progress:
            self.done.append(
                (round(time.monotonic() - self.started_at, 1), fault.action, self.topology.hubs[fault.node].name)
            )
            self._progress.notify_all()

    def wait_for(self, count: int, timeout: float = 60.0) -> None:
        """Return once ``count`` faults have been carried out (or the schedule ended)."""
        with self._progress:
            ok = self._progress.wait_for(lambda: len(self.done) >= count or not self.is_alive(), timeout)
        assert ok, f"the nemesis carried out {len(self.done)} faults of {count} within {timeout}s"

    def stop(self, timeout: float = 60.0) -> list[tuple[float, str, str]]:
        """End the schedule, start a node that is down, and return what was carried out."""
        self._ending.set()
        self.join(timeout)
        assert not self.is_alive(), f"the nemesis did not end within {timeout}s"
        if self.error:
            raise self.error
        return self.done


@dataclass
class Attempts:
    """Airflow's task retries, modelled: each step runs up to ``attempts`` times, ``retry_delay`` seconds apart
    (a task's ``retries=attempts - 1``, ``retry_delay``), except that what Airflow fails without retries fails
    at once: a refusal (the operators' and sensors' ``AirflowFailException``, see ``core/errors.py``'s
    ``disposition``) and a sensor's timeout (an ``AssertionError`` of ``wait_until`` here, Airflow's
    ``AirflowSensorTimeout``). ``log`` lists ``(step, attempt, seconds, outcome)``."""

    attempts: int = 3
    retry_delay: float = 2.0
    log: list[tuple[str, int, float, str]] = field(default_factory=list)

    def run(self, step: str, work: Callable[[], T]) -> T:
        """``work()``'s value from the first attempt that succeeds; the last attempt's error otherwise."""
        for attempt in range(1, self.attempts + 1):
            began = time.monotonic()
            try:
                value = work()
            except Exception as err:
                self.log.append((step, attempt, round(time.monotonic() - began, 1), f"{type(err).__name__}: {err}"))
                if (
                    attempt == self.attempts
                    or is_refusal(err)
                    or isinstance(err, (AirflowFailException, AssertionError))
                ):
                    raise
                time.sleep(self.retry_delay)  # Airflow's retry_delay: the scenario, not a wait for a condition
            else:
                self.log.append((step, attempt, round(time.monotonic() - began, 1), "success"))
                return value
        raise AssertionError("unreachable")

    def retried(self) -> list[tuple[str, int, float, str]]:
        """The failed attempts."""
        return [entry for entry in self.log if entry[3] != "success"]

    def summary(self) -> dict[str, Any]:
        """Steps, attempts and failed attempts, for the test's report."""
        return {
            "steps": len({entry[0] for entry in self.log}),
            "attempts": len(self.log),
            "failed_attempts": len(self.retried()),
        }
