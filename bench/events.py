"""Benchmark: messages/s from publish to persisted asset event through one real triggerer, and RSS per watcher.

Starts a hub + leaf topology, PostgreSQL and Airflow's ``scheduler``, ``dag-processor``,
``triggerer`` and ``api-server`` (real processes, a temporary directory), with a generated DAG
folder of ``JetStreamMessageTrigger`` asset watchers (Airflow 3.3's shared-stream ack mode; the
streams are on the leaf, the triggerer connects to the hub with ``domain="leaf-a"``). Then:

1. Throughput, in interleaved rounds (the order reversed every other round; medians reported):

   - ``baseline``: a plain nats-py pull consumer in its own process, over the same path (hub
     connection, leaf domain), ``fetch(100)`` and ``ack()`` each message: what the broker and a
     Python client do on this machine;
   - ``batch 1``: one asset event per message;
   - ``batch B``: one asset event per ``B`` messages (``--batch``), the trigger's default
     ``max_ack_pending`` (256);
   - ``batch B, wide``: the same with ``max_ack_pending`` ``--wide-ack-pending``: a message is
     acked (and frees room for the next) only once Airflow has stored its event, which takes the
     triggerer one to two of its one-second state syncs, so unacked room bounds batched throughput.

   Each round publishes ``--messages`` messages of ~100 bytes to the leaf (``publish_async``)
   and measures from the first publish to the last asset event persisted (the newest
   ``asset_event.timestamp`` once every message is counted in the DB; the baseline: the last
   ack, flushed). Reported as messages/s and as a ratio of the baseline measured in the same round.
   CPU seconds per 1,000 messages of each process (triggerer supervisor and runner, PostgreSQL,
   scheduler, NATS) and PostgreSQL commits per message show what the path costs.
2. Latency: ``--latency-messages`` single messages at ``--latency-rate`` per second through the
   ``batch 1`` watcher, from publish to persisted event (p50 / p95).
3. Memory: the triggerer is restarted (fresh heap), then watchers on one stream (one shared
   consumer; each watcher its own asset and subject) are added until there are ``--watchers``
   of them; at each step, once idle, the triggerer process tree's RSS (supervisor, runner and
   its ``serve-logs``, from ``/proc``) and the NATS connections it holds (hub ``connz``). Per watcher:
   ``(RSS(W) - RSS(1)) / (W - 1)``. The three throughput watchers stay in the triggerer throughout.

Airflow's triggerer persists each event in its own transaction (``Trigger.submit_event``: several
ORM queries), serially in its supervisor process: that, not NATS, bounds ``batch 1``; keep
``--messages`` modest (a batch-1 round of 1,000 messages took about a minute on 2 busy cores).

    .venv/bin/python bench/events.py                       # 1,000 messages x 3 rounds, W = 1, 100, 500
    .venv/bin/python bench/events.py --messages 10000 --paths batched,wide --watchers "" --latency-messages 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LEAF = "leaf-a"
CLIENT_NAME = "airflow-events-bench"
PATHS = ("baseline", "batch1", "batched", "wide")
TRIGGER_PATHS = PATHS[1:]
STREAMS = {"batch1": "EV_B1", "batched": "EV_BATCH", "wide": "EV_WIDE", "baseline": "EV_BASE", "fan": "EV_FAN"}
SUBJECTS = {"batch1": "ev.b1", "batched": "ev.batch", "wide": "ev.wide", "baseline": "ev.base"}
CONSUMERS = {"batch1": "bench_b1", "batched": "bench_batch", "wide": "bench_wide"}
URIS = {path: f"jetstream://hub/{LEAF}/{STREAMS[path]}" for path in TRIGGER_PATHS}
MAX_ACK_PENDING = 256  # the trigger's default; the baseline consumer gets the same
PAD = "x" * 60  # a JSON body of ~100 bytes

THROUGHPUT_DAG = '''
"""Benchmark watchers: one event per message, one per batch, one per batch with more messages in flight."""
import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger

def watched(uri, stream, consumer, options=None, **kwargs):
    return Asset(uri=uri, watchers=[AssetWatcher(name=consumer, trigger=JetStreamMessageTrigger(
        jetstream_conn_id="nats_hub", domain="{leaf}", stream=stream, consumer=consumer,
        options={{"cohort_wait": 1, **(options or {{}})}}, **kwargs))])

for name, asset in (
    ("bench_batch1", watched("{uri1}", "{stream1}", "bench_b1")),
    ("bench_batched", watched("{uri2}", "{stream2}", "bench_batch", batch_size={batch})),
    ("bench_wide", watched(
        "{uri3}", "{stream3}", "bench_wide", batch_size={batch}, options={{"max_ack_pending": {wide}}}
    )),
):
    with DAG(dag_id=name, schedule=[asset], start_date=pendulum.datetime(2026, 1, 1), catchup=False):
        EmptyOperator(task_id="noted")
'''

FAN_DAG = '''
"""Benchmark watchers {first}..{last}: one asset each, all on one stream through one shared consumer."""
import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger

assets = [
    Asset(name=f"fan_{{i}}", watchers=[AssetWatcher(name=f"fan_{{i}}", trigger=JetStreamMessageTrigger(
        jetstream_conn_id="nats_hub", domain="{leaf}", stream="{stream}", consumer="bench_fan",
        event_subjects=[f"fan.{{i}}"], options={{"cohort_wait": 1}}))])
    for i in range({first}, {last} + 1)
]
with DAG(dag_id="bench_fan_{first}", schedule=assets, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    EmptyOperator(task_id="noted")
'''


# -- NATS ------------------------------------------------------------------------------------


async def create_streams(leaf_url: str) -> None:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

    nc = await nats.connect(leaf_url)
    js = nc.jetstream()
    for path, subject in SUBJECTS.items():
        await js.add_stream(StreamConfig(name=STREAMS[path], subjects=[f"{subject}.>"]))
    await js.add_stream(StreamConfig(name=STREAMS["fan"], subjects=["fan.>"]))
    await js.add_consumer(
        STREAMS["baseline"],
        ConsumerConfig(durable_name="bench_base", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=MAX_ACK_PENDING),
    )
    await nc.drain()


async def publish(leaf_url: str, subject: str, count: int, rate: float = 0.0) -> float:
    """Publish ``count`` JSON messages (each with its wall-clock send time); return the first send time.
    ``rate`` 0: as fast as ``publish_async`` goes; else that many messages per second, each awaited."""
    import nats

    nc = await nats.connect(leaf_url)
    try:
        js = nc.jetstream(publish_async_max_pending=4000)
        started = time.time()
        for i in range(count):
            sent = time.time()
            body = json.dumps({"i": i, "sent": sent, "pad": PAD}).encode()
            if rate:
                await js.publish(f"{subject}.{i % 10}", body)
                await asyncio.sleep(max(0.0, started + (i + 1) / rate - time.time()))
            else:
                await js.publish_async(f"{subject}.{i % 10}", body)
        await js.publish_async_completed()
        return started
    finally:
        await nc.close()


async def consumer_waiting(hub_url: str, stream: str, consumer: str) -> bool:
    """Whether the consumer exists and a pull request of it waits on the server (its reader is up)."""
    import nats

    from airflow_provider_jetstream.core.api import JetStreamApi

    nc = await nats.connect(hub_url)
    try:
        info = await JetStreamApi(nc, f"$JS.{LEAF}.API").consumer_info(stream, consumer)
        return bool(info) and info.get("num_waiting", 0) > 0
    finally:
        await nc.close()


def baseline_child(count: int, batch: int) -> None:
    """The baseline consumer (run in its own process, as the triggerer is): fetch and ack ``count``."""

    async def consume() -> None:
        import nats

        nc = await nats.connect(os.environ["BENCH_NATS_URL"])
        js = nc.jetstream(domain=LEAF)
        sub = await js.pull_subscribe_bind("bench_base", STREAMS["baseline"])
        print("READY", flush=True)
        cpu = time.process_time()
        got = 0
        while got < count:
            try:
                msgs = await sub.fetch(batch, timeout=5)
            except nats.errors.TimeoutError:
                continue
            for msg in msgs:
                await msg.ack()
            got += len(msgs)
        await nc.flush()
        ended = time.time()
        await nc.close()
        cpu = time.process_time() - cpu
        print("RESULT " + json.dumps({"ended": ended, "got": got, "cpu": cpu}), flush=True)

    asyncio.run(consume())


# -- processes -------------------------------------------------------------------------------


def tree_pids(root_pid: int) -> list[int]:
    import psutil

    try:
        root = psutil.Process(root_pid)
        return [root.pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def rss_kib(pids: list[int]) -> float:
    """Sum of the processes' RSS (``/proc/<pid>/status`` VmRSS), KiB."""
    total = 0.0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += float(line.split()[1])
        except OSError:
            continue
    return total


def cpu_seconds(groups: dict[str, list[int]]) -> dict[str, dict[int, float]]:
    import psutil

    result: dict[str, dict[int, float]] = {}
    for name, pids in groups.items():
        result[name] = {}
        for pid in pids:
            try:
                times = psutil.Process(pid).cpu_times()
                result[name][pid] = times.user + times.system
            except psutil.NoSuchProcess:
                continue
    return result


def cpu_delta(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]) -> dict[str, float]:
    return {
        name: sum(cpu - before.get(name, {}).get(pid, 0.0) for pid, cpu in pids.items()) for name, pids in after.items()
    }


class Bench:
    """The running deployment and the measurements on it."""

    def __init__(self, work: Path, args: argparse.Namespace) -> None:
        from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
        from local_stack.airflow_stack import LocalAirflow
        from local_stack.processes import LocalPostgres

        self.args = args
        self.dags = work / "dags"
        self.dags.mkdir()
        self.dags.joinpath("bench_throughput.py").write_text(
            THROUGHPUT_DAG.format(
                leaf=LEAF,
                uri1=URIS["batch1"],
                stream1=STREAMS["batch1"],
                uri2=URIS["batched"],
                stream2=STREAMS["batched"],
                uri3=URIS["wide"],
                stream3=STREAMS["wide"],
                batch=args.batch,
                wide=args.wide_ack_pending,
            )
        )
        self.topology = LocalTopology(work / "nats", leaf_domains=[LEAF])
        self.postgres = LocalPostgres(work / "postgres")
        user, password = USERS["ACC"]
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "JETSTREAM_", "BENCH_"))}
        self.airflow = LocalAirflow(
            work / "airflow",
            self.dags,
            self.postgres.sqlalchemy_url,
            {
                **base,
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",  # new DAG files within 5 s
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",  # no re-parsing while measuring
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
                "AIRFLOW_CONN_NATS_HUB": json.dumps(
                    {
                        "conn_type": "jetstream",
                        "host": f"127.0.0.1:{self.topology.hub.port}",
                        "login": user,
                        "password": password,
                        "extra": {"client_name": CLIENT_NAME},
                    }
                ),
            },
        )
        self.db: Any = None

    # -- lifecycle

    def start(self) -> None:
        say("starting NATS (hub, leaf), PostgreSQL, Airflow (migrate, 4 processes) ...")
        self.topology.start()
        asyncio.run(create_streams(self.topology.url(LEAF)))
        self.postgres.start()
        self.airflow.migrate()
        self.airflow.start()
        self.airflow.wait_healthy(300)
        self.db = self.postgres.connect()
        self.db.autocommit = True
        self.wait_watchers({CONSUMERS[path]: STREAMS[path] for path in TRIGGER_PATHS})

    def stop(self) -> None:
        if self.db is not None:
            self.db.close()
        for part in (self.airflow, self.postgres, self.topology):
            try:
                part.stop()
            except Exception as err:  # stop the rest all the same
                say(f"stopping {type(part).__name__}: {err}")

    def wait_watchers(self, consumers: dict[str, str], timeout: float = 300) -> None:
        from local_stack.processes import wait_until

        hub = self.topology.url("hub")
        for consumer, stream in consumers.items():
            wait_until(
                f"consumer {consumer} pulling",
                lambda c=consumer, s=stream: self.airflow.check_alive() or asyncio.run(consumer_waiting(hub, s, c)),
                timeout,
                0.5,
            )

    # -- database

    def query(self, sql: str, params: tuple | None = None) -> list[tuple]:
        with self.db.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    def last_event_id(self) -> int:
        return self.query("SELECT coalesce(max(id), 0) FROM asset_event")[0][0]

    def stored(self, path: str, after_id: int) -> tuple[int, float | None]:
        """Messages in the path's asset events newer than ``after_id`` (a batch counts its messages), and
        the newest event's timestamp (epoch seconds)."""
        counted = "count(*)" if path == "batch1" else "coalesce(sum((e.extra::json->'payload'->>'count')::int), 0)"
        (messages, newest), = self.query(
            f"SELECT {counted}, extract(epoch FROM max(e.timestamp)) FROM asset_event e "
            "JOIN asset a ON a.id = e.asset_id WHERE a.uri = %s AND e.id > %s",
            (URIS[path], after_id),
        )  # fmt: skip
        return int(messages), float(newest) if newest is not None else None

    def commits(self) -> int:
        return self.query("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")[0][0]

    def groups(self) -> dict[str, list[int]]:
        trigger_root = self.airflow.processes["triggerer"].process.pid  # type: ignore[union-attr]
        triggerer = tree_pids(trigger_root)
        return {
            "triggerer supervisor": triggerer[:1],
            "triggerer runner": triggerer[1:],
            "postgres": sorted(self.postgres.server.pids()),  # type: ignore[union-attr]
            "scheduler": sorted(self.airflow.processes["scheduler"].pids()),
            "api-server + dag-processor": sorted(
                self.airflow.processes["api-server"].pids() | self.airflow.processes["dag-processor"].pids()
            ),
            "nats (hub + leaf)": [s.process.pid for s in (self.topology.hub, *self.topology.leaves.values())],
        }

    # -- throughput

    def run_path(self, path: str, count: int) -> dict[str, Any]:
        """One round of one path; messages/s from the first publish to the last stored event (or ack)."""
        leaf = self.topology.url(LEAF)
        groups = self.groups()
        cpu_before, commits_before = cpu_seconds(groups), self.commits()
        consumer_cpu = 0.0
        if path == "baseline":
            child = subprocess.Popen(
                [sys.executable, __file__, "--baseline-child", str(count)],
                env={**os.environ, "BENCH_NATS_URL": self.topology.url("hub")},
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None
            if child.stdout.readline().strip() != "READY":
                raise RuntimeError("the baseline consumer did not start")
            started = asyncio.run(publish(leaf, SUBJECTS["baseline"], count))
            out, _ = child.communicate(timeout=300)
            line = next(line for line in out.splitlines() if line.startswith("RESULT "))
            result = json.loads(line.removeprefix("RESULT "))
            ended, consumer_cpu = result["ended"], result["cpu"]
        else:
            after = self.last_event_id()
            started = asyncio.run(publish(leaf, SUBJECTS[path], count))
            deadline = time.monotonic() + 300
            while True:
                stored, newest = self.stored(path, after)
                if stored >= count:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{path}: {stored} of {count} messages stored after 300 s")
                self.airflow.check_alive()
                time.sleep(0.2)
            ended = newest or time.time()
        cpu = cpu_delta(cpu_before, cpu_seconds(groups))
        cpu["baseline consumer"] = consumer_cpu if path == "baseline" else 0.0
        return {
            "path": path,
            "rate": count / (ended - started),
            "seconds": ended - started,
            "cpu_ms_per_1k": {name: 1000 * 1000 * seconds / count for name, seconds in cpu.items()},
            "commits_per_message": (self.commits() - commits_before) / count,
        }

    def latency(self, count: int, rate: float) -> list[float]:
        after = self.last_event_id()
        asyncio.run(publish(self.topology.url(LEAF), SUBJECTS["batch1"], count, rate=rate))
        deadline = time.monotonic() + 120
        while self.stored("batch1", after)[0] < count:
            if time.monotonic() > deadline:
                raise RuntimeError("latency messages not all stored after 120 s")
            time.sleep(0.2)
        rows = self.query(
            "SELECT extract(epoch FROM e.timestamp) - (e.extra::json->'payload'->'data'->>'sent')::float "
            "FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = %s AND e.id > %s",
            (URIS["batch1"], after),
        )
        return sorted(float(r[0]) for r in rows)

    # -- memory

    def restart_triggerer(self) -> None:
        """Stop the triggerer (SIGTERM to its group) and start a fresh one; wait until it runs every
        trigger and the throughput watchers pull again."""
        from local_stack.processes import ManagedProcess, wait_until

        old = self.airflow.processes["triggerer"]
        old_job = self.query("SELECT max(id) FROM job WHERE job_type = 'TriggererJob'")[0][0]
        old.stop()
        self.airflow.processes["triggerer"] = ManagedProcess(
            old.name, old.args, env=old.env, log_path=old.log_path.with_name("triggerer-2.log"), cwd=old.cwd
        ).start()
        newest_job = "SELECT max(id) FROM job WHERE job_type = 'TriggererJob' AND state = 'running'"
        wait_until(
            "the new triggerer runs every trigger",
            lambda: (
                self.airflow.check_alive()
                or self.query(
                    f"SELECT ({newest_job}) > %s AND NOT EXISTS (SELECT 1 FROM trigger WHERE triggerer_id IS DISTINCT "
                    f"FROM ({newest_job}))",
                    (old_job,),
                )[0][0]
            ),
            180,
            0.5,
        )
        self.wait_watchers({CONSUMERS[path]: STREAMS[path] for path in TRIGGER_PATHS})

    def fan_triggers(self) -> int:
        return self.query(
            "SELECT count(DISTINCT t.id) FROM trigger t JOIN asset_watcher w ON w.trigger_id = t.id "
            "JOIN asset a ON a.id = w.asset_id WHERE a.name LIKE 'fan\\_%' AND t.triggerer_id IS NOT NULL"
        )[0][0]

    def idle_rss(self, settle: float = 5.0, timeout: float = 120.0) -> float:
        """The triggerer tree's RSS once it stops moving: median of the last ``settle`` seconds of
        1-second samples, when they lie within 1 % of each other."""
        samples: list[float] = []
        deadline = time.monotonic() + timeout
        window = int(settle)
        while True:
            self.airflow.check_alive()
            root = self.airflow.processes["triggerer"].process.pid  # type: ignore[union-attr]
            samples.append(rss_kib(tree_pids(root)))
            last = samples[-window:]
            if len(last) == window and (max(last) - min(last)) <= 0.01 * max(last):
                return statistics.median(last)
            if time.monotonic() > deadline:
                return statistics.median(last)
            time.sleep(1.0)

    def connections(self) -> int:
        connz = self.topology.hub.monitor("connz?limit=10000") or {}
        return sum(1 for c in connz.get("connections") or [] if c.get("name") == CLIENT_NAME)

    def memory(self, steps: list[int]) -> list[dict[str, Any]]:
        from local_stack.processes import wait_until

        results = []
        have = 0
        for index, watchers in enumerate(steps):
            first, last = have, watchers - 1
            self.dags.joinpath(f"bench_fan_{first}.py").write_text(
                FAN_DAG.format(first=first, last=last, leaf=LEAF, stream=STREAMS["fan"])
            )
            if index == 0:
                say(f"  {watchers} watcher(s): waiting for the DAG, then restarting the triggerer ...")
                wait_until(
                    f"{watchers} fan watchers assigned",
                    lambda w=watchers: self.airflow.check_alive() or self.fan_triggers() >= w,
                    300,
                    1.0,
                )
                self.restart_triggerer()
            else:
                say(f"  {watchers} watchers: waiting for the DAG and the triggerer ...")
            started = time.monotonic()
            wait_until(
                f"{watchers} fan watchers assigned",
                lambda w=watchers: self.airflow.check_alive() or self.fan_triggers() >= w,
                600,
                1.0,
            )
            wait_until(
                "the fan consumer pulling",
                lambda: asyncio.run(consumer_waiting(self.topology.url("hub"), STREAMS["fan"], "bench_fan")),
                120,
                0.5,
            )
            assigned = time.monotonic() - started
            time.sleep(3.0)  # the runner picks new triggers up at its next sync (every second)
            rss = self.idle_rss()
            root = self.airflow.processes["triggerer"].process.pid  # type: ignore[union-attr]
            results.append(
                {
                    "watchers": watchers,
                    "rss_kib": rss,
                    "processes": len(tree_pids(root)),
                    "connections": self.connections(),
                    "assigned_seconds": assigned,
                }
            )
            have = watchers
        return results


def say(message: str) -> None:
    print(message, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, round(fraction * (len(values) - 1)))]


def report(args: argparse.Namespace, rounds: list[list[dict]], latencies: list[float], memory: list[dict]) -> None:
    labels = {"baseline": "baseline: nats-py fetch(100) + ack", "batch1": "trigger, batch_size 1",
              "batched": f"trigger, batch_size {args.batch}",
            "wide": f"trigger, batch_size {args.batch}, max_ack_pending {args.wide_ack_pending}"}  # fmt: skip
    print()
    print(
        f"{args.messages:,} messages x {len(rounds)} rounds (interleaved), medians; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs"
    )
    baseline_rates = [r["rate"] for one in rounds for r in one if r["path"] == "baseline"]
    base = statistics.median(baseline_rates)
    rows = [["path", "msg/s (median)", "each round", "x baseline (median of rounds)"]]
    for path in args.measured:
        per_round = [next(r for r in one if r["path"] == path) for one in rounds]
        rate = statistics.median(r["rate"] for r in per_round)
        ratio = statistics.median(
            r["rate"] / next(b for b in one if b["path"] == "baseline")["rate"]
            for r, one in zip(per_round, rounds, strict=True)
        )
        rows.append([labels[path], f"{rate:,.0f}", " ".join(f"{r['rate']:,.0f}" for r in per_round), f"{ratio:.3f}"])
    table(rows)
    print(f"(baseline median {base:,.0f} msg/s)")
    print()
    print("CPU ms per 1,000 messages (medians of rounds) and PostgreSQL commits per message:")
    names = list(rounds[0][0]["cpu_ms_per_1k"])
    rows = [["path", *names, "commits/msg"]]
    for path in args.measured:
        per_round = [next(r for r in one if r["path"] == path) for one in rounds]
        cells = [f"{statistics.median(r['cpu_ms_per_1k'][n] for r in per_round):.0f}" for n in names]
        commits = statistics.median(r["commits_per_message"] for r in per_round)
        rows.append([labels[path], *cells, f"{commits:.2f}"])
    table(rows)
    if latencies:
        print()
        print(
            f"latency, publish to persisted event, batch_size 1, {len(latencies)} messages at "
            f"{args.latency_rate:g}/s: p50 {1000 * percentile(latencies, 0.5):.0f} ms, "
            f"p95 {1000 * percentile(latencies, 0.95):.0f} ms, max {1000 * latencies[-1]:.0f} ms"
        )
    if memory:
        print()
        print(
            "triggerer RSS (supervisor + runner + serve-logs), idle, watchers on one stream (+3 throughput watchers):"
        )
        one = memory[0]
        rows = [["watchers", "RSS MiB", "KiB per watcher vs first", "processes", "NATS connections"]]
        for m in memory:
            per = (m["rss_kib"] - one["rss_kib"]) / (m["watchers"] - one["watchers"]) if m is not one else None
            rows.append([str(m["watchers"]), f"{m['rss_kib'] / 1024:.1f}", "-" if per is None else f"{per:.1f}",
                         str(m["processes"]), str(m["connections"])])  # fmt: skip
        table(rows)


def table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1000, help="messages per path per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, at least 3 (default 3)")
    parser.add_argument("--batch", type=int, default=100, help="batch_size of the batched watcher (default 100)")
    parser.add_argument(
        "--paths",
        default=",".join(TRIGGER_PATHS),
        help=f"trigger paths to measure besides the baseline (default {','.join(TRIGGER_PATHS)})",
    )
    parser.add_argument(
        "--wide-ack-pending",
        type=int,
        default=4096,
        help="max_ack_pending of the second batched watcher (default 4096; the trigger's default is 256)",
    )
    parser.add_argument(
        "--latency-messages", type=int, default=40, help="single messages for the latency (default 40; 0: skip)"
    )
    parser.add_argument("--latency-rate", type=float, default=10.0, help="their rate, per second (default 10)")
    parser.add_argument(
        "--watchers",
        default="1,100,500",
        help='watcher counts for the memory steps, rising (default 1,100,500; "" skips them)',
    )
    parser.add_argument("--baseline-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_child:
        baseline_child(args.baseline_child, 100)
        return
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not paths or set(paths) - set(TRIGGER_PATHS):
        parser.error(f"--paths={args.paths!r} is not allowed: use some of {', '.join(TRIGGER_PATHS)}")
    args.measured = ["baseline", *(p for p in TRIGGER_PATHS if p in paths)]
    steps = [int(x) for x in args.watchers.split(",") if x.strip()] if args.watchers else []
    if args.rounds < 3:
        parser.error(f"--rounds={args.rounds} is not allowed: use 3 or more (medians of interleaved rounds)")
    if args.messages < 100:
        parser.error(f"--messages={args.messages} is not allowed: use 100 or more")
    if args.batch < 2:
        parser.error(f"--batch={args.batch} is not allowed: use 2 or more (batch_size 1 is always measured)")
    if args.wide_ack_pending < args.batch:
        parser.error(f"--wide-ack-pending={args.wide_ack_pending} is not allowed: use at least --batch ({args.batch})")
    if steps and (steps != sorted(set(steps)) or steps[0] < 1 or len(steps) < 2):
        parser.error(f"--watchers={args.watchers!r} is not allowed: use rising counts, at least two, e.g. 1,100,500")

    begun = time.monotonic()
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="bench-events-") as work:
        bench = Bench(Path(work), args)
        try:
            bench.start()
            say(f"ready after {time.monotonic() - begun:.0f} s; warming up each path ...")
            for path in args.measured:
                bench.run_path(path, max(100, args.messages // 10))
            rounds = []
            for number in range(args.rounds):
                order = list(args.measured)
                if number % 2:
                    order.reverse()
                one = [bench.run_path(path, args.messages) for path in order]
                loads.append(os.getloadavg()[0])
                say(f"round {number + 1}: " + ", ".join(f"{r['path']} {r['rate']:,.0f} msg/s" for r in one))
                rounds.append(one)
            latencies = []
            if args.latency_messages and "batch1" in args.measured:
                latencies = bench.latency(args.latency_messages, args.latency_rate)
            memory: list[dict] = []
            if steps:
                say("memory: restarting the triggerer, then adding watchers ...")
                memory = bench.memory(steps)
                loads.append(os.getloadavg()[0])
        finally:
            bench.stop()
    report(args, rounds, latencies, memory)
    print(f"\n1-minute load average during the run: {min(loads):.2f}-{max(loads):.2f}; "
          f"the whole script took {time.monotonic() - begun:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
