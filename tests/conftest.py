"""Test harness: real nats-server topologies, Airflow in a temporary home, connections from env vars.

Fixtures:
- ``hub_leaf`` (session): the docs' hub + leaf topology (domains ``hub`` and ``leaf``; accounts
  SYS, ACC, IMPORT_MIRROR, IMPORT_CLIENT) on free loopback ports.
- ``make_topology`` : start another topology for one test (e.g. to cut a leaf off).
- ``jetstream_conn``: register an Airflow connection as ``AIRFLOW_CONN_<ID>`` (JSON form).
- ``hub_conn`` / ``leaf_conn``: connection ids for the ACC user on the hub and on the leaf.
- ``airflow_db`` (session): the SQLite metadata DB, migrated once, for ``dag.test()`` and the CLI.
- ``built_wheel`` (session): the wheel built once from a copy of the working tree (the packaging tests and
  the JetStream page's api-server install it).
  ``dag.test()`` runs DAGs from a bundle: put test DAGs in ``tests/dags/`` (bundle ``test-dags``).
- ``auth_servers`` (session): one server per authentication method (password, token, NKey,
  creds, TLS, mutual TLS), with the material a client needs.
- ``raw``: direct JetStream requests to the shared topology, bypassing the code under test.
- ``api_watch``: every JetStream API request in the hub's account ACC, by client.
- ``quiet_server`` (session) / ``quiet_conn``: a JetStream server nothing else uses, and a connection to it.
- ``spark`` (session): a local SparkSession with the data source registered; ``make_stream``: a
  stream for one Spark test.

Shared helpers (no fixtures) are in ``tests/support/``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

# Airflow reads its configuration when first imported, so its home is set before any import of it.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="jetstream-airflow-home-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(_AIRFLOW_HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        # dag.test() runs only DAGs found in a bundle: the example DAGs, and the tests' own DAGs.
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
            [
                {
                    "name": name,
                    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                    "kwargs": {"path": str(path), "refresh_interval": 0},
                }
                for name, path in (("dags-folder", REPO / "dags"), ("test-dags", REPO / "tests" / "dags"))
            ]
        ),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}",
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }
)

from airflow_provider_jetstream.testing.ports import free_port, share_ports  # noqa: E402
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology, NatsServer  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):  # parallel workers (make test): each starts servers on its own ports
    share_ports(int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
from tests.support.auth import NKey, OperatorSetup, TlsFiles, make_tls, operator_setup  # noqa: E402
from tests.support.management import ApiWatch, QuietServer, Raw  # noqa: E402
from tests.support.packaging import BuiltWheel, build_wheel  # noqa: E402
from tests.support.spark import SparkStream, hub_client, run  # noqa: E402
from tests.support.waiting import TIME_SCALE, scaled  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``JETSTREAM_TEST_TIME_SCALE``, each test's timeout is scaled like the suite's waits."""
    if TIME_SCALE == 1:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = float(marker.args[0]) if marker and marker.args else default
        if seconds:
            item.add_marker(pytest.mark.timeout(scaled(seconds)), append=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Migrate the SQLite metadata DB once per run (``airflow db migrate``)."""
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        capture_output=True,
        env=os.environ.copy(),
    )
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> BuiltWheel:
    """The wheel built from a copy of the working tree, once per session (building it takes seconds)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def hub_leaf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTopology]:
    """The docs' topology: hub (domain ``hub``) and one leaf (domain ``leaf``), linked."""
    with LocalTopology(tmp_path_factory.mktemp("hub_leaf"), leaf_domains=["leaf"]) as topology:
        yield topology


@pytest.fixture
def make_topology(tmp_path: Path) -> Iterator[Callable[..., LocalTopology]]:
    """Start a private topology for one test; every one started is stopped at the end."""
    started: list[LocalTopology] = []

    def make(leaf_domains: list[str] | None = None, hub_domain: str = "hub") -> LocalTopology:
        topology = LocalTopology(tmp_path / f"topology-{len(started)}", hub_domain, leaf_domains or ["leaf"])
        started.append(topology)
        return topology.start()

    yield make
    for topology in started:
        topology.stop()


def conn_json(
    host: str, *, port: int | None = None, login: str | None = None, password: str | None = None, **extra: Any
) -> str:
    """An Airflow connection in JSON form, as ``AIRFLOW_CONN_<ID>`` takes it."""
    body: dict[str, Any] = {"conn_type": "jetstream", "host": host}
    if port:
        body["port"] = port
    if login:
        body["login"] = login
    if password:
        body["password"] = password
    if extra:
        body["extra"] = {k: v for k, v in extra.items() if v is not None}
    return json.dumps(body)


@pytest.fixture
def jetstream_conn(monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Register a connection from keyword fields (host, port, login, password, extra...); return its id."""

    def register(host: str, conn_id: str | None = None, **fields: Any) -> str:
        conn_id = conn_id or f"js_{uuid.uuid4().hex[:10]}"
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", conn_json(host, **fields))
        return conn_id

    return register


def _acc_fields(server: NatsServer, account: str = "ACC") -> dict[str, Any]:
    user, password = USERS[account]
    return {"host": f"127.0.0.1:{server.port}", "login": user, "password": password}


@pytest.fixture(scope="session")
def _hub_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTopology]:
    with LocalTopology(tmp_path_factory.mktemp("hub_cluster"), leaf_domains=["leaf"], hub_nodes=3) as topology:
        yield topology


@pytest.fixture
def hub_cluster(_hub_cluster: LocalTopology) -> Iterator[LocalTopology]:
    """The hub as production runs it: a 3-node JetStream cluster (domain ``hub``) and a leaf (domain
    ``leaf``) whose remotes list every node. A test may kill nodes and cut the leaf: afterwards every
    node is running again and the leaf linked, for the next test."""
    yield _hub_cluster
    for index, node in enumerate(_hub_cluster.hubs):
        if node.process is None or node.process.poll() is not None:
            _hub_cluster.start_hub_node(index)
    for domain in list(_hub_cluster.leaves):
        if domain not in _hub_cluster.linked:
            _hub_cluster.reconnect_leaf(domain)
    _hub_cluster.wait_linked()


@pytest.fixture
def cluster_conn(hub_cluster: LocalTopology, jetstream_conn: Callable[..., str]) -> str:
    """Connection id: user ``acc`` on every node of the hub cluster."""
    user, password = USERS["ACC"]
    return jetstream_conn(hub_cluster.hub_urls, login=user, password=password)


@pytest.fixture
def hub_conn(hub_leaf: LocalTopology, jetstream_conn: Callable[..., str]) -> str:
    """Connection id: user ``acc`` on the hub, no domain set (the hub's own JetStream)."""
    return jetstream_conn(**_acc_fields(hub_leaf.hub))


@pytest.fixture
def leaf_conn(hub_leaf: LocalTopology, jetstream_conn: Callable[..., str]) -> str:
    """Connection id: user ``acc`` on the leaf server."""
    return jetstream_conn(**_acc_fields(hub_leaf.leaves["leaf"]))


@dataclass
class AuthServers:
    password: NatsServer
    token: NatsServer
    nkey: NatsServer
    creds: NatsServer
    tls: NatsServer
    mtls: NatsServer
    tls_first: NatsServer
    token_value: str
    nkey_seed: str
    operator: OperatorSetup
    tls_files: TlsFiles
    other_ca: TlsFiles


@pytest.fixture(scope="session")
def auth_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServers]:
    """One JetStream server per authentication method, each configured only for that method."""
    import nkeys

    work = tmp_path_factory.mktemp("auth")
    token = f"tok-{uuid.uuid4().hex}"
    nkey = NKey.create(nkeys.PREFIX_BYTE_USER)
    operator = operator_setup(work / "store_creds")
    tls = make_tls(work / "tls")
    other_ca = make_tls(work / "other-ca", ca_name="some-other-ca")

    def js(name: str) -> str:
        return f"jetstream {{ store_dir: {json.dumps(str(work / ('store_' + name)))}, domain: {name} }}\n"

    def tls_block(extra: str = "timeout: 2") -> str:
        return (
            f"tls {{ cert_file: {json.dumps(str(tls.cert))}, key_file: {json.dumps(str(tls.key))}, "
            f"ca_file: {json.dumps(str(tls.ca))}, {extra} }}\n"
        )

    user, password = USERS["ACC"]
    servers = {
        "password": js("password") + f"authorization {{ user: {user}, password: {password} }}\n",
        "token": js("token") + f"authorization {{ token: {json.dumps(token)} }}\n",
        "nkey": js("nkey") + f"authorization {{ users: [ {{ nkey: {nkey.public} }} ] }}\n",
        "creds": operator.server_config,
        "tls": js("tls") + tls_block() + f"authorization {{ user: {user}, password: {password} }}\n",
        "mtls": js("mtls") + tls_block("verify: true"),
        "tls_first": js("tlsfirst")
        + tls_block("handshake_first: true")
        + f"authorization {{ user: {user}, password: {password} }}\n",
    }
    started = {name: NatsServer(name=f"{name}-server", workdir=work, body=body) for name, body in servers.items()}
    try:
        for server in started.values():
            server.start()
        yield AuthServers(
            **started, token_value=token, nkey_seed=nkey.seed, operator=operator, tls_files=tls, other_ca=other_ca
        )
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture
def unused_url() -> str:
    """A server URL on a loopback port where nothing listens."""
    return f"nats://127.0.0.1:{free_port()}"


@pytest.fixture
def raw(hub_leaf: LocalTopology) -> Raw:
    """Direct JetStream requests to the shared topology (bypassing the code under test)."""
    return Raw(hub_leaf)


@pytest.fixture
def api_watch(hub_leaf: LocalTopology) -> Iterator[ApiWatch]:
    """An :class:`ApiWatch` on the hub, account ACC (where ``hub_conn`` sends its requests)."""
    with ApiWatch(hub_leaf.hub.url) as watch:
        yield watch


@pytest.fixture(scope="session")
def quiet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuietServer]:
    quiet = QuietServer(tmp_path_factory.mktemp("quiet"))
    quiet.server.start()
    try:
        yield quiet
    finally:
        quiet.server.stop()


@pytest.fixture
def quiet_conn(quiet_server: QuietServer, jetstream_conn: Callable[..., str]) -> str:
    """Connection id: user ``acc`` on the quiet server."""
    user, password = USERS["ACC"]
    return jetstream_conn(host=f"127.0.0.1:{quiet_server.server.port}", login=user, password=password)


@pytest.fixture(scope="session")
def spark(hub_leaf: LocalTopology) -> Iterator[Any]:
    """The session's SparkSession. Its JVM (and so every Python worker) is started with
    ``JETSTREAM_CONNECTION_SECRET`` naming the hub as user ``acc``, as the operator's spark-submit
    would be: the data source's planner processes read the JVM's environment, not this process's.
    """
    from pyspark.sql import SparkSession

    from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
    from airflow_provider_jetstream.spark import register
    from airflow_provider_jetstream.spark.options import connection_env

    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers run this interpreter
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    user, password = USERS["ACC"]
    hub = JetStreamConnectionConfig.from_fields(
        conn_id="tests", host=f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password
    )
    os.environ.update(connection_env(hub))

    session = (
        SparkSession.builder.master("local[2]")
        .appName("jetstream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines at exit hit closed capture streams
    register(session)
    yield session
    session.stop()


@pytest.fixture
def make_stream(hub_leaf: LocalTopology) -> Iterator[Callable[..., SparkStream]]:
    """Create a stream (default in the leaf domain) with subjects ``<prefix>.>``; deleted after the test."""
    made: list[SparkStream] = []

    def make(domain: str = "leaf", **config: Any) -> SparkStream:
        from nats.js.api import StreamConfig

        uid = uuid.uuid4().hex[:8]
        stream = SparkStream(f"spark_{uid}", domain, f"spark_{uid}", hub_leaf)

        async def create() -> None:
            nc = await hub_client(hub_leaf)
            try:
                js = nc.jetstream(domain=domain)
                await js.add_stream(StreamConfig(name=stream.name, subjects=[f"{stream.prefix}.>"], **config))
            finally:
                await nc.close()

        run(create())
        made.append(stream)
        return stream

    yield make

    async def delete() -> None:
        nc = await hub_client(hub_leaf)
        try:
            for stream in made:
                with contextlib.suppress(Exception):
                    await nc.jetstream(domain=stream.domain).delete_stream(stream.name)
        finally:
            await nc.close()

    run(delete())
