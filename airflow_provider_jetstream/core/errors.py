"""Every exception the JetStream provider defines. Messages name the connection and the field, never a secret.

Plain exceptions (Airflow fails a task on any of them), so Spark executors can import this module
without Airflow.

Every error is one of three kinds, and :func:`disposition` tells which: the one classification the
operators, the sensors and the triggers all act on.

- :data:`REFUSE`: asking again cannot help (:class:`JetStreamRefusalError`, tree below). Operators
  fail the task at once (Airflow's ``AirflowFailException``), whatever its ``retries``; sensors and
  triggers fail at once too (a sensor with ``soft_fail`` is skipped).
- :data:`WAIT`: nobody answered now (:class:`JetStreamDomainUnavailableError`, and nats-py's
  timeouts, no responders, 503 and reconnecting errors, and a JetStream API answer with code 503,
  "JetStream system temporarily unavailable"): a leaf link down, a hub node away, a leader being
  elected. Sensors and triggers keep waiting (up to their ``unreachable_timeout``); operators
  raise it, so Airflow's ``retries`` apply.
- :data:`RETRY`: anything else (a connection that could not be made, a write not stored, an API
  error, data loss): this attempt failed, and Airflow's ``retries`` apply, for sensors too.

**Refusals** (:class:`JetStreamRefusalError`) are errors that running the same task again cannot
fix::

    JetStreamRefusalError
    ├── JetStreamConfigError (also ValueError)   a bad connection field, argument or spec
    │   ├── SpecError, SpecErrors                one or several invalid fields of a spec or arguments
    │   │   └── UnsafeSubjectError               a delivery subject that is not literal, or reserved
    │   ├── ReconcileError                       a change the reconcile rules refuse
    │   │   └── UnknownOriginDomainError         a copy of an origin domain that does not answer and was never seen
    │   ├── DoubleStoreError                     a write that two connected domains would store
    │   │   └── DoubleStoreUnverifiedError       a domain answered the check with an error
    │   └── AirflowVersionError                  a feature asked for on an Airflow release that lacks it
    ├── JetStreamAuthError (also JetStreamConnectionError)   the server rejected the credentials
    ├── JetStreamPermissionError                 a Permissions Violation: the user may not ask
    │   └── JetStreamImportMissingError          the account has no import of that API
    ├── JetStreamNotFoundError (also LookupError)   a stream, consumer or bucket that must exist is not there
    │   └── ConsumerDeletedError (also JetStreamAckError)   a settle's consumer (or stream) was deleted
    ├── JetStreamReplicationError                an origin reports a replication error beyond the grace period
    ├── StreamRecreatedError (also JetStreamDataLossError)   a kept position names another stream of that name
    └── KeyValueConflictError (also KeyValueError)   compare-and-set failed

**Everything else** is to wait for (:data:`WAIT`: the first branch below) or left to ``retries``
(:data:`RETRY`)::

    JetStreamError
    ├── JetStreamDomainUnavailableError          no JetStream answered in a domain or API prefix
    │   ├── JetStreamTimeoutError                a request got no answer in time (and no refusal)
    │   ├── JetStreamNoLeaderError               a clustered JetStream has no leader now (a node down, an election)
    │   └── DoubleStoreUnreachableError          a domain the double-store check must ask is down
    ├── JetStreamConnectionError                 no NATS connection (unreachable, TLS failure)
    ├── JetStreamApiError                        the JetStream API answered with an error
    ├── JetStreamPublishError                    some messages were not stored (where aimed)
    ├── JetStreamAckError                        a consumer did not confirm a settle (ack, nak, term) of a message
    ├── KeyValueError                            a KV write landed somewhere unexpected
    ├── ObjectStoreError                         an object write not stored where aimed, or an object read cut short
    │   └── ObjectDigestError                    an object read whole does not match its size or SHA-256 digest
    ├── JetStreamDataLossError                   sequences of a range are gone (Spark read path)
    ├── WindowOpenError                          a time window that messages may still reach (Spark read path)
    └── CheckpointConflictError                  another run moved the Spark job's checkpoint

Outside this tree: :class:`TlsNotStartedError` (a nats-py error the TLS-only transport raises
inside nats-py; :mod:`.connection.client` turns it into a :class:`JetStreamConnectionError`), and the test
topology's :class:`NatsServerError` (``RuntimeError``; never raised by a task), and the ``ImportError`` of
:func:`require_extra` (the optional ``spark`` extra missing where a module needs it).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import nats.errors
import nats.js.errors


class JetStreamError(Exception):
    """Base class of every error this provider raises on purpose."""


#: Asking again cannot help: fail at once, without retries.
REFUSE = "refuse"
#: Nobody answered now: wait (sensors, triggers) or retry later (operators).
WAIT = "wait"
#: The code of a JetStream API answer saying nothing can serve the request now (no leader yet).
UNAVAILABLE = 503
#: This attempt failed: Airflow's retries apply.
RETRY = "retry"

#: nats-py's errors that mean "nobody answered now" (the 503 a JetStream API request gets when no server
#: answers, a request timeout, a connection being re-established). A closed connection (reconnect
#: attempts exhausted) is not one: it is a :data:`RETRY`.
_NO_ANSWER_NOW: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
)


def disposition(error: BaseException) -> str:
    """:data:`REFUSE`, :data:`WAIT` or :data:`RETRY`: what to do about ``error`` (see the module doc)."""
    if isinstance(error, JetStreamRefusalError):
        return REFUSE
    if isinstance(error, (JetStreamDomainUnavailableError, *_NO_ANSWER_NOW)):
        return WAIT
    if isinstance(error, JetStreamApiError) and getattr(error, "code", None) == UNAVAILABLE:
        return WAIT
    return RETRY


def is_refusal(error: BaseException) -> bool:
    """True if ``error`` is a refusal (:data:`REFUSE`): fail, do not retry."""
    return disposition(error) == REFUSE


# -- refusals: fail the task at once ------------------------------------------------------------------


class JetStreamRefusalError(JetStreamError):
    """A refusal: the same task, run again with the same arguments, would be refused again.

    Operators turn it into ``AirflowFailException`` (no retries). Subclasses: every
    :class:`JetStreamConfigError` (bad argument or spec, refused reconcile, double store),
    :class:`JetStreamAuthError`, :class:`JetStreamPermissionError`, :class:`JetStreamNotFoundError`,
    :class:`JetStreamReplicationError` and :class:`KeyValueConflictError`.
    """


class JetStreamConfigError(JetStreamRefusalError, ValueError):
    """A connection field, operator argument or spec is invalid, or the change it asks for is
    refused; nothing was sent to a server, or nothing was changed."""


class AirflowVersionError(JetStreamConfigError):
    """A feature of the provider was asked for on an Airflow release that lacks what it needs (a refusal:
    retrying cannot help)."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class SpecError(JetStreamConfigError):
    """One invalid field of a spec, or argument; nothing was sent to a server.

    ``str(err)`` reads ``stream.max_msgs=-5 is not allowed: use an integer >= -1 (-1: unlimited)``:
    the field, its value, the problem (``problem``, by default "is not allowed") and what is allowed.
    """

    def __init__(
        self,
        path: str,
        value: Any = None,
        allowed: str = "",
        *,
        message: str | None = None,
        problem: str = "is not allowed",
    ) -> None:
        self.path = path
        self.value = value
        self.allowed = allowed
        super().__init__(message or f"{path}={_show(value)} {problem}: {allowed}")

    @property
    def errors(self) -> list[SpecError]:
        """This one refusal, as :class:`SpecErrors` holds its own: code collecting refusals takes both alike."""
        return [self]


class SpecErrors(JetStreamConfigError):
    """Several invalid fields of one spec, all reported at once (one per line)."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = errors
        lines = [str(e) for e in errors]
        head = f"{len(errors)} invalid fields:\n  " if len(errors) > 1 else ""
        super().__init__(head + "\n  ".join(lines))


def unknown_key(path: str, key: str, known: Iterable[str]) -> SpecError:
    """The error for a key the spec does not know, suggesting the closest known key."""
    known = sorted(set(known))
    match = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    hint = f"did you mean {match[0]!r}? " if match else ""
    return SpecError(
        f"{path}.{key}" if path else str(key),
        message=f"{path + '.' if path else ''}{key}: unknown field; {hint}known fields: {', '.join(known)}",
    )


class UnsafeSubjectError(SpecError):
    """A subject data or deliveries would be sent to (a publish, dead-letter or deliver subject) that is empty, not
    literal, or in a reserved subject space or under a JetStream API prefix."""


class ReconcileError(JetStreamConfigError):
    """The spec cannot be applied as asked (replace-forcing change, if_exists='fail', server too old)."""


class UnknownOriginDomainError(ReconcileError):
    """A mirror or source of an origin domain that does not answer, and that nothing the target knows names (no
    copy there of that domain, not in ``peer_domains``): a wrong domain name, refused unless
    ``allow_unreachable_origins=True``; such a copy would block every later write in the target domain."""


class DoubleStoreError(JetStreamConfigError):
    """Streams of one account in two connected domains would both store the same writes."""


class DoubleStoreUnverifiedError(DoubleStoreError):
    """A domain answered the double-store check with an error (permissions...): not verified, refused."""


class JetStreamConnectionError(JetStreamError):
    """No NATS connection could be made: unreachable servers, bad credentials, TLS failure."""


class JetStreamAuthError(JetStreamConnectionError, JetStreamRefusalError):
    """The server refused the credentials (authorization violation): retrying cannot help."""


class JetStreamPermissionError(JetStreamRefusalError):
    """The server refused a request this connection's user may not make (a ``Permissions Violation``),
    or the account has no import of the API it addresses: waiting cannot help.

    ``refusal`` holds the server's refusal in words (without the target), when there was one.
    """

    refusal: str = ""


class JetStreamImportMissingError(JetStreamPermissionError):
    """Nothing answers an imported API prefix (``JS.acc@hub.API``) in this account: the account lacks
    the import of that API subject (or the exporting account's JetStream is down)."""


class JetStreamNotFoundError(JetStreamRefusalError, LookupError):
    """A stream, consumer or bucket that must exist does not: the same call finds the same (create it
    first, upstream in the DAG)."""


class JetStreamReplicationError(JetStreamRefusalError):
    """An origin has reported a replication error for longer than the grace period (it was waited for)."""


class KeyValueError(JetStreamError):
    """A KV write was refused or landed somewhere unexpected."""


class KeyValueConflictError(KeyValueError, JetStreamRefusalError):
    """Compare-and-set failed: the key's latest revision is not the expected one (a refusal:
    the same put with the same expected revision would fail again)."""


# -- not refusals: waited for (JetStreamDomainUnavailableError) or left to retries -----------------


class ObjectStoreError(JetStreamError):
    """An object store write was not stored (or stored somewhere else than aimed at), or a read found fewer
    chunks than the object's meta names (it was replaced or deleted meanwhile): asking again may succeed."""


class ObjectDigestError(ObjectStoreError):
    """An object read whole does not have the size or the SHA-256 digest its meta records: nothing is kept
    of it (the file it was read into is not written)."""


class JetStreamDomainUnavailableError(JetStreamError):
    """No JetStream answered for the requested domain or API prefix."""


class JetStreamTimeoutError(JetStreamDomainUnavailableError):
    """A JetStream API request got no answer within its timeout, and the server sent no refusal
    (a leaf link down, a server too busy): unlike "no responders", it was waited out."""


class JetStreamNoLeaderError(JetStreamDomainUnavailableError):
    """A clustered JetStream answered that it cannot serve a stream now: the stream (or the cluster's
    meta layer) has no leader, because a node is down or an election is under way (the 503 "JetStream
    system temporarily unavailable", a stream reported without a leader, a replication configured but
    not running). Waited for, as any unavailable domain: it ends when the election does, or when a
    quorum of nodes is back."""


class DoubleStoreUnreachableError(JetStreamDomainUnavailableError):
    """A domain the double-store check must ask did not answer (leaf link down?): not verified,
    refused; not a refusal of the task's inputs, so ``retries`` may succeed once the link is back."""


class JetStreamApiError(JetStreamError):
    """The JetStream API answered with an error."""

    def __init__(self, subject: str, error: Mapping[str, Any], target: str) -> None:
        self.code = error.get("code")
        self.err_code = error.get("err_code")
        self.description = error.get("description", "")
        self.subject = subject
        super().__init__(
            f"JetStream in {target} refused {subject.rsplit('.API.', 1)[-1]}: {self.description} "
            f"(code {self.code}, err_code {self.err_code})"
        )


class JetStreamPublishError(JetStreamError):
    """Some messages were not stored (or stored in another domain than the one aimed at).

    For one message the server refused, ``err_code``, ``description`` and ``status`` (the HTTP-like
    ``code``: 503 means nothing could store it now) are the server's (else None, "", None).
    """

    def __init__(
        self, message: str, err_code: int | None = None, description: str = "", status: int | None = None
    ) -> None:
        super().__init__(message)
        self.err_code = err_code
        self.description = description or message
        self.status = status


class JetStreamAckError(JetStreamError):
    """A consumer did not confirm a verdict (ack, nak, term, in progress) sent for a message: it answered that
    nobody takes it (the consumer deleted, or its leader gone for longer than a failover lasts), or it did not
    answer in time. The message names each one; the consumer delivers them again after its ``ack_wait``."""


class ConsumerDeletedError(JetStreamAckError, JetStreamNotFoundError):
    """A verdict (ack, nak, term, in progress) got no responders and the consumer (or its stream) is gone: the
    message names its stream sequence, the consumer, the stream and the domain. Nothing settles that message
    now; a consumer made again under that name delivers it again."""


class JetStreamDataLossError(JetStreamError):
    """Sequences inside the requested range are gone (purged, deleted, expired or over limits)."""


class StreamRecreatedError(JetStreamDataLossError, JetStreamRefusalError):
    """A position kept by the provider (a checkpoint, an offset, a watch) was recorded on a stream that
    was deleted and created again under the same name: its sequences name other messages now."""


class WindowOpenError(JetStreamError):
    """A read bounded by a time (``endingTime``, the packaged job's ``--end-time``) cannot be shown complete yet:
    the stream holds no message stored at or after that time, and its clock has not passed it (or it is a
    mirror, stamped by its origin). Messages of the window may still arrive: read again later (Airflow's
    retries)."""


class CheckpointConflictError(JetStreamError):
    """Another run changed the Spark job's checkpoint first: this run must not advance it."""


# -- outside the tree ---------------------------------------------------------------------------------


class TlsNotStartedError(nats.errors.Error):
    """The server did not start TLS although the connection requires it; nothing was sent to it."""

    def __init__(self, server: str, tls_available: bool) -> None:
        self.server = server
        self.tls_available = tls_available
        super().__init__(f"{server} did not start TLS")


class NatsServerError(RuntimeError):
    """A local nats-server of the test topology did not start, or did not become ready in time."""


def require_extra(modules: Sequence[str], what: str, otherwise: str = "") -> None:
    """Import ``modules`` of the optional ``spark`` extra, or raise ``ImportError`` saying that ``what`` needs them
    and what to install (``otherwise``: another way, after it)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            needed = f"{', '.join(modules[:-1])} and {modules[-1]}"
            raise ImportError(
                f"{what} needs {needed} ({err}): install 'airflow-provider-jetstream[spark]'{otherwise}", name=err.name
            ) from err
