"""Airflow's web UI in headless Chromium: a real ``airflow api-server`` on loopback and a browser
(both from :mod:`tests.support.airflow_ui`).

Fixtures:
- ``api_server`` (module): ``airflow api-server`` on a free loopback port with this package's sources
  first on its path; every user is an admin (no login page). Yields its base URL.
- ``browser`` (module): Debian's Chromium driven by Playwright; fails (never skips) without one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.airflow_ui import REPO, chromium
from tests.support.airflow_ui import api_server as start_api_server


@pytest.fixture(scope="module")
def api_server(airflow_db: Path) -> Iterator[str]:
    # The sources under test first: the api-server is a new process, which would otherwise import the
    # package from wherever the venv's install points.
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    with start_api_server(
        airflow_db, {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True", "PYTHONPATH": path}
    ) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser
