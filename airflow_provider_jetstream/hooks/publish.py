"""``JetStreamPublishHook``: the publishing role: messages to a subject, every ack checked (sync and async).

The publish operator's work as a hook method, on the one publish engine
(:mod:`airflow_provider_jetstream.core.publish.engine`, the Spark writer's too). Usable alone, or as part of
:class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_jetstream.core.api import domain_of
from airflow_provider_jetstream.core.arguments.names import delivery_subject
from airflow_provider_jetstream.core.protocol import EXPECTED_STREAM_HEADER
from airflow_provider_jetstream.core.publish.engine import JetStreamPublishError, ack_problems, publish_messages
from airflow_provider_jetstream.core.publish.fast_ingest import batch_target
from airflow_provider_jetstream.core.publish.messages import outgoing
from airflow_provider_jetstream.core.signatures.operations import PUBLISH, SUBJECT_OUTSIDE_API
from airflow_provider_jetstream.core.signatures.shared import LOG, REQUEST
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.methods import Logger, blocking, checked


class JetStreamPublishHook(JetStreamBaseHook):
    """Publishing in any domain, with at most ``max_in_flight`` messages unacknowledged and every ack checked
    (see :class:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook` for the connection arguments)."""

    @checked((PUBLISH + REQUEST + LOG).ruled(SUBJECT_OUTSIDE_API))
    async def apublish(
        self,
        subject: str,
        messages: Iterable[Any] | str | bytes,
        *,
        headers: Mapping[str, str] | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        max_in_flight: int = 4000,
        ack_timeout: float = 30.0,
        allow_double_store: bool = False,
        peer_domains: list[str] | None = None,
        fast_ingest: bool | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        request_timeout: float | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        """Publish ``messages`` to ``subject`` with at most ``max_in_flight`` unacknowledged, every ack
        checked, as ``JetStreamPublishOperator`` does; returns its summary: ``{"count", "stored",
        "duplicates", "first_seq", "last_seq", "subject", "stream", "domain", "rate", "batches", "acks"}``
        (``batches``: fast-ingest batches sent, 0 when every message went on its own; ``acks``: acks received).

        Before anything is sent: ``subject`` must be literal and outside the reserved spaces (``$JS.``,
        ``$KV.``, ``_INBOX.``..., the account's API prefixes), else :class:`UnsafeSubjectError`; and the
        double-store check refuses a subject other connected domains store too. Messages not stored, or
        stored outside the target domain or ``expected_stream``, raise :class:`JetStreamPublishError`.

        :param messages: payloads: bytes, str (UTF-8) or JSON-serializable values; an iterator streams.
        :param headers: headers on every message (names and string values).
        :param msg_id: template of each message's ``Nats-Msg-Id``, ``{index}`` the message's index
            (appended if missing), e.g. ``f"{run_id}/readings/{{index}}"``: a retry stores nothing twice
            within the stream's duplicate window. Default None: no id, no deduplication.
        :param expected_stream: the stream that must store them (``Nats-Expected-Stream``).
        :param max_in_flight: most messages published but not yet acknowledged. Default 4000.
        :param ack_timeout: seconds a message may stay unacknowledged before failing; meanwhile a message
            with a ``Nats-Msg-Id`` (see ``msg_id``) is published again (a leader election, a node gone),
            one without is not (it could be stored twice). Default 30.
        :param allow_double_store: publish even if other connected domains store the subject. Default False.
        :param peer_domains: more domains for that check, besides the connection's own.
        :param fast_ingest: publish in fast-ingest batches (one ack per flow window, every message still
            accounted for, the same guarantees): None (default) when the stream storing ``subject`` has
            ``allow_batched`` (nats-server 2.14+; an older server answering as for single messages gets
            them one by one), False never.
        """
        config = await self.aget_conn_config()
        target_prefix = self.resolve_api_prefix(domain, api_prefix)
        # The subject against the API prefixes only the connection knows (its own, the hook's).
        prefixes = [p for p in dict.fromkeys([api_prefix, self.api_prefix, config.api_prefix, target_prefix]) if p]
        delivery_subject(subject, "subject", prefixes)
        base = dict(headers or {})
        if expected_stream:
            base[EXPECTED_STREAM_HEADER] = expected_stream
        logger = logger or self.log
        what = f"publish to {subject!r}"
        async with self.aapi(domain, api_prefix, request_timeout=request_timeout) as api:
            guard = await self._double_store_guard(api, [subject], what, allow_double_store, logger, peer_domains)
            await guard()
            mode = await batch_target(api, subject) if fast_ingest is not False else None
            summary = await publish_messages(
                api.nc,
                outgoing(subject, messages, base or None, msg_id),
                max_in_flight=max_in_flight,
                ack_timeout=ack_timeout,
                api_prefixes=prefixes,
                what=what,
                mode=mode,
            )
        target_domain = domain_of(target_prefix)
        problems = ack_problems(summary, target_domain=target_domain, expected_stream=expected_stream)
        if problems:
            raise JetStreamPublishError(f"{what}: " + "; ".join(problems))
        rate = summary.count / summary.seconds if summary.seconds else None
        streams = sorted({s for s, _ in summary.streams if s})
        domains = sorted({d for _, d in summary.streams if d})
        logger.info(
            "published %d messages to %r: %d stored, %d duplicates, %d republished, seq %s..%s, %.0f msg/s, "
            "%d fast-ingest batches, %d acks",
            summary.count,
            subject,
            summary.stored,
            summary.duplicates,
            summary.republished,
            summary.first_seq,
            summary.last_seq,
            rate or 0,
            summary.batches,
            summary.replies,
        )
        return {
            "count": summary.count,
            "stored": summary.stored,
            "duplicates": summary.duplicates,
            "first_seq": summary.first_seq,
            "last_seq": summary.last_seq,
            "subject": subject,
            "stream": streams[0] if len(streams) == 1 else streams,
            "domain": domains[0] if len(domains) == 1 else (domains or target_domain),
            "rate": round(rate, 1) if rate else None,
            "batches": summary.batches,
            "acks": summary.replies,
        }

    publish = blocking(apublish)
