"""Which subjects data may be published to, checked once per distinct subject of many messages.

Publishing to ``$JS.API.STREAM.DELETE.orders`` is just a request the server obeys: a message sent
there deletes the stream. So every publishing path (the publish operator, the Spark writer and the shared
publish engine, :mod:`airflow_provider_jetstream.core.publish.engine`) checks each subject with
:func:`~airflow_provider_jetstream.core.arguments.names.delivery_subject`, the type of every subject the package
sends data or deliveries to, before anything is sent.

Airflow-free: Spark executors import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_provider_jetstream.core.arguments.names import delivery_subject


class SubjectGuard:
    """:func:`~airflow_provider_jetstream.core.arguments.names.delivery_subject` for many messages: each distinct
    subject is checked once."""

    def __init__(self, api_prefixes: Iterable[str | None] = (), field: str = "subject") -> None:
        self.api_prefixes = tuple(p for p in api_prefixes if p)
        self.field = field
        self._allowed: set[str] = set()

    def __call__(self, subject: Any) -> str:
        if isinstance(subject, str) and subject in self._allowed:
            return subject
        delivery_subject(subject, self.field, self.api_prefixes)
        if len(self._allowed) < 100_000:
            self._allowed.add(subject)
        return subject
