"""Fixtures for the hook tests: the management tests' raw JetStream access and quiet server."""

from __future__ import annotations

from tests.operators import conftest as management

raw = management.raw
quiet_server = management.quiet_server
quiet_conn = management.quiet_conn
