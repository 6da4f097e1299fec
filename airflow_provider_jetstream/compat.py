"""What differs between the Airflow releases the provider supports (3.1 through the newest 3.x), in one place.

Every module takes from here the Airflow names that moved between releases, and asks
:func:`require_airflow` before using a feature that only a newer Airflow has: that feature then fails with
an error naming it and the release it needs, instead of an ``ImportError`` or a silent no-op.
docs/airflow-versions.md lists the features and their releases.
"""

from __future__ import annotations

from airflow import __version__ as AIRFLOW_VERSION_TEXT
from packaging.version import Version

from airflow_provider_jetstream.core.errors import AirflowVersionError

try:  # Airflow >= 3.2: the task SDK's own exceptions and configuration
    from airflow.sdk import conf
    from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException, AirflowSkipException
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf  # type: ignore[no-redef]
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSkipException,
    )

#: The running Airflow's release (its base version: 3.2.0 for 3.2.0rc1).
AIRFLOW_VERSION = Version(Version(AIRFLOW_VERSION_TEXT).base_version)
#: Airflow 3.3+: shared streams for event triggers, the task state store.
AIRFLOW_V_3_3_PLUS = Version("3.3.0") <= AIRFLOW_VERSION


def require_airflow(feature: str, version: str) -> None:
    """Raise :class:`AirflowVersionError` naming ``feature`` unless the running Airflow is at least ``version``.

    :param feature: what was asked for, as the user wrote it (e.g. ``unreachable_timeout with mode="reschedule"``).
    :param version: the oldest Airflow release that has what the feature needs, e.g. ``"3.3"``.
    """
    if Version(version) > AIRFLOW_VERSION:
        raise AirflowVersionError(
            f"{feature} is not allowed on Airflow {AIRFLOW_VERSION_TEXT}: it needs Airflow {version} or newer "
            "(see the provider's docs/airflow-versions.md)"
        )


__all__ = [
    "AIRFLOW_VERSION",
    "AIRFLOW_V_3_3_PLUS",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSkipException",
    "AirflowVersionError",
    "conf",
    "require_airflow",
]
