"""The packaging tests' session fixtures: the wheel, built once, and one clean venv with it installed without extras.

Both are made on first use and shared by every packaging test of the session: building the wheel and
installing Airflow's dependencies is most of these tests' time. Tests must leave the venv as they
found it (no ``pip install`` into it): ``test_wheel.py`` checks that it holds only what the wheel
declares.
"""

from __future__ import annotations

import pytest

from tests.packaging.install import BuiltWheel, CleanVenv, build_wheel, install_without_extras


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> BuiltWheel:
    """The wheel built from a copy of the working tree."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def clean_venv(built_wheel: BuiltWheel, tmp_path_factory: pytest.TempPathFactory) -> CleanVenv:
    """A new venv with the wheel and its declared dependencies only (``pip install <wheel>``, no extra)."""
    return install_without_extras(built_wheel.path, tmp_path_factory.mktemp("clean-install"))
