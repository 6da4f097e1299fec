"""docker-compose.yml and deploy/: checked statically (no Docker engine runs here), and the NATS configs
run for real on local servers with only their ports and store paths moved."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from airflow.sdk import Connection

from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.testing.servers import LocalTopology, NatsServer, accounts_config

REPO = Path(__file__).resolve().parents[1]
NATS_DIR = REPO / "deploy" / "nats"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def nats_services(compose: dict) -> dict[str, Path]:
    """Service name -> the deploy config it runs (from its `-c` argument and volumes)."""
    found = {}
    for name, service in compose["services"].items():
        if name.startswith("nats-"):
            config_in_container = service["command"][service["command"].index("-c") + 1]
            (mount,) = [v for v in service["volumes"] if v.split(":")[1] == config_in_container]
            found[name] = REPO / mount.split(":")[0]
    return found


def config_value(text: str, key: str) -> str:
    match = re.search(rf"^\s*{key}\s*[:=]\s*\"?([^\s\"]+)\"?", text, re.MULTILINE)
    assert match, f"no {key} in config"
    return match.group(1)


def test_every_image_is_pinned_and_every_file_it_needs_exists(compose: dict) -> None:
    for name, service in compose["services"].items():
        if "build" in service:
            dockerfile = REPO / service["build"]["context"] / service["build"]["dockerfile"]
            assert dockerfile.exists(), name
            for line in dockerfile.read_text().splitlines():
                if line.startswith("FROM "):
                    image = line.split()[1]
                    assert re.search(r":\d+\.\d+", image), f"{name}: base image {image} is not pinned"
                if line.startswith("COPY "):
                    for source in [p for p in line.split()[1:-1] if not p.startswith("--")]:
                        assert (REPO / source).exists(), f"{name}: COPY {source} is missing"
        else:
            image = service["image"]
            assert re.search(r":\d+\.\d+", image), f"{name}: image {image} is not pinned"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (REPO / source).exists(), f"{name} mounts missing {source}"
        assert "healthcheck" in service or name in ("airflow-init", "spark-worker"), f"{name} has no healthcheck"


def test_nats_services_run_their_own_domain_and_leaves_point_at_the_hub(compose: dict) -> None:
    services = nats_services(compose)
    assert set(services) == {"nats-hub", "nats-leaf-a", "nats-leaf-b"}
    hub_text = services["nats-hub"].read_text()
    assert config_value(hub_text, "domain") == "hub"
    leafnode_port = re.search(r"leafnodes\s*\{\s*port:\s*(\d+)", hub_text).group(1)
    for name in ("nats-leaf-a", "nats-leaf-b"):
        text = services[name].read_text()
        assert config_value(text, "domain") == name.removeprefix("nats-")
        remotes = re.findall(r"nats-leaf://(\w+):(\w+)@([\w-]+):(\d+)", text)
        assert {(host, port) for *_, host, port in remotes} == {("nats-hub", leafnode_port)}


def test_accounts_conf_is_the_tested_topologys() -> None:
    """The deployed accounts are exactly the ones the test suite runs against (no drift)."""
    deployed = (NATS_DIR / "accounts.conf").read_text()
    body = "\n".join(line for line in deployed.splitlines() if not line.startswith("#"))
    assert body.strip() == accounts_config("hub").strip()


def test_airflow_connections_agree_with_the_servers(compose: dict) -> None:
    env = compose["x-airflow"]["environment"]
    conn = Connection.from_uri(env["AIRFLOW_CONN_NATS_HUB"], conn_id="nats_hub")
    config = JetStreamConnectionConfig.from_connection(conn)
    hub_text = (NATS_DIR / "hub.conf").read_text()
    assert config.servers == [f"nats://nats-hub:{config_value(hub_text, 'port')}"]
    assert config.domain == config_value(hub_text, "domain")
    assert f"{{user: {config.user}, password: {config.password}}}" in (NATS_DIR / "accounts.conf").read_text()
    spark = yaml.safe_load(env["AIRFLOW_CONN_SPARK_CLUSTER"])
    assert f"{spark['port']}:{spark['port']}" in compose["services"]["spark-master"]["ports"]


def test_spark_image_matches_the_pinned_pyspark() -> None:
    pyspark = re.search(r'"pyspark==([\d.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    base = re.search(r"^FROM apache/spark:([\d.]+)", (REPO / "deploy/spark/Dockerfile").read_text(), re.MULTILINE)
    assert base.group(1) == pyspark


def test_spark_image_installs_what_the_executors_import() -> None:
    """The package goes into the Spark image with ``--no-deps``: the image must name what the data source
    imports on executors, nats-py, and the vectorised reader's pyarrow and numpy (the spark extra's)."""
    text = (REPO / "deploy/spark/Dockerfile").read_text().replace("\\\n", " ")
    named = set()
    for line in text.splitlines():
        if line.startswith("RUN "):
            for command in line[4:].split("&&"):
                words = command.split()
                if words[:2] == ["pip", "install"]:
                    packages = [w.strip("\"'") for w in words[2:] if not w.startswith(("-", "/"))]
                    named |= {re.split(r"[\[=<>]", package)[0] for package in packages}
    assert {"nats-py", "pyarrow", "numpy"} <= named, named


def test_deploy_configs_link_on_real_servers(tmp_path: Path) -> None:
    """hub.conf, leaf-a.conf and leaf-b.conf, ports and paths moved, form the linked topology."""
    shutil.copy(NATS_DIR / "accounts.conf", tmp_path / "accounts.conf")
    topology = LocalTopology(tmp_path, leaf_domains=["leaf-a", "leaf-b"])  # for its free ports and readiness

    def local(name: str, leafnode_port: int) -> str:
        text = (NATS_DIR / name).read_text()
        text = "\n".join(line for line in text.splitlines() if not re.match(r"(server_name|port|http):", line))
        text = text.replace('"/data/jetstream"', f'"{tmp_path / name}-store"')
        text = re.sub(r"leafnodes \{\s*port: \d+\s*\}", f'leafnodes {{ listen: "127.0.0.1:{leafnode_port}" }}', text)
        return text.replace("@nats-hub:7422", f"@127.0.0.1:{leafnode_port}")

    servers: list[NatsServer] = [topology.hub, *topology.leaves.values()]
    for server, name in zip(servers, ("hub.conf", "leaf-a.conf", "leaf-b.conf"), strict=True):
        server.body = local(name, topology.leafnode_port)
    try:
        topology.start()
        domains = {s.name: s.monitor("jsz")["config"]["domain"] for s in servers}
        assert domains == {"hub-server": "hub", "leaf-a-server": "leaf-a", "leaf-b-server": "leaf-b"}
    finally:
        topology.stop()


def test_dag_defaults_match_the_stack(compose: dict) -> None:
    """The example DAGs' defaults (connections, domains) are what docker-compose.yml provides."""
    import sys

    sys.path.insert(0, str(REPO / "dags"))
    import edge_pipeline_config as cfg

    env = compose["x-airflow"]["environment"]
    assert f"AIRFLOW_CONN_{cfg.NATS_CONN_ID.upper()}" in env
    hub = Connection.from_uri(env[f"AIRFLOW_CONN_{cfg.NATS_CONN_ID.upper()}"], conn_id=cfg.NATS_CONN_ID)
    assert hub.extra_dejson["domain"] == cfg.HUB_DOMAIN
    leaves = {name.removeprefix("nats-") for name in nats_services(compose) if name != "nats-hub"}
    assert leaves == set(cfg.LEAF_DOMAINS)
    assert env["JETSTREAM_OUTPUT_DIR"] == cfg.OUTPUT_DIR
    # The Spark connection the DAGs use in the stack is the cluster's.
    assert env.get("JETSTREAM_SPARK_CONN_ID") == "spark_cluster" and "AIRFLOW_CONN_SPARK_CLUSTER" in env


#: The Python of each base image (read from the images' documentation, not run here): the official Airflow
#: image names it in its tag; apache/spark's python3 images are Ubuntu 22.04's Python 3.10 at /usr/bin/python3.
IMAGE_PYTHON = {"apache/airflow": ("3.10", "/usr/local/bin/python"), "apache/spark": ("3.10", "/usr/bin/python3")}
#: The Python minor of an apache/spark tag's suffix: its ``-python3`` images are built on Ubuntu 22.04 (jammy).
SPARK_TAG_PYTHON = {"python3": "3.10"}


def dockerfile(compose: dict, service: str) -> str:
    build = compose["services"][service]["build"]
    return (REPO / build["context"] / build["dockerfile"]).read_text()


def image_python(compose: dict, service: str) -> str:
    """The Python minor (``3.10``) of the image a service builds, read from its Dockerfile's ``FROM``: the
    Airflow image's tag names it (``3.3.2-python3.10``); a Spark image's tag suffix names its Ubuntu's."""
    image, tag = re.search(r"^FROM ([^:\s]+):(\S+)", dockerfile(compose, service), re.MULTILINE).groups()
    if image == "apache/airflow":
        return re.fullmatch(r"[\d.]+-python(3\.\d+)", tag).group(1)
    assert image == "apache/spark", image
    return SPARK_TAG_PYTHON[tag.split("-", 1)[1]]


def test_the_spark_driver_and_its_workers_run_one_python(compose: dict) -> None:
    """PySpark refuses a driver and workers of different Python minor versions: the driver runs in the Airflow
    image (the submit operator, a task's own SparkSession), the Python workers in the Spark image. Every image a
    service builds runs the same minor, the one the images' table records."""
    built = [name for name, service in compose["services"].items() if "build" in service]
    assert {name.split("-")[0] for name in built} == {"airflow", "spark"}, built
    minors = {name: image_python(compose, name) for name in built}
    assert len(set(minors.values())) == 1, minors
    assert {version for version, _ in IMAGE_PYTHON.values()} == set(minors.values())


def test_compose_file_follows_the_compose_spec(compose: dict) -> None:
    """The compose-spec JSON schema (vendored, Apache-2.0, from the compose-spec repository at 170098ba) as
    ``docker compose config`` applies it, plus what the schema cannot see: every service and volume named exists."""
    import jsonschema

    schema = json.loads((REPO / "tests/support/compose/compose-spec.json").read_text())
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(compose)]
    assert errors == []
    services, volumes = set(compose["services"]), set(compose["volumes"])
    for name, service in compose["services"].items():
        assert set(service.get("depends_on", {})) <= services, name
        named = {v.split(":")[0] for v in service.get("volumes", []) if not v.startswith(("./", "/"))}
        assert named <= volumes, name


def test_login_is_the_one_the_header_names(compose: dict) -> None:
    env = compose["x-airflow"]["environment"]
    users = dict(entry.split(":")[:2] for entry in env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(","))
    in_container = env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
    for name, service in compose["services"].items():
        if name.startswith("airflow-"):
            (mount,) = [v for v in service["volumes"] if v.split(":")[1] == in_container]
            passwords = json.loads((REPO / mount.split(":")[0]).read_text())
    assert set(passwords) == set(users)  # every user has a known password: none is generated
    header = (REPO / "docker-compose.yml").read_text().split("\nx-airflow")[0]
    for user, password in passwords.items():
        assert f"log in as {user} / {password}" in header.replace("\n# ", " ")


def test_healthchecks_call_what_each_service_serves(compose: dict) -> None:
    services = compose["services"]
    scheduler_env = services["airflow-scheduler"]["environment"]
    assert "8974" in " ".join(services["airflow-scheduler"]["healthcheck"]["test"])
    assert str(scheduler_env["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"]).lower() == "true"
    assert "8080" in " ".join(services["airflow-apiserver"]["healthcheck"]["test"])
    assert "8080:8080" in services["airflow-apiserver"]["ports"]


def test_images_install_with_the_constraints_of_their_python(compose: dict) -> None:
    """Each image installs with the constraints file ``make`` picks for its Python: ``constraints-py<X.Y>.txt``
    where there is one, else ``constraints.txt`` (Python 3.11+)."""
    for service in ("airflow-apiserver", "spark-master"):
        text = dockerfile(compose, service)
        version = image_python(compose, service)
        specific = REPO / f"constraints-py{version}.txt"
        expected = specific.name if specific.exists() else "constraints.txt"
        used = set(re.findall(r"-c /opt/provider/(\S+)", text))
        assert used == {expected}, (service, used)
        assert (REPO / expected).exists()


def test_spark_executors_run_the_spark_images_python(compose: dict) -> None:
    """The submit operator passes ``PYSPARK_PYTHON`` on from its environment: it names the interpreter of the
    Spark image (where its Dockerfile installed the package), not the Airflow image's own."""
    env = compose["x-airflow"]["environment"]
    assert env["PYSPARK_PYTHON"] == IMAGE_PYTHON["apache/spark"][1]
    assert env["PYSPARK_PYTHON"] != IMAGE_PYTHON["apache/airflow"][1]
    assert "ENV PYSPARK_PYTHON" not in dockerfile(compose, "spark-master")  # the image does not point elsewhere


def test_every_jetstream_variable_is_one_the_dags_read(compose: dict) -> None:
    read = set(re.findall(r"\b(JETSTREAM_[A-Z_]+)\b", "".join(p.read_text() for p in (REPO / "dags").glob("*.py"))))
    given = {key for key in compose["x-airflow"]["environment"] if key.startswith("JETSTREAM_")}
    assert given <= read, given - read
    spark_conn = compose["x-airflow"]["environment"]["JETSTREAM_SPARK_CONN_ID"]
    assert f"AIRFLOW_CONN_{spark_conn.upper()}" in compose["x-airflow"]["environment"]
