"""Which subjects data may be published to: the one check used by every publishing path.

Publishing to ``$JS.API.STREAM.DELETE.orders`` is just a request the server obeys: a message sent
there deletes the stream. So the publish operator, the Spark writer and the shared publish engine
(:mod:`airflow_provider_jetstream.core.publish.engine`) all refuse, before anything is sent:

- subjects that are not literal: empty, with whitespace, empty tokens or wildcards;
- subjects longer than the server's protocol line or holding control characters;
- the reserved subject spaces (:func:`~airflow_provider_jetstream.core.arguments.names.reserved_problem`):
  ``$JS.`` (JetStream API, acks, flow control, events of every domain), ``$JSC.`` and ``$NRG.``
  (clustering), ``$KV.`` (KV buckets: KV writes go through the KV operators), ``$O.`` (object
  stores), ``$SYS.`` (the system account), ``_INBOX.`` (replies), and any JetStream API however an
  account names it (``JS.acc@hub.API.>``);
- the JetStream API prefixes the account is configured with: the connection's ``api_prefix`` and
  any ``api_prefix`` given to the caller.

Airflow-free: Spark executors import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_provider_jetstream.core.arguments.names import PUBLISH, reserved_problem, subject_problem
from airflow_provider_jetstream.core.errors import UnsafeSubjectError


def publish_subject_problem(subject: Any, api_prefixes: Iterable[str | None] = ()) -> str | None:
    """Why data must not be published to ``subject``, or None if it may.

    :param subject: the subject to publish to.
    :param api_prefixes: JetStream API prefixes of the account (``JS.acc@hub.API``...); subjects
        under them are refused like ``$JS.``. None entries are ignored.
    """
    problem = subject_problem(subject, wildcards=False) or reserved_problem(subject, PUBLISH)
    if problem:
        return problem
    for prefix in api_prefixes:
        if not prefix:
            continue
        prefix = prefix.rstrip(".")
        if subject == prefix or subject.startswith(prefix + "."):
            return (
                f"it is under the account's JetStream API prefix {prefix!r}: a message there is a request "
                "the server may obey, e.g. deleting a stream"
            )
    return None


def check_publish_subject(subject: Any, field: str = "subject", api_prefixes: Iterable[str | None] = ()) -> str:
    """Return ``subject`` if data may be published to it, else raise :class:`UnsafeSubjectError`
    naming ``field``, the value and what is allowed."""
    problem = publish_subject_problem(subject, api_prefixes)
    if problem:
        raise UnsafeSubjectError(
            field,
            subject,
            f"{problem}; publish to a literal subject outside $JS., $KV., $O., $SYS., _INBOX. and the JetStream "
            "API prefixes (e.g. 'orders.created')",
        )
    return subject


class SubjectGuard:
    """:func:`check_publish_subject` for many messages: each distinct subject is checked once."""

    def __init__(self, api_prefixes: Iterable[str | None] = (), field: str = "subject") -> None:
        self.api_prefixes = tuple(p for p in api_prefixes if p)
        self.field = field
        self._allowed: set[str] = set()

    def __call__(self, subject: Any) -> str:
        if isinstance(subject, str) and subject in self._allowed:
            return subject
        check_publish_subject(subject, self.field, self.api_prefixes)
        if len(self._allowed) < 100_000:
            self._allowed.add(subject)
        return subject
