"""The packaging tests' session fixture: one clean venv with the wheel installed without extras.

It is made on first use and shared by every packaging test of the session; the wheel is the session's
``built_wheel`` (``tests/conftest.py``, shared with the JetStream page's test). Building the wheel and
installing Airflow's dependencies is most of these tests' time. Tests must leave the venv as they
found it (no ``pip install`` into it): ``test_wheel.py`` checks that it holds only what the wheel
declares.
"""

from __future__ import annotations

import pytest

from tests.support.packaging import BuiltWheel, CleanVenv, install_without_extras


@pytest.fixture(scope="session")
def clean_venv(built_wheel: BuiltWheel, tmp_path_factory: pytest.TempPathFactory) -> CleanVenv:
    """A new venv with the wheel and its declared dependencies only (``pip install <wheel>``, no extra)."""
    return install_without_extras(built_wheel.path, tmp_path_factory.mktemp("clean-install"))
