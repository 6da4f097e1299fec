"""Errors of the JetStream provider. Messages name the connection and the field, never a secret.

Plain exceptions (Airflow fails a task on any of them), so Spark executors can import this module
without Airflow.

**Refusals** (:class:`JetStreamRefusalError`) are errors that running the same task again cannot
fix: an invalid argument or spec, a change the server or the reconcile rules refuse, a write the
double-store guard refuses, credentials the server rejects. The operators fail the task at once on
them (Airflow's ``AirflowFailException``), whatever its ``retries``. Everything else (a server
that does not answer, a leaf link that is down) is left to ``retries``.
"""

from __future__ import annotations


class JetStreamError(Exception):
    """Base class of every error this provider raises on purpose."""


class JetStreamRefusalError(JetStreamError):
    """A refusal: the same task, run again with the same arguments, would be refused again.

    Operators turn it into ``AirflowFailException`` (no retries). Subclasses: every
    :class:`JetStreamConfigError` (bad argument or spec, refused reconcile, double store),
    :class:`JetStreamAuthError` and :class:`JetStreamPermissionError`.
    """


class JetStreamConfigError(JetStreamRefusalError, ValueError):
    """A connection field, operator argument or spec is invalid, or the change it asks for is
    refused; nothing was sent to a server, or nothing was changed."""


class JetStreamConnectionError(JetStreamError):
    """No NATS connection could be made: unreachable servers, bad credentials, TLS failure."""


class JetStreamAuthError(JetStreamConnectionError, JetStreamRefusalError):
    """The server refused the credentials (authorization violation): retrying cannot help."""


class JetStreamDomainUnavailableError(JetStreamError):
    """No JetStream answered for the requested domain or API prefix."""


class JetStreamNotFoundError(JetStreamError, LookupError):
    """A stream, consumer or bucket that must exist does not: waiting or retrying cannot help."""


class JetStreamPermissionError(JetStreamRefusalError):
    """The server refused a request this connection's user may not make (a ``Permissions Violation``),
    or the account has no import of the API it addresses: waiting cannot help."""


class JetStreamImportMissingError(JetStreamPermissionError):
    """Nothing answers an imported API prefix (``JS.acc@hub.API``) in this account: the account lacks
    the import of that API subject (or the exporting account's JetStream is down)."""


def is_refusal(error: BaseException) -> bool:
    """True if ``error`` is a refusal (see :class:`JetStreamRefusalError`): fail, do not retry."""
    return isinstance(error, JetStreamRefusalError)
