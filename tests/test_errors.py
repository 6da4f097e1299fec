"""The exception hierarchy of core/errors.py: every exception class of the package is defined there,
and each is a refusal (fail the task at once) or not (left to retries) as its docstring says."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import airflow_provider_jetstream
from airflow_provider_jetstream.core import errors
from airflow_provider_jetstream.core.errors import JetStreamError, is_refusal

#: Every exception class of the package, and whether it is a refusal (True) or left to retries (False).
#: None: outside the JetStreamError tree (never reaches a task as such).
REFUSAL = {
    "JetStreamError": False,
    "JetStreamRefusalError": True,
    "JetStreamConfigError": True,
    "AirflowVersionError": True,
    "SpecError": True,
    "SpecErrors": True,
    "UnsafeSubjectError": True,
    "ReconcileError": True,
    "UnknownOriginDomainError": True,
    "DoubleStoreError": True,
    "DoubleStoreUnverifiedError": True,
    "JetStreamAuthError": True,
    "JetStreamPermissionError": True,
    "JetStreamImportMissingError": True,
    "KeyValueConflictError": True,
    "JetStreamConnectionError": False,
    "JetStreamDomainUnavailableError": False,
    "JetStreamTimeoutError": False,
    "JetStreamNoLeaderError": False,
    "DoubleStoreUnreachableError": False,
    "JetStreamNotFoundError": True,
    "JetStreamApiError": False,
    "JetStreamPublishError": False,
    "JetStreamAckError": False,
    "ConsumerDeletedError": True,
    "KeyValueError": False,
    "ObjectStoreError": False,
    "ObjectDigestError": False,
    "JetStreamReplicationError": True,
    "JetStreamDataLossError": False,
    "StreamRecreatedError": True,
    "WindowOpenError": False,
    "CheckpointConflictError": False,
    "TlsNotStartedError": None,
    "NatsServerError": None,
}


def package_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined (not imported) by a module of the package."""
    found: dict[str, type[BaseException]] = {}
    prefix = airflow_provider_jetstream.__name__ + "."
    for info in pkgutil.walk_packages(airflow_provider_jetstream.__path__, prefix):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_exception_class_lives_in_core_errors() -> None:
    found = package_exceptions()
    elsewhere = sorted(name for name, cls in found.items() if cls.__module__ != errors.__name__)
    assert elsewhere == []
    assert sorted(cls.__name__ for cls in found.values()) == sorted(REFUSAL)


@pytest.mark.parametrize("name", sorted(REFUSAL))
def test_each_exception_is_a_refusal_or_not_as_documented(name: str) -> None:
    cls = getattr(errors, name)
    refusal = REFUSAL[name]
    assert issubclass(cls, JetStreamError) is (refusal is not None)
    if refusal is not None:
        assert issubclass(cls, errors.JetStreamRefusalError) is refusal
        error = cls.__new__(cls)
        assert is_refusal(error) is refusal
    # The module docstring's hierarchy names every class.
    assert name in errors.__doc__


def test_a_503_answer_of_the_jetstream_api_is_waited_for_other_api_errors_are_retried() -> None:
    """A cluster electing a leader answers "JetStream system temporarily unavailable" (code 503): nobody
    can answer now, as with a timeout; any other error answer is an attempt that failed."""
    unavailable = errors.JetStreamApiError(
        "$JS.API.INFO", {"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}, "x"
    )
    refused = errors.JetStreamApiError("$JS.API.INFO", {"code": 500, "err_code": 10074, "description": "no"}, "x")
    assert errors.disposition(unavailable) == errors.WAIT
    assert errors.disposition(refused) == errors.RETRY
