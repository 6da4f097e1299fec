"""Airflow's web UI in headless Chromium: a real ``airflow api-server`` on loopback and a browser.

Fixtures:
- ``api_server`` (module): ``airflow api-server`` on a free loopback port with this package's sources
  first on its path; every user is an admin (no login page). Yields its base URL.
- ``browser`` (module): Debian's Chromium driven by Playwright; fails (never skips) without one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_jetstream.testing.ports import free_port

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")
# Without the background-networking flags Chromium keeps calling home, which a closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="module")
def api_server(airflow_db: Path) -> Iterator[str]:
    port = free_port()
    # The sources under test first: the api-server is a new process, which would otherwise import the
    # package from wherever the venv's install points.
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True", "PYTHONPATH": path}
    log = open(airflow_db / "api-server.log", "w")  # noqa: SIM115 - closed at teardown
    process = subprocess.Popen(
        [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"api-server did not start: {(airflow_db / 'api-server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def _unavailable(reason: str) -> None:
    """Fail, saying what is missing: a skipped browser test proves nothing."""
    pytest.fail(f"{reason}: install Debian's chromium (.ci/run does, as root, with apt-get)", pytrace=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM:
        _unavailable("Chromium is not installed (Debian: apt-get install chromium); set CHROMIUM_PATH to use another")
    try:
        import playwright.sync_api as playwright_api
    except ImportError:
        _unavailable("playwright is not installed (make install installs it)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
