"""Benchmark: 1,000 concurrent lag triggers in one event loop, as Airflow's triggerer runs them.

Starts a local hub + leaf topology (temporary directory), then runs the same mix of triggers (half
``JetStreamConsumerLagTrigger``, half ``JetStreamReplicationLagTrigger``; half aimed at the hub
domain, half at the leaf; two Airflow connections, one per server) in a fresh child process per
variant, so that each variant's memory is measured from the same baseline:

- ``naive``: one Airflow connection id per trigger, hence one NATS connection per trigger;
- ``shared-burst``: two Airflow connections, every trigger started at once (as the triggerer
  starts a batch);
- ``shared-warm``: two Airflow connections, one trigger per connection started first, the rest
  once it is connected.

No trigger is ever satisfied (each consumer keeps one unprocessed message; replication triggers
use ``max_inactive=0``), so every trigger keeps checking for the whole measuring window. Reported
per variant: NATS connections the servers see (``connz``), peak RSS growth per trigger, CPU time
per check, checks done against ``triggers x window / poll_interval``, and the event loop's worst
lag. Ratios compare each variant with ``naive``, measured in the same run.

    python bench/triggers.py                       # 1,000 triggers, poll_interval 5s, 30s window
    python bench/triggers.py --triggers 200 --window 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONSUMER_STREAMS = {"hub": "bench_cl_hub", "leaf": "bench_cl_leaf"}
MIRRORS = {"hub": "bench_mirror_hub", "leaf": "bench_mirror_leaf"}  # each mirrors the other domain's stream


async def setup(hub_url: str, leaf_url: str) -> None:
    """Streams with a waiting consumer in each domain, and a cross-domain mirror in each domain."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, ExternalStream, StreamConfig, StreamSource

    for domain, url in (("hub", hub_url), ("leaf", leaf_url)):
        nc = await nats.connect(url)
        js = nc.jetstream()
        stream = CONSUMER_STREAMS[domain]
        await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream}.in"]))
        await js.publish(f"{stream}.in", b"one unprocessed message")
        await js.add_consumer(stream, ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.EXPLICIT))
        other = "leaf" if domain == "hub" else "hub"
        origin = StreamSource(name=CONSUMER_STREAMS[other], external=ExternalStream(api=f"$JS.{other}.API"))
        await js.add_stream(StreamConfig(name=MIRRORS[domain], mirror=origin))
        await nc.close()


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


async def run_variant(variant: str, count: int, poll_interval: float, window: float, ports: dict) -> dict:
    """Run ``count`` triggers for ``window`` seconds in this process; return the measurements."""
    import gc

    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
    from airflow_provider_jetstream.triggers.consumer_lag import JetStreamConsumerLagTrigger
    from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger

    checks = 0
    # The triggers' checks are these hook methods: count them (only triggers run in this process).
    original = {"consumer": JetStreamHook.aconsumer_lag, "replication": JetStreamHook.acheck_replication}

    latencies: list[float] = []

    async def timed(kind: str, *args, **kwargs):
        nonlocal checks
        checks += 1
        started = time.monotonic()
        try:
            return await original[kind](*args, **kwargs)
        finally:
            latencies.append(time.monotonic() - started)

    async def counted_consumer(*args, **kwargs):
        return await timed("consumer", *args, **kwargs)

    async def counted_replication(*args, **kwargs):
        return await timed("replication", *args, **kwargs)

    JetStreamHook.aconsumer_lag = counted_consumer  # type: ignore[method-assign]
    JetStreamHook.acheck_replication = counted_replication  # type: ignore[method-assign]

    def register(conn_id: str, port: int, client_name: str) -> None:
        body = {"conn_type": "jetstream", "host": f"127.0.0.1:{port}", "login": "acc", "password": "acc"}
        body["extra"] = {"client_name": client_name}
        os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(body)

    servers = ("hub", "leaf")
    if variant == "naive":
        conn_ids = [f"bench_naive_{i}" for i in range(count)]
        for i, conn_id in enumerate(conn_ids):
            register(conn_id, ports[servers[i % 2]], f"bench-{variant}")
    else:
        for server in servers:
            register(f"bench_{server}", ports[server], f"bench-{variant}")
        conn_ids = [f"bench_{servers[i % 2]}" for i in range(count)]

    triggers = []
    for i, conn_id in enumerate(conn_ids):
        domain = ("hub", "leaf")[(i // 2) % 2]
        if i % 4 < 2:
            trigger = JetStreamConsumerLagTrigger(
                conn_id, CONSUMER_STREAMS[domain], "worker", domain=domain, poll_interval=poll_interval
            )
        else:
            trigger = JetStreamReplicationLagTrigger(
                conn_id, MIRRORS[domain], domain=domain, options={"max_inactive": 0}, poll_interval=poll_interval
            )
        classpath, kwargs = trigger.serialize()  # as the triggerer gets them: rebuilt from JSON
        module, _, name = classpath.rpartition(".")
        triggers.append(getattr(sys.modules[module], name)(**json.loads(json.dumps(kwargs))))

    gc.collect()
    baseline = rss_bytes()
    peak = baseline
    loop_lag = 0.0
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak, loop_lag
        while not stop.is_set():
            before = time.monotonic()
            await asyncio.sleep(0.1)
            loop_lag = max(loop_lag, time.monotonic() - before - 0.1)
            peak = max(peak, rss_bytes())

    sampler = asyncio.create_task(sample())
    started = time.monotonic()
    tasks = []
    if variant == "shared-warm":
        for trigger in triggers[:2]:
            tasks.append(asyncio.create_task(anext(trigger.run())))
        deadline = time.monotonic() + 30
        while checks < 2 and time.monotonic() < deadline:  # both connections are open
            await asyncio.sleep(0.01)
        triggers = triggers[2:]
    tasks += [asyncio.create_task(anext(trigger.run())) for trigger in triggers]
    # Let every trigger connect and check once, then measure a steady window.
    await asyncio.sleep(min(poll_interval, 5.0) + 1.0)
    connect_seconds = time.monotonic() - started
    fired = [t for t in tasks if t.done()]
    checks_before, cpu_before, window_start = checks, time.process_time(), time.monotonic()
    latencies.clear()
    await asyncio.sleep(window)
    window_checks = checks - checks_before
    cpu = time.process_time() - cpu_before
    elapsed = time.monotonic() - window_start
    connections = {}
    for server in servers:
        connz = servers_monitor(ports[f"{server}_http"], "connz?limit=10000")
        connections[server] = sum(1 for c in connz["connections"] if c.get("name") == f"bench-{variant}")
    stop.set()
    await sampler
    latencies.sort()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "variant": variant,
        "triggers": count,
        "connections": sum(connections.values()),
        "connections_by_server": connections,
        "fired_early": len(fired),
        "rss_growth_per_trigger_kb": (peak - baseline) / count / 1024,
        "cpu_ms_per_check": cpu / max(window_checks, 1) * 1000,
        "checks_done": window_checks,
        "checks_expected": count * elapsed / poll_interval,
        "cpu_share_of_one_core": cpu / elapsed,
        "max_loop_lag_ms": loop_lag * 1000,
        "check_latency_p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else 0.0,
        "check_latency_p99_ms": latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0.0,
        "startup_seconds": connect_seconds,
    }


def servers_monitor(http_port: int, endpoint: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/{endpoint}", timeout=5) as resp:
        return json.loads(resp.read())


def child(args: argparse.Namespace) -> None:
    import logging

    logging.getLogger("airflow").setLevel(logging.WARNING)  # the triggers log each check at INFO
    ports = json.loads(args.ports)
    result = asyncio.run(run_variant(args.child, args.triggers, args.poll_interval, args.window, ports))
    print("RESULT " + json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured after start-up")
    parser.add_argument("--variants", default="naive,shared-burst,shared-warm")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    from airflow_provider_jetstream.testing.servers import LocalTopology

    with (
        tempfile.TemporaryDirectory(prefix="bench-triggers-") as work,
        LocalTopology(Path(work) / "topology", leaf_domains=["leaf"]) as topology,
    ):
        leaf = topology.leaves["leaf"]
        asyncio.run(setup(topology.url("hub"), topology.url("leaf")))
        ports = {
            "hub": topology.hub.port,
            "leaf": leaf.port,
            "hub_http": topology.hub.http_port,
            "leaf_http": leaf.http_port,
        }
        env = {**os.environ, "AIRFLOW_HOME": str(Path(work) / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
        results = []
        for variant in args.variants.split(","):
            command = [sys.executable, __file__, "--child", variant, "--ports", json.dumps(ports)]
            command += ["--triggers", str(args.triggers), "--poll-interval", str(args.poll_interval)]
            command += ["--window", str(args.window)]
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
            if not lines:
                sys.exit(f"variant {variant} failed:\n{out.stderr[-3000:]}")
            results.append(json.loads(lines[-1].removeprefix("RESULT ")))
    report(results, args)


def report(results: list[dict], args: argparse.Namespace) -> None:
    print(
        f"{args.triggers} lag triggers (1/2 consumer, 1/2 replication; 1/2 hub, 1/2 leaf domain), "
        f"poll_interval {args.poll_interval:g}s, {args.window:g}s window, one event loop"
    )
    columns = [
        ("variant", "variant", "{}"),
        ("NATS conns", "connections", "{}"),
        ("RSS/trigger KB", "rss_growth_per_trigger_kb", "{:.1f}"),
        ("CPU ms/check", "cpu_ms_per_check", "{:.3f}"),
        ("checks done/expected", None, None),
        ("CPU % of a core", "cpu_share_of_one_core", None),
        ("check p50/p99 ms", None, None),
        ("max loop lag ms", "max_loop_lag_ms", "{:.0f}"),
        ("start-up s", "startup_seconds", "{:.1f}"),
    ]
    rows = [[title for title, _, _ in columns]]
    for r in results:
        row = []
        for title, key, fmt in columns:
            if title.startswith("checks"):
                row.append(f"{r['checks_done']}/{r['checks_expected']:.0f}")
            elif key is None:
                row.append(f"{r['check_latency_p50_ms']:.0f}/{r['check_latency_p99_ms']:.0f}")
            elif key == "cpu_share_of_one_core":
                row.append(f"{100 * r[key]:.0f}%")
            else:
                row.append(fmt.format(r[key]))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    naive = next((r for r in results if r["variant"] == "naive"), None)
    for r in results:
        if naive and r is not naive:
            print(
                f"{r['variant']} vs naive: connections {r['connections']}/{naive['connections']}, "
                f"RSS per trigger x{ratio(r, naive, 'rss_growth_per_trigger_kb'):.2f}, "
                f"CPU per check x{ratio(r, naive, 'cpu_ms_per_check'):.2f}"
            )


def ratio(result: dict, baseline: dict, key: str) -> float:
    return result[key] / max(baseline[key], 1e-9)


if __name__ == "__main__":
    main()
