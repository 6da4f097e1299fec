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


class JetStreamPermissionError(JetStreamError):
    """The server refused a request this connection's user may not make (a ``Permissions Violation``),
    or the account has no import of the API it addresses: waiting cannot help."""


class JetStreamImportMissingError(JetStreamPermissionError):
    """Nothing answers an imported API prefix (``JS.acc@hub.API``) in this account: the account lacks
    the import of that API subject (or the exporting account's JetStream is down)."""
