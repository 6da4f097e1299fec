"""Interop with the official JavaScript client: nats.js (npm ``nats`` 2.29, pinned in ``js/``).

``make test`` installs it (``npm ci`` in ``tests/interop/js`` when ``node_modules`` is missing or
the lock changed). Without Node.js, npm or that install, these tests fail and say what to do: they
never skip, since the promise they check (the official clients read what the operators create)
would otherwise go unchecked.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.nats_js import JS_DIR, NatsJs


def _pinned_version() -> str:
    lock = json.loads((JS_DIR / "package-lock.json").read_text())
    return lock["packages"]["node_modules/nats"]["version"]


def _installed_version() -> str | None:
    package = JS_DIR / "node_modules" / "nats" / "package.json"
    return json.loads(package.read_text())["version"] if package.exists() else None


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` binary, with the pinned nats.js installed next to the script; fails otherwise."""
    binary = shutil.which("node") or shutil.which("nodejs")
    if binary is None or shutil.which("npm") is None:
        pytest.fail(
            "tests/interop need Node.js and npm (nats.js, the official JavaScript client, reads what the "
            "operators create): install them (Debian: apt-get install nodejs npm; .ci/run does) and run "
            "`make test`, which runs `npm ci` in tests/interop/js",
            pytrace=False,
        )
    pinned, installed = _pinned_version(), _installed_version()
    if installed != pinned:
        pytest.fail(
            f"tests/interop/js has nats.js {installed or 'not installed'}, the lock pins {pinned}: run `make test` "
            "(or `npm ci` in tests/interop/js)",
            pytrace=False,
        )
    return binary


@pytest.fixture
def nats_js(node: str, hub_leaf: LocalTopology) -> Iterator[NatsJs]:
    """nats.js connected to the shared topology's hub as user ACC."""
    yield NatsJs(node, hub_leaf)
