"""Errors of the JetStream provider. Messages name the connection and the field, never a secret.

Plain exceptions (Airflow fails a task on any of them), so Spark executors can import this module
without Airflow.
"""

from __future__ import annotations


class JetStreamError(Exception):
    """Base class of every error this provider raises on purpose."""


class JetStreamConfigError(JetStreamError, ValueError):
    """A connection field, operator argument or spec is invalid; nothing was sent to a server."""


class JetStreamConnectionError(JetStreamError):
    """No NATS connection could be made: unreachable servers, bad credentials, TLS failure."""


class JetStreamDomainUnavailableError(JetStreamError):
    """No JetStream answered for the requested domain or API prefix."""


class JetStreamNotFoundError(JetStreamError, LookupError):
    """A stream, consumer or bucket that must exist does not: waiting or retrying cannot help."""
