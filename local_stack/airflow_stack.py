"""The stack's Airflow: its processes and their configuration (database, auth, secrets), and its REST
API (connections, DAGs, health), used by :mod:`.stack`."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from airflow_provider_jetstream.testing.ports import LOOPBACK, free_port
from local_stack.processes import ManagedProcess, StackError, stop_together, tail, wait_until

#: The one user of the stack's Airflow (simple auth manager).
ADMIN_USER = "admin"


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
            # A task's calls to the Execution API wait 30 s, not 5: on a busy machine (everything on one) the
            # api-server can take longer, and a task whose start call times out fails before it runs.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
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
            raise StackError(f"airflow db migrate failed; end of {log}:\n{tail(log)}")

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
        # The API server last: the scheduler's LocalExecutor workers (and their spark-submit children) and the
        # triggerer report to it as they stop.
        for components in (("scheduler", "triggerer", "dag-processor"), ("api-server",)):
            stop_together([self.processes.pop(c) for c in components if c in self.processes])
