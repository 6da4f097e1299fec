"""Benchmark: how the edge-to-hub pipeline grows with the number of leaves N.

Starts one local hub with max(N) leaves (real ``nats-server`` processes, each leaf its own JetStream
domain, temporary directory). On each leaf, the example pipeline's ``readings`` stream with some
messages; on the hub, for each N, an aggregate stream that sources the first N leaves' ``readings``
(the example DAG's ``readings-all`` spec: ``edge_pipeline_config.aggregate_sources``, ensured through
``JetStreamHook.aensure_stream`` as ``ensure_hub_aggregate`` does). Every N runs against the same
servers, so the rounds of all N interleave and N = the smallest is the baseline of the same run.
Measured for each N:

- **one replication check** as the example DAG's sensor and trigger run it
  (``JetStreamHook.acheck_replication``: every origin probed in its own domain, ``verify_origin="auto"``,
  ``unreachable_origins="proceed"``): wall time (median of interleaved rounds), the NATS requests and
  payload bytes the checking client sent and received (nats-py ``Client.stats`` of that connection;
  the hub's ``connz`` for the client name is printed beside them), and which API requests they were;
  the peak Python allocation of one check (``tracemalloc``);
- **the example DAG's parse time** (``dags/jetstream_edge_to_hub.py`` with ``JETSTREAM_LEAF_DOMAINS``
  set to N leaves, ``DagBag`` of that one file in a fresh process, median of interleaved rounds), its
  task count and serialized size, for two layouts in the same rounds: ``mapped`` (the DAG as it is:
  per-leaf steps mapped at run time over the run's leaves) and ``per-leaf`` (the layout before, three
  tasks written out per leaf when the file is parsed; kept in ``bench/per_leaf_layout/``);
  ``--parse-leaves`` adds N that only the parse is measured for (no servers are needed to parse), and
  ``--parse-only`` measures only that;
- **NATS connections and triggerer memory**: the DAG's waiting trigger (``wait_replicated``'s
  ``JetStreamReplicationLagTrigger``, rebuilt from its serialized form as the triggerer does) run in
  one event loop of a fresh process for a window, started again 2 s (the sensor's poke_interval)
  after each time it fires (each firing is what the next DAG run would defer): the hub's and the
  leaves' connections from that client name, RSS growth of the process, checks done.
- with ``--origins M``: one more hub aggregate sourcing M streams spread over the leaves (same shape),
  its checks interleaved with the baseline's, the DAG's trigger on it, the hub's idle CPU and RSS
  before and after: 1,000 origins measured where 1,000 leaf servers would not fit one machine.

Every figure is printed with its ratio to the baseline N, and per leaf.

    python bench/scale.py                          # N = 2, 8, 16 (17 nats-server processes)
    python bench/scale.py --leaves 2,8,16,32 --origins 1000 --parse-leaves 100,1000   # bench/README.md
    python bench/scale.py --parse-only --parse-leaves 2,32,1000 --parse-rounds 5       # layouts, bench/README.md
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

REPO = Path(__file__).resolve().parent.parent
DAG_FILE = REPO / "dags" / "jetstream_edge_to_hub.py"
#: The DAG files whose parse is measured: the example as it is, and the layout before its per-leaf steps
#: were mapped (``before`` of the parse figures).
LAYOUTS = {"mapped": DAG_FILE, "per-leaf": REPO / "bench" / "per_leaf_layout" / "jetstream_edge_to_hub.py"}
sys.path.insert(0, str(REPO / "dags"))  # edge_pipeline_config, as Airflow's processes put the DAGs folder there

CHECK_CLIENT = "bench-scale-check"
TRIGGER_CLIENT = "bench-scale-trigger"
HUB = "hub"  # the example pipeline's hub domain (edge_pipeline_config.HUB_DOMAIN's default)


def leaf_name(i: int) -> str:
    return f"leaf-{i:04d}"


def aggregate_name(n: int) -> str:
    return f"readings-all-n{n}"


def register_connection(conn_id: str, port: int, client_name: str) -> None:
    """An Airflow connection (type jetstream) to the hub, from the environment as Airflow reads it."""
    body = {"conn_type": "jetstream", "host": f"127.0.0.1:{port}", "login": "acc", "password": "acc"}
    body["extra"] = {"client_name": client_name}
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(body)


def pipeline_env(leaves: list[str]) -> dict[str, str]:
    return {"JETSTREAM_LEAF_DOMAINS": ",".join(leaves)}


def aggregate_spec(n: int) -> dict:
    """The example DAG's ``ensure_hub_aggregate`` stream for the first ``n`` leaves, under its own name."""
    from edge_pipeline_config import aggregate_sources

    sources = aggregate_sources([leaf_name(i) for i in range(n)])
    return {"name": aggregate_name(n), "sources": sources, "max_age": "30d", "storage": "file"}


# -- set-up ---------------------------------------------------------------------------------------


async def setup(topology, counts: list[int], messages: int, quiet) -> None:
    """Each leaf's ``readings`` stream with ``messages`` messages; one aggregate per N; wait until
    every aggregate holds every leaf's last message (the exact check says caught up)."""
    import nats
    from edge_pipeline_config import leaf_stream_spec

    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

    hook = JetStreamHook("bench_setup")
    leaves = [leaf_name(i) for i in range(max(counts))]
    async with hook.aconnect():
        for leaf in leaves:
            await hook.aensure_stream(leaf_stream_spec(leaf), domain=leaf, allow_double_store=True, logger=quiet)
        for leaf in leaves:
            nc = await nats.connect(topology.url(leaf))
            js = nc.jetstream()
            for i in range(messages):
                await js.publish(f"sensors.{leaf}.t{i % 4}", b"x" * 100)
            await nc.close()
        for n in counts:
            await hook.aensure_stream(aggregate_spec(n), domain=HUB, allow_double_store=True, logger=quiet)
        deadline = time.monotonic() + 120
        for n in counts:
            while True:
                check = await hook.areplication_status(aggregate_name(n), domain=HUB, max_inactive=30)
                if check.caught_up and all(v.check == "exact" for v in check.verdicts):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"aggregate for N={n} not caught up after 120 s:\n{check.table()}")
                await asyncio.sleep(0.2)


# -- one check --------------------------------------------------------------------------------------


def watch_for(stream: str):
    """The DAG's ``wait_replicated`` check: max_lag 0, max_inactive 30 s, exact, proceed."""
    from airflow_provider_jetstream.core.signatures.operations import REPLICATION, replication_watch

    arguments = {"stream": stream, "max_lag": 0, "max_inactive": "30s", "unreachable_origins": "proceed"}
    return replication_watch(REPLICATION.check(arguments))


def api_kind(subject: str) -> str:
    """``$JS.leaf-0001.API.STREAM.MSG.GET.readings`` -> ``leaf STREAM.MSG.GET``."""
    head, _, rest = subject.partition(".API.")
    where = "hub" if head in ("$JS", "$JS.hub") else "leaf"
    verb = ".".join(t for t in rest.split(".")[:3] if t.isupper())
    return f"{where} {verb}"


async def measure_checks(hub, streams: dict[int, str], rounds: int) -> dict[int, dict]:
    """Interleaved rounds of one check of each stream (keyed by its number of origins) over one shared
    connection; counted on the client connection."""
    import tracemalloc

    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

    hook = JetStreamHook("bench_check")
    counts = sorted(streams)
    results: dict[int, dict] = {n: {"wall": [], "requests": [], "out": [], "in": [], "kinds": {}} for n in counts}
    async with hook.aconnect() as nc:
        log: list[tuple[str, int, int]] = []
        request = nc.request

        async def recorded(subject, payload=b"", timeout=0.5, **kwargs):
            msg = await request(subject, payload, timeout=timeout, **kwargs)
            log.append((subject, len(payload), len(msg.data)))
            return msg

        nc.request = recorded  # type: ignore[method-assign]  # only to name the requests
        for n in counts:  # warm-up: imports, the reply subscription, first-use caches
            await hook.acheck_replication(watch_for(streams[n]), domain=HUB)
        for r in range(rounds):
            order = counts if r % 2 == 0 else counts[::-1]
            progress(f"check round {r + 1}/{rounds}: origins {counts}")
            for n in order:
                watch = watch_for(streams[n])
                log.clear()
                before = dict(nc.stats)
                server_before = client_counts(hub, CHECK_CLIENT)
                started = time.perf_counter()
                check = await hook.acheck_replication(watch, domain=HUB)
                wall = time.perf_counter() - started
                after = dict(nc.stats)
                server_after = client_counts(hub, CHECK_CLIENT)
                if not check.caught_up or any(v.check != "exact" for v in check.verdicts):
                    raise SystemExit(f"N={n}: the check is not an exact caught-up one:\n{check.table()}")
                res = results[n]
                res["wall"].append(wall)
                res["requests"].append(after["out_msgs"] - before["out_msgs"])
                res["out"].append(after["out_bytes"] - before["out_bytes"])
                res["in"].append(after["in_bytes"] - before["in_bytes"])
                res["server_in_msgs"] = server_after["in_msgs"] - server_before["in_msgs"]
                res["server_in_bytes"] = server_after["in_bytes"] - server_before["in_bytes"]
                res["server_out_bytes"] = server_after["out_bytes"] - server_before["out_bytes"]
                res["server_connections"] = server_after["connections"]
                kinds: dict[str, list[int]] = {}
                for subject, sent, received in log:
                    entry = kinds.setdefault(api_kind(subject), [0, 0, 0])
                    entry[0] += 1
                    entry[1] += sent
                    entry[2] += received
                res["kinds"] = kinds
                res["origins"] = len(check.verdicts)
        tracemalloc.start()
        for n in counts:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            await hook.acheck_replication(watch_for(streams[n]), domain=HUB)
            results[n]["alloc_peak"] = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        nc.request = request  # type: ignore[method-assign]
    return {
        n: {
            "wall_ms": statistics.median(r["wall"]) * 1000,
            "wall_ms_min": min(r["wall"]) * 1000,
            "requests": statistics.median(r["requests"]),
            "bytes_out": statistics.median(r["out"]),
            "bytes_in": statistics.median(r["in"]),
            **{k: r[k] for k in r if k not in ("wall", "requests", "out", "in")},
        }
        for n, r in results.items()
    }


def client_counts(server, client_name: str) -> dict[str, int]:
    """The server's ``connz`` counts of the client connections with this name (not server-wide)."""
    connz = server.monitor("connz?limit=100000") or {}
    mine = [c for c in connz.get("connections") or [] if c.get("name") == client_name]
    return {
        "connections": len(mine),
        "in_msgs": sum(c.get("in_msgs", 0) for c in mine),
        "in_bytes": sum(c.get("in_bytes", 0) for c in mine),
        "out_bytes": sum(c.get("out_bytes", 0) for c in mine),
    }


# -- many origins: one aggregate sourcing M streams ------------------------------------------------


def origins_name(m: int) -> str:
    return f"origins-all-m{m}"


async def setup_origins(topology, m: int, quiet) -> float:
    """M more streams spread over the leaves (one message each) and a hub aggregate sourcing all of
    them, shaped like the example's (a subject transform per source); waits until it is exactly caught
    up. Returns the seconds from creating the aggregate to caught up."""
    import nats
    from nats.js.api import StreamConfig

    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

    leaves = list(topology.leaves)
    sources = []
    by_leaf: dict[str, list[int]] = {}
    for k in range(m):
        by_leaf.setdefault(leaves[k % len(leaves)], []).append(k)
    for leaf, ks in by_leaf.items():
        nc = await nats.connect(topology.url(leaf))
        js = nc.jetstream()
        for k in ks:
            await js.add_stream(StreamConfig(name=f"extra-{k}", subjects=[f"extra.{leaf}.{k}.>"]))
            await js.publish(f"extra.{leaf}.{k}.t", b"x" * 100)
            transform = [{"src": f"extra.{leaf}.{k}.>", "dest": f"edge.{leaf}.{k}.>"}]
            sources.append({"name": f"extra-{k}", "domain": leaf, "subject_transforms": transform})
        await nc.close()
    hook = JetStreamHook("bench_setup")
    spec = {"name": origins_name(m), "sources": sources, "max_age": "30d", "storage": "file"}
    started = time.monotonic()
    async with hook.aconnect():
        await hook.aensure_stream(spec, domain=HUB, allow_double_store=True, logger=quiet, request_timeout=30)
        deadline = time.monotonic() + 600
        while True:
            check = await hook.areplication_status(origins_name(m), domain=HUB, max_inactive=30, request_timeout=30)
            if check.caught_up and all(v.check == "exact" for v in check.verdicts):
                return time.monotonic() - started
            if time.monotonic() > deadline:
                raise SystemExit(f"the {m}-origin aggregate not caught up after 600 s: {check.waiting_for()[:2000]}")
            await asyncio.sleep(1.0)


def server_cpu(server, seconds: float) -> float:
    """The share of one core a server process used over ``seconds`` (idle: no client traffic)."""
    import psutil

    proc = psutil.Process(server.process.pid)
    before = sum(proc.cpu_times()[:2])
    time.sleep(seconds)  # a measuring window, not a wait for a condition
    return (sum(proc.cpu_times()[:2]) - before) / seconds


# -- parse ------------------------------------------------------------------------------------------

PARSE_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[2])
from airflow.models.dagbag import DagBag
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
parse = time.perf_counter() - started
assert not bag.import_errors, bag.import_errors
del bag
import gc
gc.collect()
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
warm = time.perf_counter() - started
dag = bag.dags["jetstream_edge_to_hub"]
from airflow.serialization.serialized_objects import DagSerialization
started = time.perf_counter()
size = len(json.dumps(DagSerialization.to_dict(dag)))
serialize = time.perf_counter() - started
result = {"parse": parse, "warm": warm, "tasks": len(dag.tasks), "serialized": size, "serialize": serialize}
print("RESULT " + json.dumps(result))
"""


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def parse_once(layout: str, n: int, env: dict[str, str]) -> dict:
    child_env = {**env, **pipeline_env([leaf_name(i) for i in range(n)])}
    command = [sys.executable, "-c", PARSE_CHILD, str(LAYOUTS[layout]), str(REPO / "dags")]
    out = subprocess.run(command, env=child_env, capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"parsing the {layout} layout with {n} leaves failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def measure_parse(counts: list[int], rounds: int, env: dict[str, str]) -> dict[str, dict[int, dict]]:
    """Each layout's parse at each N: interleaved rounds (every layout and N once a round, the order
    reversed every other round), medians."""
    runs: dict[tuple[str, int], list[dict]] = {(layout, n): [] for layout in LAYOUTS for n in counts}
    order = list(runs)
    for r in range(rounds):
        for layout, n in order if r % 2 == 0 else order[::-1]:
            progress(f"parse {layout} N={n}, round {r + 1}/{rounds}")
            runs[layout, n].append(parse_once(layout, n, env))
    results: dict[str, dict[int, dict]] = {layout: {} for layout in LAYOUTS}
    for (layout, n), rs in runs.items():
        results[layout][n] = {
            "parse_ms": statistics.median(x["parse"] for x in rs) * 1000,
            "warm_ms": statistics.median(x["warm"] for x in rs) * 1000,
            "serialize_ms": statistics.median(x["serialize"] for x in rs) * 1000,
            "tasks": rs[0]["tasks"],
            "serialized_bytes": rs[0]["serialized"],
            "rounds": len(rs),
        }
    return results


def report_parse(parse: dict[str, dict[int, dict]]) -> None:
    """The parse figures of both layouts side by side, per N; 'after / before' = mapped / per-leaf."""
    before, after = parse["per-leaf"], parse["mapped"]
    rows = [
        ("DAG tasks", "tasks", 1, "{:,.0f}"),
        ("parse ms, fresh process (median)", "parse_ms", 1, "{:,.0f}"),
        ("parse ms, imports warm (median)", "warm_ms", 1, "{:,.0f}"),
        ("serialization ms (median)", "serialize_ms", 1, "{:,.0f}"),
        ("serialized KB", "serialized_bytes", 1024, "{:,.0f}"),
    ]
    counts = sorted(after)
    header = ["figure (per-leaf -> mapped)"] + [f"N={n}" for n in counts]
    table = [header]
    for title, key, scale, fmt in rows:
        cells = [title]
        for n in counts:
            b, a = before[n][key] / scale, after[n][key] / scale
            cells.append(f"{fmt.format(b)} -> {fmt.format(a)} ({a / b:.2g}x)" if b else f"{fmt.format(a)}")
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print(f"DAG parse, both layouts in the same interleaved rounds ({after[counts[0]]['rounds']} rounds per N):")
    for row in table:
        print(
            "  " + "  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row))
        )


# -- the DAG's trigger in one event loop ----------------------------------------------------------


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


async def run_trigger(n: int, stream: str, window: float, ports: dict) -> dict:
    """The DAG's ``wait_replicated`` trigger for N leaves, as the triggerer rebuilds it, in this event
    loop for ``window`` seconds; started again each time it fires."""
    import gc

    import airflow_provider_jetstream.hooks.jetstream as hook_module
    from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor

    register_connection("nats_hub", ports["hub"], TRIGGER_CLIENT)
    checks = 0
    original = hook_module.JetStreamHook.acheck_replication

    async def counted(*args, **kwargs):
        nonlocal checks
        checks += 1
        return await original(*args, **kwargs)

    hook_module.JetStreamHook.acheck_replication = counted  # type: ignore[method-assign]

    # The sensor as the DAG declares it, its templates rendered with the DAG's param defaults.
    sensor = JetStreamReplicationLagSensor(
        task_id="wait_replicated",
        jetstream_conn_id="nats_hub",
        domain=HUB,
        stream=stream,
        options={"max_lag": 0, "max_inactive": "30s", "verify_origin": "auto"},
        unreachable_origins="proceed",
        deferrable=True,
        poke_interval=2,
        timeout=60 * 30,
    )
    sensor.validate()
    classpath, kwargs = sensor.trigger().serialize()
    module, _, name = classpath.rpartition(".")
    blob = json.dumps(kwargs)

    def rebuilt():
        return getattr(sys.modules[module], name)(**json.loads(blob))

    gc.collect()
    baseline = rss_bytes()
    peak = baseline
    fired = 0
    connections = {"hub": 0, "leaves": 0}
    stop = time.monotonic() + window

    async def sample() -> None:
        nonlocal peak
        while time.monotonic() < stop:
            peak = max(peak, rss_bytes())
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    from airflow_provider_jetstream.testing.ports import LOOPBACK

    while time.monotonic() < stop:
        events = rebuilt().run()
        event = await anext(events)
        if event.payload.get("status") != "success":
            raise SystemExit(f"trigger for N={n} fired {event.payload}")
        fired += 1
        if fired == 1:
            first = rss_bytes()
            # The trigger still holds its connection until run() ends: what the servers see from it.
            connections["hub"] = monitor_count(LOOPBACK, ports["hub_http"])
            connections["leaves"] = sum(monitor_count(LOOPBACK, p) for p in ports["leaves_http"])
        await events.aclose()
        await asyncio.sleep(2.0)  # the sensor's poke_interval: the next run's trigger starts after it
    await sampler
    return {
        "rss_growth_kb": (peak - baseline) / 1024,
        "rss_first_kb": (first - baseline) / 1024,
        "rss_mb": peak / 2**20,
        "checks": checks,
        "fired": fired,
        "connections_hub": connections["hub"],
        "connections_leaves": connections["leaves"],
    }


def monitor_count(host: str, http_port: int) -> int:
    import urllib.request

    with urllib.request.urlopen(f"http://{host}:{http_port}/connz?limit=100000", timeout=5) as resp:
        connz = json.loads(resp.read())
    return sum(1 for c in connz.get("connections") or [] if c.get("name") == TRIGGER_CLIENT)


def trigger_child(args: argparse.Namespace) -> None:
    import logging

    logging.getLogger("airflow").setLevel(logging.WARNING)
    result = asyncio.run(run_trigger(int(args.child), args.stream, args.window, json.loads(args.ports)))
    print("RESULT " + json.dumps(result))


def measure_triggers(streams: dict[int, str], rounds: int, window: float, ports: dict, env: dict) -> dict[int, dict]:
    counts = sorted(streams)
    runs: dict[int, list[dict]] = {n: [] for n in counts}
    for r in range(rounds):
        for n in counts if r % 2 == 0 else counts[::-1]:
            progress(f"trigger N={n}, round {r + 1}/{rounds}")
            command = [
                sys.executable,
                __file__,
                "--child",
                str(n),
                "--stream",
                streams[n],
                "--ports",
                json.dumps(ports),
            ]
            command += ["--window", str(window)]
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
            if not lines:
                raise SystemExit(f"trigger run N={n} failed:\n{out.stderr[-3000:]}")
            runs[n].append(json.loads(lines[-1].removeprefix("RESULT ")))
    return {
        n: {
            "rss_growth_kb": statistics.median(x["rss_growth_kb"] for x in rs),
            "rss_first_kb": statistics.median(x["rss_first_kb"] for x in rs),
            "rss_mb": statistics.median(x["rss_mb"] for x in rs),
            "checks": statistics.median(x["checks"] for x in rs),
            "connections_hub": max(x["connections_hub"] for x in rs),
            "connections_leaves": max(x["connections_leaves"] for x in rs),
        }
        for n, rs in runs.items()
    }


# -- main -------------------------------------------------------------------------------------------


def counts_arg(text: str) -> list[int]:
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of leaf counts, e.g. 2,8,16") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: leaf counts must be >= 1")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaves", type=counts_arg, default=[2, 8, 16], help="N values; the smallest is the baseline")
    parser.add_argument(
        "--parse-leaves",
        type=counts_arg,
        default=[],
        help="more N for the DAG parse only (no servers; one round each): 100,1000",
    )
    parser.add_argument("--messages", type=int, default=100, help="messages on each leaf's stream")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds of one check per N")
    parser.add_argument("--parse-rounds", type=int, default=3, help="interleaved rounds of the parse")
    parser.add_argument(
        "--parse-only",
        action="store_true",
        help="measure only the DAG parse of both layouts at --parse-leaves (no servers)",
    )
    parser.add_argument("--trigger-rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=10.0, help="seconds each trigger process runs")
    parser.add_argument(
        "--origins",
        type=int,
        default=0,
        help="also: one hub aggregate sourcing this many streams spread over the leaves (e.g. 1000)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    parser.add_argument("--stream", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name, low in (("messages", 1), ("rounds", 1), ("parse_rounds", 1), ("trigger_rounds", 1), ("origins", 0)):
        if getattr(args, name) < low:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= {low}")
    if args.window <= 0:
        parser.error(f"--window {args.window:g}: must be > 0 seconds")
    if args.child:
        trigger_child(args)
        return
    if args.parse_only:
        if not args.parse_leaves:
            parser.error("--parse-only needs --parse-leaves, e.g. 2,32,1000")
        parse_only(args)
        return

    import logging

    from airflow_provider_jetstream.testing.servers import LocalTopology

    quiet = logging.getLogger("bench.scale")  # the hook logs each stream it creates
    quiet.setLevel(logging.WARNING)
    counts = args.leaves
    load_before = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as work:
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(Path(work) / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }
        os.environ.update({k: env[k] for k in ("AIRFLOW_HOME", "AIRFLOW__CORE__LOAD_EXAMPLES")})
        topology = LocalTopology(Path(work) / "topology", leaf_domains=[leaf_name(i) for i in range(max(counts))])
        t0 = time.monotonic()
        progress(f"starting the hub and {max(counts)} leaves")
        # Many servers on a busy machine link slower than the default 30 s allows.
        with topology.start(timeout=max(30.0, 4.0 * max(counts))):
            startup = time.monotonic() - t0
            register_connection("bench_setup", topology.hub.port, "bench-scale-setup")
            register_connection("bench_check", topology.hub.port, CHECK_CLIENT)
            t0 = time.monotonic()
            asyncio.run(setup(topology, counts, args.messages, quiet))
            setup_seconds = time.monotonic() - t0
            checks = asyncio.run(measure_checks(topology.hub, {n: aggregate_name(n) for n in counts}, args.rounds))
            progress("checks: " + json.dumps(checks))
            ports = {
                "hub": topology.hub.port,
                "hub_http": topology.hub.http_port,
                "leaves_http": [leaf.http_port for leaf in topology.leaves.values()],
            }
            triggers = measure_triggers(
                {n: aggregate_name(n) for n in counts}, args.trigger_rounds, args.window, ports, env
            )
            progress("triggers: " + json.dumps(triggers))
            hub_rss = server_rss(topology.hub)
            leaf_rss = statistics.median(server_rss(leaf) for leaf in topology.leaves.values())
            origins = None
            if args.origins:
                origins = {"hub_cpu_before": server_cpu(topology.hub, 10.0), "hub_rss_before": hub_rss}
                origins["catch_up"] = asyncio.run(setup_origins(topology, args.origins, quiet))
                origins["hub_cpu_after"] = server_cpu(topology.hub, 10.0)
                origins["hub_rss_after"] = server_rss(topology.hub)
                streams = {counts[0]: aggregate_name(counts[0]), args.origins: origins_name(args.origins)}
                origins["checks"] = asyncio.run(measure_checks(topology.hub, streams, args.rounds))
                origins["triggers"] = measure_triggers(streams, args.trigger_rounds, args.window, ports, env)
        # Parsed after the servers stopped (they are not needed for it).
        parse = measure_parse(counts, args.parse_rounds, env)
        # Large N take long to parse in the per-leaf layout: one round each, after the interleaved ones.
        more = measure_parse(sorted(set(args.parse_leaves) - set(counts)), 1, env)
        for layout, figures in more.items():
            parse[layout].update(figures)
    report(
        args,
        counts,
        checks,
        parse,
        triggers,
        {
            "startup": startup,
            "setup": setup_seconds,
            "total": time.monotonic() - started,
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "hub_rss_mb": hub_rss / 2**20,
            "leaf_rss_mb": leaf_rss / 2**20,
        },
        origins,
    )


def parse_only(args: argparse.Namespace) -> None:
    """The DAG parse of both layouts at ``--parse-leaves``, ``--parse-rounds`` interleaved rounds."""
    load_before = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as work:
        env = {**os.environ, "AIRFLOW_HOME": str(Path(work) / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
        parse = measure_parse(args.parse_leaves, args.parse_rounds, env)
    load = " ".join(f"{x:.2f}" for x in load_before) + " -> " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"parse only, {time.monotonic() - started:.0f} s; load average {load}")
    report_parse(parse)


def server_rss(server) -> int:
    import psutil

    return psutil.Process(server.process.pid).memory_info().rss


def report(args, counts, checks, layouts, triggers, run, origins) -> None:
    base = counts[0]
    parse = layouts["mapped"]
    load = " ".join(f"{x:.2f}" for x in run["load_before"]) + " -> " + " ".join(f"{x:.2f}" for x in run["load_after"])
    print(
        f"hub + {max(counts)} leaves (nats-server processes) started and linked in {run['startup']:.1f} s; "
        f"streams, {args.messages} messages per leaf and aggregates in {run['setup']:.1f} s; "
        f"whole run {run['total']:.0f} s; load average {load}"
    )
    print(f"RSS after the run: hub {run['hub_rss_mb']:.0f} MB, each leaf (median) {run['leaf_rss_mb']:.0f} MB")
    print(f"baseline N={base}; 'xB' = ratio to the baseline, '/leaf' = figure / N")
    print()

    rows = [
        ("check wall ms (median)", lambda n: checks[n]["wall_ms"], "{:.1f}"),
        ("check requests", lambda n: checks[n]["requests"], "{:.0f}"),
        ("check bytes sent", lambda n: checks[n]["bytes_out"], "{:,.0f}"),
        ("check bytes received", lambda n: checks[n]["bytes_in"], "{:,.0f}"),
        ("check Python alloc peak KB", lambda n: checks[n]["alloc_peak"] / 1024, "{:.0f}"),
        ("hub conns from the check", lambda n: checks[n]["server_connections"], "{}"),
        ("DAG parse ms, fresh process", lambda n: parse[n]["parse_ms"], "{:.0f}"),
        ("DAG parse ms, imports warm", lambda n: parse[n]["warm_ms"], "{:.0f}"),
        ("DAG tasks", lambda n: parse[n]["tasks"], "{}"),
        ("DAG serialized KB", lambda n: parse[n]["serialized_bytes"] / 1024, "{:.0f}"),
        ("trigger: hub conns", lambda n: triggers[n]["connections_hub"], "{}"),
        ("trigger: leaf conns", lambda n: triggers[n]["connections_leaves"], "{}"),
        ("trigger RSS growth KB, 1st check", lambda n: triggers[n]["rss_first_kb"], "{:.0f}"),
        ("trigger RSS growth KB, window", lambda n: triggers[n]["rss_growth_kb"], "{:.0f}"),
        ("trigger process RSS MB", lambda n: triggers[n]["rss_mb"], "{:.0f}"),
        ("trigger checks in window", lambda n: triggers[n]["checks"], "{:.0f}"),
    ]
    header = ["figure"] + [f"N={n}" for n in counts] + [f"N={n} xB" for n in counts[1:]] + ["per leaf"]
    table = [header]
    for title, get, fmt in rows:
        values = [get(n) for n in counts]
        cells = [title] + [fmt.format(v) for v in values]
        cells += [f"{v / values[0]:.2f}" if values[0] else "-" for v in values[1:]]
        top = counts[-1]
        cells.append(f"{(values[-1] - values[0]) / (top - base):.3g}" if top != base else "-")
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
    print("('per leaf' = (figure at the largest N - figure at the baseline) / (N difference): the marginal cost)")
    print()
    for n in counts:
        c = checks[n]
        kinds = ", ".join(f"{k}: {v[0]} req, {v[1]} B out, {v[2]:,} B in" for k, v in sorted(c["kinds"].items()))
        print(
            f"N={n}: {c['origins']} origins; requests by API: {kinds}; "
            f"hub connz for '{CHECK_CLIENT}': {c['server_in_msgs']} msgs in, {c['server_in_bytes']:,} B in, "
            f"{c['server_out_bytes']:,} B out; fastest check {c['wall_ms_min']:.1f} ms; "
            f"{c['wall_ms'] / max(c['requests'], 1):.2f} ms per request"
        )
    print()
    report_parse(layouts)

    if origins:
        print()
        base_n, m = counts[0], args.origins
        o, b = origins["checks"][m], origins["checks"][base_n]
        print(
            f"One hub aggregate sourcing {m} streams spread over the {max(counts)} leaves (shaped like the example's, "
            f"one message each), against the N={base_n} aggregate in the same rounds:"
        )
        print(f"  created to exactly caught up: {origins['catch_up']:.1f} s")
        for title, key, fmt in (
            ("check wall ms (median)", "wall_ms", "{:.1f}"),
            ("check requests", "requests", "{:.0f}"),
            ("check bytes sent", "bytes_out", "{:,.0f}"),
            ("check bytes received", "bytes_in", "{:,.0f}"),
            ("check Python alloc peak KB", None, "{:.0f}"),
        ):
            get = (lambda c: c["alloc_peak"] / 1024) if key is None else (lambda c, k=key: c[k])
            print(f"  {title}: {fmt.format(get(o))} vs {fmt.format(get(b))} ({get(o) / get(b):.1f}x)")
        kinds = ", ".join(f"{k}: {v[0]} req, {v[1]:,} B out, {v[2]:,} B in" for k, v in sorted(o["kinds"].items()))
        print(f"  requests by API: {kinds}; {o['wall_ms'] / max(o['requests'], 1):.2f} ms per request")
        t, tb = origins["triggers"][m], origins["triggers"][base_n]
        print(
            f"  the DAG's trigger on it in one event loop: {t['connections_hub']} hub connection(s), "
            f"{t['connections_leaves']} leaf connections; RSS growth {t['rss_first_kb']:.0f} KB after the first "
            f"check (vs {tb['rss_first_kb']:.0f}), {t['rss_growth_kb']:.0f} KB over the window "
            f"(vs {tb['rss_growth_kb']:.0f}); {t['checks']:.0f} checks in the window (vs {tb['checks']:.0f})"
        )
        print(
            f"  hub idle CPU: {100 * origins['hub_cpu_before']:.1f}% of a core before, "
            f"{100 * origins['hub_cpu_after']:.1f}% with the {m} sources; hub RSS "
            f"{origins['hub_rss_before'] / 2**20:.0f} -> {origins['hub_rss_after'] / 2**20:.0f} MB"
        )


if __name__ == "__main__":
    main()
