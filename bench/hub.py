"""What the single-hub benchmarks share: an Airflow home of their own, and a local hub + leaf whose hub
account ACC is the Airflow connection ``bench``. Import it before Airflow or the provider."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="bench-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

import nats
from nats.aio.client import Client

from airflow_provider_jetstream.testing.servers import USERS, LocalTopology

#: The Airflow connection id of the hub, account ACC.
CONN_ID = "bench"


async def connect(url: str) -> Client:
    """A nats-py client of account ACC on the server at ``url``."""
    user, password = USERS["ACC"]
    return await nats.connect(url, user=user, password=password)


@contextlib.contextmanager
def hub_topology() -> Iterator[LocalTopology]:
    """A hub + leaf in a temporary directory, the connection :data:`CONN_ID` set, warnings off."""
    logging.disable(logging.WARNING)
    user, password = USERS["ACC"]
    with tempfile.TemporaryDirectory() as work, LocalTopology(work) as topology:
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
            {"conn_type": "jetstream", "host": f"127.0.0.1:{topology.hub.port}", "login": user, "password": password}
        )
        yield topology
