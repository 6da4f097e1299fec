"""Airflow's UI as a person uses it, for the UI tests: a real ``airflow api-server`` on loopback, headless
Chromium (Debian's, driven by Playwright), and a login token from the simple auth manager."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
#: Where the UI tests put their screenshots (a test artifact of CI).
OUTPUT = REPO / "test-output"


@contextlib.contextmanager
def api_server(home: Path, env: dict[str, str] | None = None, log_name: str = "api-server.log") -> Iterator[str]:
    """``airflow api-server`` on a free loopback port with this process's environment plus ``env``; yields
    its URL once ``/api/v2/monitor/health`` answers, stops it (its whole process group) at the end."""
    port = free_port()
    log_path = home / log_name
    log = open(log_path, "w")  # noqa: SIM115 - closed at the end
    process = subprocess.Popen(
        [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
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
                    pytest.fail(f"api-server did not start: {log_path.read_text()[-2000:]}")
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


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright's ``Browser``)."""
    if not CHROMIUM:
        _unavailable("Chromium is not installed (Debian: apt-get install chromium); set CHROMIUM_PATH to use another")
    try:
        import playwright.sync_api as playwright_api
    except ImportError:
        _unavailable("playwright is not installed (make install installs it)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def login_token(url: str, username: str, password: str) -> str:
    """A JWT from the simple auth manager's ``POST /auth/token`` (what its login form does)."""
    request = urllib.request.Request(
        f"{url}/auth/token",
        data=json.dumps({"username": username, "password": password}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["access_token"]


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    """``GET url`` with a bearer token (or none): the status and the body, errors included."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def open_jetstream_page(browser: Any, url: str, user_token: str, conn_id: str) -> tuple[Any, Any, Any]:
    """The JetStream page inside Airflow's UI, ``conn_id`` chosen and checked as a person does: the browser
    context, the page and the plugin's frame."""
    context = browser.new_context(viewport={"width": 1800, "height": 1400})
    context.add_cookies([{"name": "_token", "value": user_token, "url": url}])
    page = context.new_page()
    page.goto(f"{url}/plugin/jetstream", wait_until="networkidle")
    frame = page.frame_locator("iframe").first
    frame.locator("select[name=conn_id]").select_option(conn_id, timeout=30000)
    frame.get_by_role("button", name="Check").click()
    frame.locator("h2", has_text="Domains").wait_for(timeout=60000)
    return context, page, frame
