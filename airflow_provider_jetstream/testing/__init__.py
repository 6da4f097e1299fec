"""Testing utilities for users' own DAG tests: real ``nats-server`` processes on loopback (a hub with leaf domains).

``from airflow_provider_jetstream.testing import LocalTopology``; never used by a deployed provider.
"""

from airflow_provider_jetstream.testing.servers import USERS, LocalTopology

__all__ = ["USERS", "LocalTopology"]
