"""Real Airflow processes: 200 announcements, the triggerer killed -9 half-way; all stored, none acked before stored.
A deferred await-message sensor across two triggerer kills (looking, then holding the match): one match, each
message acked once; the next run's sensor waits for that one (its consumer serves one run at a time). A run whose
sensor went on without an unreachable leaf says so in its task's note."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.matching import task_consumer_name
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from local_stack.airflow_stack import LocalAirflow
from local_stack.processes import LocalPostgres, ManagedProcess, wait_until
from tests.support.airflow_ui import OUTPUT, chromium, login_token
from tests.support.natsutil import acked_through, consumer_state
from tests.support.waiting import scaled

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(900)]

STREAM, CONSUMER, TOTAL = "EDGE_ANNOUNCE", "af_proof", 200
URI = f"jetstream://hub/leaf-a/{STREAM}"
DAG = f'''
"""Runs on each announcement of leaf-a."""
import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher, task
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow_provider_jetstream.core.status.event_drift import event_sequences, position_key
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger

announced = Asset(uri="{URI}", watchers=[AssetWatcher(name="edge", trigger=JetStreamMessageTrigger(
    jetstream_conn_id="nats_hub", domain="leaf-a", stream="{STREAM}", consumer="{CONSUMER}",
    options={{"cohort_wait": 1}}))])
with DAG(dag_id="events_proof", schedule=[announced], start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    EmptyOperator(task_id="noted")

with DAG(dag_id="events_drift", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    @task(inlets=[announced])
    def compare(inlet_events=None, asset_state_store=None):
        """The drift check as a user runs it: the consumer against the asset events Airflow stored."""
        stored = event_sequences(inlet_events[announced])
        position = asset_state_store[announced].get(position_key("{STREAM}", "{CONSUMER}"))
        hook = JetStreamHook("nats_hub", domain="leaf-a")
        check = hook.event_drift("{STREAM}", "{CONSUMER}", stored, position=position)
        return {{**check.to_xcom(), "position": position, "stored": len(stored)}}

    compare()
'''

FANOUT, FAN_CONSUMER, WATCHERS = "FANOUT", "af_fan", 100
FAN_DAG = f'''
"""100 assets, each watching its own subject of one stream through one shared consumer."""
import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger

assets = [
    Asset(name=f"fan_{{i}}", watchers=[AssetWatcher(name=f"fan_{{i}}",
        trigger=JetStreamMessageTrigger(jetstream_conn_id="nats_hub", domain="leaf-a", stream="{FANOUT}",
            consumer="{FAN_CONSUMER}", event_subjects=[f"fan.{{i}}"], options={{"cohort_wait": 1}}))])
    for i in range({WATCHERS})
]
with DAG(dag_id="events_fanout", schedule=assets, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    EmptyOperator(task_id="noted")
'''

AWAITED, AWAIT_DAG_ID = "AWAITED", "await_proof"
AWAIT_DAG = '''
"""A deferrable await-message sensor; its function records what it examined and holds a match until a gate opens."""
import pendulum
from airflow.sdk import DAG
from airflow_provider_jetstream.sensors.await_message import JetStreamAwaitMessageSensor

with DAG(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    JetStreamAwaitMessageSensor(
        task_id="wait", jetstream_conn_id="nats_hub", domain="leaf-a", stream="{stream}", deliver_policy="all",
        apply_function="tests.support.matchers.done_gated",
        apply_function_kwargs={{"record": {record!r}, "gate": {gate!r}}},
        ack_wait=5, max_wait=1, deferrable=True, timeout=600,
    )
'''
NOTED, NOTE_DAG_ID = "NOTED", "note_proof"
NOTE_DAG = f'''
"""Declares a hub stream sourcing leaf-a and a leaf that does not exist; the sensor goes on without the latter."""
import pendulum
from airflow.sdk import DAG
from airflow_provider_jetstream.operators.streams import JetStreamCreateSourcedStreamOperator
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor

with DAG(dag_id="{NOTE_DAG_ID}", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    declare = JetStreamCreateSourcedStreamOperator(
        task_id="declare", jetstream_conn_id="nats_hub", domain="hub", stream="{NOTED}",
        sources=[{{"name": "{NOTED}", "domain": "leaf-a"}}, {{"name": "{NOTED}", "domain": "leaf-gone"}}],
        options={{"allow_unreachable_origins": True}},
    )
    declare >> JetStreamReplicationLagSensor(
        task_id="caught_up", jetstream_conn_id="nats_hub", domain="hub", stream="{NOTED}",
        unreachable_origins="proceed", options={{"max_inactive": "1h"}}, poke_interval=1, timeout=300,
    )
'''
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalTopology, LocalPostgres, LocalAirflow]]:
    work = tmp_path_factory.mktemp("events-deploy")
    dags = work / "dags"
    dags.mkdir()
    (dags / "events_proof.py").write_text(DAG)
    (dags / "events_fanout.py").write_text(FAN_DAG)
    record, gate = work / "examined.txt", work / "gate"
    (dags / "note_proof.py").write_text(NOTE_DAG)
    (dags / "await_proof.py").write_text(
        AWAIT_DAG.format(dag_id=AWAIT_DAG_ID, stream=AWAITED, record=str(record), gate=str(gate))
    )
    topology = LocalTopology(work / "nats", leaf_domains=["leaf-a"])
    postgres = LocalPostgres(work / "postgres")
    user, password = USERS["ACC"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "JETSTREAM_"))}
    try:
        topology.start()
        asyncio.run(create_streams(topology.url("leaf-a")))
        postgres.start()
        airflow = LocalAirflow(
            work / "airflow",
            dags,
            postgres.sqlalchemy_url,
            {
                **base,
                "PYTHONPATH": str(REPO),  # the await sensor's function, tests.support.matchers.done_gated
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                # a restarted triggerer takes the dead one's triggers once its heartbeat is this old
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
                "AIRFLOW_CONN_NATS_HUB": json.dumps(
                    {
                        "conn_type": "jetstream",
                        "host": f"127.0.0.1:{topology.hub.port}",
                        "login": user,
                        "password": password,
                        "extra": {"client_name": "airflow-events-proof"},
                    }
                ),
            },
        )
        airflow.migrate()
        airflow.start()
        airflow.wait_healthy(300)
        yield topology, postgres, airflow
    finally:
        for part in ("airflow", "postgres", "topology"):
            obj = locals().get(part)
            if obj is not None:
                obj.stop()


async def create_streams(url: str) -> None:
    from nats.js.api import StreamConfig

    nc = await nats.connect(url)
    await nc.jetstream().add_stream(StreamConfig(name=STREAM, subjects=["announce.leaf-a.>"]))
    await nc.jetstream().add_stream(StreamConfig(name=FANOUT, subjects=["fan.>"]))
    await nc.jetstream().add_stream(StreamConfig(name=AWAITED, subjects=["await.leaf-a.>"]))
    await nc.jetstream().add_stream(StreamConfig(name=NOTED, subjects=["noted.leaf-a.>"]))
    await nc.drain()


async def announce(url: str, first: int, count: int, hold: tuple[int, threading.Event] | None = None) -> None:
    """Edge announcements ``first..first+count-1``; with ``hold=(n, event)``, those from ``n`` on only once
    ``event`` is set (the test sets it as it kills the triggerer: the edge announces across the kill)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    for i in range(first, first + count):
        if hold is not None and i == hold[0]:
            await asyncio.to_thread(hold[1].wait, 300)
        body = json.dumps({"batch": f"b{i}", "first_seq": i, "last_seq": i}).encode()
        await js.publish(f"announce.leaf-a.{i}", body, headers={"Nats-Msg-Id": f"b{i}"})
    await nc.drain()


def stored_sequences(postgres: LocalPostgres) -> list[int]:
    with postgres.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT (e.extra::json->'payload'->>'seq')::int FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.uri = %s",
            (URI,),
        )
        return [row[0] for row in cur.fetchall()]


class AckMonitor(threading.Thread):
    """Hears every ``+ACK`` of a stream's consumers (a hub client of the same account) and, for the announcements,
    checks at once that an asset event with that stream sequence is already in Airflow's database."""

    def __init__(self, url: str, postgres: LocalPostgres, stream: str = STREAM, check_stored: bool = True) -> None:
        super().__init__(daemon=True)
        self.url, self.postgres, self.stream, self.check_stored = url, postgres, stream, check_stored
        self.acked: list[int] = []
        self.premature: list[int] = []
        self.ready = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        asyncio.run(self._watch())

    async def _watch(self) -> None:
        from airflow_provider_jetstream.core.protocol import parse_ack_reply

        db = self.postgres.connect()
        db.autocommit = True

        async def on_ack(msg) -> None:
            meta = parse_ack_reply(msg.subject)
            if meta is None or meta.stream != self.stream or not msg.data.startswith(b"+ACK"):
                return
            self.acked.append(meta.sequence)
            if not self.check_stored:
                return
            with db.cursor() as cur:
                cur.execute(
                    "SELECT count(*) FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                    "WHERE a.uri = %s AND (e.extra::json->'payload'->>'seq')::int = %s",
                    (URI, meta.sequence),
                )
                if cur.fetchone()[0] == 0:
                    self.premature.append(meta.sequence)

        nc = await nats.connect(self.url)
        await nc.subscribe("$JS.ACK.>", cb=on_ack)
        await nc.flush()
        self.ready.set()
        await asyncio.to_thread(self.done.wait)  # hearing acks until the test is done
        await nc.drain()
        db.close()


def recorded_positions(postgres: LocalPostgres, uri_or_name_like: str) -> list[int]:
    """The ``stream_seq`` of the positions the triggers recorded in the Asset State Store of the assets whose
    URI is ``uri_or_name_like`` or whose name is like it (SQL ``LIKE``), by asset name."""
    with postgres.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
            "WHERE (a.uri = %s OR a.name LIKE %s) AND s.key LIKE 'jetstream.position.%%' ORDER BY a.name",
            (uri_or_name_like, uri_or_name_like),
        )
        values = [json.loads(row[0]) for row in cur.fetchall()]
    return [(json.loads(v) if isinstance(v, str) else v)["stream_seq"] for v in values]


def run_state(api, dag_id: str, run_id: str) -> str:
    state = api.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
    assert state != "failed", api.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    return state


def kill_triggerer(airflow: LocalAirflow) -> ManagedProcess:
    """kill -9 the triggerer's process group (supervisor and runner), then start a new one."""
    old = airflow.processes["triggerer"]
    os.killpg(old.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
    old.process.wait(30)  # type: ignore[union-attr]
    new = ManagedProcess(
        "airflow triggerer", old.args, env=old.env, log_path=old.log_path.with_name("triggerer-2.log"), cwd=old.cwd
    ).start()
    airflow.processes["triggerer"] = new
    return new


def test_a_triggerer_killed_half_way_loses_no_announcement(deployment) -> None:
    topology, postgres, airflow = deployment
    leaf = topology.url("leaf-a")

    async def consumer() -> dict:
        nc = await nats.connect(leaf)
        try:
            return await JetStreamApi(nc, "$JS.leaf-a.API").consumer_info(STREAM, CONSUMER) or {}
        finally:
            await nc.close()

    wait_until("the watcher's consumer", lambda: asyncio.run(consumer()), timeout=240)
    monitor = AckMonitor(topology.url("hub"), postgres)
    monitor.start()
    assert monitor.ready.wait(scaled(30))
    killed = threading.Event()
    # The edge announces a quarter and a few more, then the rest of the first half once the triggerer is killed.
    hold = (TOTAL // 4 + 10, killed)
    publisher = threading.Thread(target=lambda: asyncio.run(announce(leaf, 1, TOTAL // 2, hold)))
    publisher.start()
    wait_until(
        "a quarter stored, some acked",
        lambda: (
            len(stored_sequences(postgres)) >= TOTAL // 4 and asyncio.run(consumer())["ack_floor"]["stream_seq"] > 0
        ),
        timeout=180,
    )
    kill_triggerer(airflow)
    killed.set()  # the edge keeps announcing while the triggerer is down
    killed_at = len(set(stored_sequences(postgres)))
    acked_at_kill = asyncio.run(consumer())["ack_floor"]["stream_seq"]
    publisher.join(scaled(60))
    asyncio.run(announce(leaf, TOTAL // 2 + 1, TOTAL - TOTAL // 2))  # while no triggerer consumes
    started = time.monotonic()
    wait_until(
        "every announcement stored", lambda: set(stored_sequences(postgres)) >= set(range(1, TOTAL + 1)), timeout=300
    )
    sequences = stored_sequences(postgres)
    info = asyncio.run(consumer())
    print(
        f"stored at the kill: {killed_at}, acked {acked_at_kill}; "
        f"all {TOTAL} stored {time.monotonic() - started:.1f}s after it; "
        f"asset events {len(sequences)} (duplicates {len(sequences) - len(set(sequences))}); "
        f"ack floor {info['ack_floor']['stream_seq']}"
    )
    assert set(sequences) == set(range(1, TOTAL + 1))
    # duplicates only among what was stored and not yet acked when the triggerer died
    assert len(sequences) - len(set(sequences)) <= killed_at - acked_at_kill
    assert all(sequences.count(s) == 1 for s in range(1, acked_at_kill + 1))
    wait_until("everything acked", lambda: asyncio.run(consumer())["ack_floor"]["stream_seq"] == TOTAL, timeout=60)
    assert asyncio.run(consumer())["num_ack_pending"] == 0
    monitor.done.set()
    monitor.join(scaled(30))
    print(f"+ACKs heard: {len(monitor.acked)}, for {len(set(monitor.acked))} sequences; premature: {monitor.premature}")
    assert set(monitor.acked) == set(range(1, TOTAL + 1))
    assert monitor.premature == []  # no message was acked before its asset event was stored

    # The position the triggerer records in the asset's Asset State Store reaches the ack floor, and the drift
    # check, run as a task, finds every acked announcement stored, and the duplicates the database holds.
    checking = time.monotonic()
    wait_until("the position recorded", lambda: recorded_positions(postgres, URI) == [TOTAL], timeout=60)
    airflow.wait_dags(["events_drift"])
    api = airflow.api
    run_id = api.request("POST", "/dags/events_drift/dagRuns", {"logical_date": None})["dag_run_id"]
    wait_until("the drift check ran", lambda: run_state(api, "events_drift", run_id) == "success", timeout=180)
    path = f"/dags/events_drift/dagRuns/{run_id}/taskInstances/compare/xcomEntries/return_value?deserialize=true"
    value = api.request("GET", path)["value"]
    drift = json.loads(value) if isinstance(value, str) else value
    print(f"position and drift check in {time.monotonic() - checking:.1f}s: {drift['reason']}")
    assert (drift["drifted"], drift["ack_floor"], drift["lost"], drift["pending_stored"]) == (False, TOTAL, [], 0)
    # Redeliveries of what was stored and not acked at the kill may be stored after the count above: compare with
    # the database as the task read it, and keep the duplicates within the documented bound.
    final = stored_sequences(postgres)
    duplicates = len(final) - len(set(final))
    assert (drift["stored"], sum(n - 1 for n in drift["duplicates"].values())) == (len(final), duplicates)
    assert duplicates <= killed_at - acked_at_kill
    assert (drift["position"]["stream_seq"], drift["position"]["consumer"]) == (TOTAL, CONSUMER)


def test_a_hundred_watchers_in_a_real_triggerer_share_one_consumer_and_one_connection(deployment) -> None:
    topology, postgres, _ = deployment
    leaf = topology.url("leaf-a")

    def fan_events() -> dict[str, int]:
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT a.name, count(e.id) FROM asset a LEFT JOIN asset_event e ON e.asset_id = a.id "
                "WHERE a.name LIKE 'fan\\_%%' GROUP BY a.name"
            )
            return dict(cur.fetchall())

    def trigger_rows() -> tuple[int, int]:
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT count(DISTINCT t.id), count(DISTINCT t.triggerer_id) FROM trigger t "
                "JOIN asset_watcher w ON w.trigger_id = t.id JOIN asset a ON a.id = w.asset_id "
                "WHERE a.name LIKE 'fan\\_%%'"
            )
            return cur.fetchone()

    async def fan_consumers() -> list[str]:
        nc = await nats.connect(leaf)
        try:
            return (await JetStreamApi(nc, "$JS.leaf-a.API").request(f"CONSUMER.NAMES.{FANOUT}"))["consumers"]
        finally:
            await nc.close()

    wait_until("100 watcher triggers running", lambda: trigger_rows() == (WATCHERS, 1), timeout=240)
    wait_until("the shared consumer", lambda: asyncio.run(fan_consumers()) == [FAN_CONSUMER], timeout=120)

    async def publish_each() -> None:
        nc = await nats.connect(leaf)
        for i in range(WATCHERS):
            await nc.jetstream().publish(f"fan.{i}", json.dumps({"i": i}).encode())
        await nc.drain()

    asyncio.run(publish_each())
    wait_until("one event per asset", lambda: sum(fan_events().values()) >= WATCHERS, timeout=180)
    assert fan_events() == {f"fan_{i}": 1 for i in range(WATCHERS)}
    assert asyncio.run(fan_consumers()) == [FAN_CONSUMER]
    connz = topology.hub.monitor("connz?limit=10000")
    names = [c.get("name") for c in connz.get("connections", [])]
    assert names.count("airflow-events-proof") == 1, names  # every watcher of the triggerer, one connection
    # Each asset's Asset State Store holds the shared consumer's position: past the message for it.
    wait_until(
        "every asset's position",
        lambda: recorded_positions(postgres, "fan\\_%") == [WATCHERS] * WATCHERS,
        timeout=60,
    )


def test_a_deferred_await_sensor_survives_triggerer_kills_without_losing_or_rematching(deployment) -> None:
    """Run A's sensor defers; the triggerer is killed -9 while the trigger looks (3 messages examined and acked),
    then the new one while its function holds the match (delivered, not acked). The third triggerer gets the
    match again after ack_wait and A returns it. Run B, started meanwhile, waits queued (the consumer serves
    one run at a time), then matches the next one. Each message is acked exactly once, none twice."""
    topology, postgres, airflow = deployment
    leaf, work = topology.url("leaf-a"), airflow.home.parent
    record, gate = work / "examined.txt", work / "gate"
    consumer = task_consumer_name(AWAIT_DAG_ID, "wait")
    api = airflow.api
    airflow.wait_dags([AWAIT_DAG_ID])

    def examined() -> list[tuple[int, int]]:
        lines = record.read_text().splitlines() if record.exists() else []
        return [(int(line.split()[0]), int(line.split()[1])) for line in lines if len(line.split()) == 2]

    def sensor(run_id: str) -> dict:
        return api.request("GET", f"/dags/{AWAIT_DAG_ID}/dagRuns/{run_id}/taskInstances/wait")

    def held_by_a_triggerer(run_id: str) -> bool:
        with postgres.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT t.triggerer_id FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
                "WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.state = 'deferred'",
                (AWAIT_DAG_ID, run_id),
            )
            row = cur.fetchone()
            return bool(row and row[0])

    def state() -> dict:
        return asyncio.run(consumer_state(leaf, AWAITED, consumer, api_prefix="$JS.leaf-a.API"))

    def publish(*bodies: dict) -> list[int]:
        async def go() -> list[int]:
            nc = await nats.connect(leaf)
            js = nc.jetstream()
            seqs = [(await js.publish(f"await.leaf-a.{i}", json.dumps(b).encode())).seq for i, b in enumerate(bodies)]
            await nc.drain()
            return seqs

        return asyncio.run(go())

    def succeeded(run_id: str) -> Callable[[], bool]:
        def done() -> bool:
            run = api.request("GET", f"/dags/{AWAIT_DAG_ID}/dagRuns/{run_id}")
            assert run["state"] != "failed", sensor(run_id)
            return run["state"] == "success"

        return done

    def xcom(run_id: str) -> dict:
        path = f"/dags/{AWAIT_DAG_ID}/dagRuns/{run_id}/taskInstances/wait/xcomEntries/return_value?deserialize=true"
        value = api.request("GET", path)["value"]
        return json.loads(value) if isinstance(value, str) else value

    monitor = AckMonitor(topology.url("hub"), postgres, stream=AWAITED, check_stored=False)
    monitor.start()
    assert monitor.ready.wait(scaled(30))
    started = time.monotonic()
    run_a = api.request("POST", f"/dags/{AWAIT_DAG_ID}/dagRuns", {"logical_date": None})["dag_run_id"]
    wait_until("run A's sensor deferred, its trigger running", lambda: held_by_a_triggerer(run_a), timeout=120)
    run_b = api.request("POST", f"/dags/{AWAIT_DAG_ID}/dagRuns", {"logical_date": None})["dag_run_id"]

    # 1. Killed while looking: three messages examined and acked by the first triggerer.
    early = publish({"status": "started"}, {"status": "running"}, {"status": "running"})
    wait_until("three examined and acked", lambda: acked_through(state()) == early[-1], timeout=60)
    first_pid = {pid for _, pid in examined()}
    kill_triggerer(airflow)
    # 2. Killed while its function holds the match: delivered to the second triggerer, not acked.
    [match_a] = publish({"status": "done", "batch": "A"})
    wait_until(
        "the second triggerer holds the match",
        lambda: any(seq == match_a and pid not in first_pid for seq, pid in examined()),
        timeout=120,
    )
    assert (acked_through(state()), state()["num_ack_pending"]) == (early[-1], 1)
    assert sensor(run_b)["state"] in (None, "scheduled"), sensor(run_b)  # waits for A: one run per consumer
    kill_triggerer(airflow)
    gate.touch()
    wait_until("run A succeeded", succeeded(run_a), timeout=180)
    a = xcom(run_a)
    assert (a["value"], a["seq"], a["consumer"], a["domain"]) == ({"batch": "A"}, match_a, consumer, "leaf-a")
    # 3. Run B goes on after A's match.
    wait_until("run B's sensor looking", lambda: sensor(run_b)["state"] in ("running", "deferred"), timeout=120)
    later = publish({"status": "started"}, {"status": "done", "batch": "B"})
    wait_until("run B succeeded", succeeded(run_b), timeout=180)
    b = xcom(run_b)
    assert (b["value"], b["seq"]) == ({"batch": "B"}, later[-1])
    print(f"two runs across two triggerer kills in {time.monotonic() - started:.1f}s; examined {examined()}")

    final = state()
    assert (acked_through(final), final["num_ack_pending"], final["num_pending"]) == (later[-1], 0, 0)
    seen = [seq for seq, _ in examined()]
    assert sorted(set(seen)) == list(range(1, later[-1] + 1))  # none lost
    # each examined once, but the match the killed triggerer held: once more by the triggerer that took over
    assert {s: seen.count(s) for s in set(seen) if seen.count(s) > 1} == {match_a: 2}
    wait_until("every ack heard", lambda: len(monitor.acked) >= later[-1], timeout=30)
    monitor.done.set()
    monitor.join(scaled(30))
    assert sorted(monitor.acked) == list(range(1, later[-1] + 1))  # each acked exactly once


def test_a_run_that_went_on_without_an_unreachable_origin_says_so_in_the_grid(deployment) -> None:
    """The sensor proceeds without the leaf that never answers: its task's note (what the grid shows) says
    so once the run ended, set by the provider's listener in the scheduler; the other task has no note."""
    _, _, airflow = deployment
    api = airflow.api
    airflow.wait_dags([NOTE_DAG_ID])
    run_id = api.request("POST", f"/dags/{NOTE_DAG_ID}/dagRuns", {"logical_date": None})["dag_run_id"]

    def task(task_id: str) -> dict:
        return api.request("GET", f"/dags/{NOTE_DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}")

    def succeeded() -> bool:
        state = api.request("GET", f"/dags/{NOTE_DAG_ID}/dagRuns/{run_id}")["state"]
        assert state != "failed", task("caught_up")
        return state == "success"

    wait_until("the run succeeded", succeeded, timeout=scaled(180))
    note = task("caught_up")["note"] or ""
    assert note.startswith(f"Proceeded without 1 origin(s) of {NOTED!r}: source {NOTED!r} in leaf-gone"), note
    assert task("declare")["note"] is None
    # As a person sees it: the task's page in Airflow's UI, in Chromium, the note under its header
    # (test-output/task-note.png).
    token = login_token(airflow.url, "admin", airflow.admin_password)
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        context.add_cookies([{"name": "_token", "value": token, "url": airflow.url}])
        page = context.new_page()
        page.goto(f"{airflow.url}/dags/{NOTE_DAG_ID}/runs/{run_id}/tasks/caught_up", wait_until="networkidle")
        # The note (Markdown, a paragraph), not the log's line of the same text.
        page.get_by_role("paragraph").filter(has_text=note).wait_for(timeout=60000)
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "task-note.png"))
        context.close()
