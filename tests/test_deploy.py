"""docker-compose.yml is for users with Docker (none runs here): check it statically, and run its configs."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from airflow_provider_jetstream.local.servers import NatsServer

REPO = Path(__file__).resolve().parents[1]


def test_compose_parses_and_every_mounted_file_exists() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        assert ":" in service["image"] and not service["image"].endswith(":latest"), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (REPO / source).exists(), f"{name} mounts missing {source}"


def test_deploy_configs_run_on_a_real_server_with_their_domains(tmp_path) -> None:
    """The hub config starts on a real nats-server with domain 'hub' (ports moved to free ones)."""
    for name in ("hub.conf", "accounts.conf"):
        shutil.copy(REPO / "deploy" / "nats" / name, tmp_path / name)
    body = (tmp_path / "hub.conf").read_text()
    body = (
        "\n".join(line for line in body.splitlines() if not line.startswith(("server_name", "port:", "http:")))
        .replace('"/data/jetstream"', f'"{tmp_path / "store"}"')
        .replace("port: 7422", "port: -1")
    )
    server = NatsServer(name="deploy-hub", workdir=tmp_path, body=body).start()
    try:
        assert server.monitor("jsz")["config"]["domain"] == "hub"
    finally:
        server.stop()
