"""`make demo`: the edge-to-hub pipeline on a local hub + two leaves, run by Airflow, with Spark.

1. starts real nats-server processes under .demo/ (a hub, domain `hub`; leaves `leaf-a` and
   `leaf-b`, each its own JetStream domain), keeping their stores between runs;
2. an edge process on each leaf publishes new sensor readings to its local stream;
3. runs the `jetstream_edge_to_hub` DAG with `airflow dags test` on a SQLite metadata DB;
4. prints what each domain holds, the replication report, the rows written and the checkpoint.

A second run processes only the readings published since the first. Servers stop on exit,
Ctrl-C and failures included.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("JETSTREAM_DEMO_DIR", REPO / ".demo"))
sys.path.insert(0, str(REPO / "dags"))

import edge_pipeline_config as cfg  # noqa: E402

from airflow_provider_jetstream.testing.servers import USERS, LocalTopology  # noqa: E402

READINGS_PER_LEAF = int(os.environ.get("DEMO_READINGS_PER_LEAF", "5000"))
SENSORS = ["temp", "humidity", "pressure", "vibration"]
# Acks awaited per window, below nats-py's limit of pending async publishes: waiting on that limit turns a
# Ctrl-C into TooManyStalledMsgsError instead of KeyboardInterrupt.
PUBLISH_WINDOW = 1000


def airflow_env(topology: LocalTopology) -> dict[str, str]:
    user, password = USERS["ACC"]
    home = WORK / "airflow"
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        f"AIRFLOW_CONN_{cfg.NATS_CONN_ID.upper()}": json.dumps(
            {"conn_type": "jetstream", "host": f"127.0.0.1:{topology.hub.port}", "login": user,
             "password": password, "extra": {"domain": cfg.HUB_DOMAIN, "client_name": "airflow-demo"}}
        ),
        f"AIRFLOW_CONN_{cfg.SPARK_CONN_ID.upper()}": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "JETSTREAM_OUTPUT_DIR": str(WORK / "output"),
        "JETSTREAM_LEAF_DOMAINS": ",".join(cfg.LEAF_DOMAINS),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }  # fmt: skip


async def publish_edge_readings(topology: LocalTopology) -> dict[str, int]:
    """Each edge process publishes to its own leaf server, as an edge app would (no hub needed)."""
    import nats

    from airflow_provider_jetstream.core.api import JetStreamApi
    from airflow_provider_jetstream.core.manage.reconcile import reconcile_stream
    from airflow_provider_jetstream.core.manage.specs import StreamSpec

    published = {}
    for leaf in cfg.LEAF_DOMAINS:
        nc = await nats.connect(topology.url(leaf))
        try:
            # The edge owns its local stream; the DAG's reconcile of the same spec finds it unchanged.
            await reconcile_stream(JetStreamApi(nc), StreamSpec.from_dict(cfg.leaf_stream_spec(leaf)))
            js = nc.jetstream()
            now = dt.datetime.now(dt.timezone.utc)
            rng = random.Random(f"{leaf}-{now.isoformat()}")
            acks = []
            for i in range(READINGS_PER_LEAF):
                sensor = SENSORS[i % len(SENSORS)]
                reading = {
                    "site": leaf,
                    "sensor": f"{sensor}-{i % 3}",
                    "ts": (now - dt.timedelta(seconds=READINGS_PER_LEAF - i)).isoformat(),
                    "value": round(rng.gauss(20.0, 3.0), 2),
                }
                acks.append(await js.publish_async(f"sensors.{leaf}.{sensor}", json.dumps(reading).encode()))
                if len(acks) == PUBLISH_WINDOW:
                    await asyncio.gather(*acks)
                    acks.clear()
            await asyncio.gather(*acks)
            published[leaf] = READINGS_PER_LEAF
        finally:
            await nc.drain()
    return published


async def summary(topology: LocalTopology) -> list[str]:
    import nats

    from airflow_provider_jetstream.core.api import JetStreamApi
    from airflow_provider_jetstream.core.status.replication import ReplicationWatch, check_replication

    lines = []
    nc = await nats.connect(topology.url())
    try:
        for domain in topology.domains:
            api = JetStreamApi(nc, f"$JS.{domain}.API")
            streams = sorted(
                (await api.request("STREAM.LIST", {})).get("streams") or [], key=lambda s: s["config"]["name"]
            )
            listed = ", ".join(f"{s['config']['name']} ({s['state']['messages']})" for s in streams)
            lines.append(f"  {domain:7} {listed}")
        hub = JetStreamApi(nc, f"$JS.{cfg.HUB_DOMAIN}.API")
        # The exact check the pipeline's sensor makes: each origin asked for its last sequence in its own domain.
        watch = ReplicationWatch(stream=cfg.AGGREGATE_STREAM, max_inactive=30)
        lines += ["", (await check_replication(nc, hub, watch)).table()]
        kv = await nc.jetstream(domain=cfg.HUB_DOMAIN).key_value(cfg.PIPELINE_BUCKET)
        checkpoint = await kv.get(cfg.CHECKPOINT_KEY)
        lines += ["", f"  checkpoint {cfg.PIPELINE_BUCKET}/{cfg.CHECKPOINT_KEY} (revision {checkpoint.revision}): "
                      f"{checkpoint.value.decode()}"]  # fmt: skip
    finally:
        await nc.close()
    return lines


def parquet_rows(path: Path) -> int:
    import pyarrow.dataset as ds

    return ds.dataset(path, format="parquet", partitioning="hive").count_rows() if path.exists() else 0


def main() -> int:
    started = time.monotonic()
    WORK.mkdir(exist_ok=True)
    output = WORK / "output" / "readings"
    rows_before = parquet_rows(output)
    print(f"starting a hub and leaves {', '.join(cfg.LEAF_DOMAINS)} under {WORK / 'nats'} ...", flush=True)
    with LocalTopology(WORK / "nats", hub_domain=cfg.HUB_DOMAIN, leaf_domains=cfg.LEAF_DOMAINS) as topology:
        published = asyncio.run(publish_edge_readings(topology))
        print(f"edge processes published {', '.join(f'{n} readings on {leaf}' for leaf, n in published.items())}")
        env = airflow_env(topology)
        airflow = str(Path(sys.executable).parent / "airflow")
        subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
        log = WORK / "airflow-dags-test.log"
        print(f"running DAG jetstream_edge_to_hub with `airflow dags test` (log: .demo/{log.name}) ...")
        with log.open("w") as out:
            run = subprocess.run([airflow, "dags", "test", "jetstream_edge_to_hub"], env=env, stdout=out,
                                 stderr=subprocess.STDOUT)  # fmt: skip
        if run.returncode != 0:
            print(log.read_text()[-4000:])
            print("the DAG run failed; servers stopped")
            return 1
        print("\nstreams per domain (messages):")
        print("\n".join(asyncio.run(summary(topology))))
    rows_after = parquet_rows(output)
    print(f"\n  Parquet rows: {rows_after} in .demo/output/readings ({rows_after - rows_before} written by this run)")
    print(f"\ndone in {time.monotonic() - started:.0f}s; servers stopped. Run it again: only new data is processed.")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted; servers stopped")
        sys.exit(130)
