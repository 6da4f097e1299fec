"""``JetStreamHook``: streams, consumers, buckets, status checks, KV and publishing in any JetStream domain.

What the operators, sensors and triggers do, as hook methods for ``@task`` code: each ``a``-prefixed
method is the implementation (for triggers and async code); its plain-named twin runs it through
the hook's one sync bridge (:meth:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook.run`).
Every method takes ``domain`` / ``api_prefix`` (default: the hook's, else the connection's), checks
its arguments before anything is sent, and uses the one shared NATS connection of its event loop.
Refusals raise the errors of :mod:`airflow_provider_jetstream.core.errors`.

One class in five layers, one module each: connections (:mod:`~airflow_provider_jetstream.hooks.base`),
declaring streams, consumers and buckets (:mod:`~airflow_provider_jetstream.hooks.streams`), object stores
(:mod:`~airflow_provider_jetstream.hooks.objects`), fetching and consuming messages
(:mod:`~airflow_provider_jetstream.hooks.messages`), and here the status checks, KV and publishing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_jetstream.core.api import domain_of
from airflow_provider_jetstream.core.manage.buckets import KvEntry, kv_delete, kv_get, kv_put
from airflow_provider_jetstream.core.protocol import EXPECTED_STREAM_HEADER
from airflow_provider_jetstream.core.publish.engine import JetStreamPublishError, ack_problems, publish_messages
from airflow_provider_jetstream.core.publish.fast_ingest import batch_target
from airflow_provider_jetstream.core.publish.messages import outgoing
from airflow_provider_jetstream.core.publish.subjects import check_publish_subject
from airflow_provider_jetstream.core.signatures.operations import (
    CHECK_REPLICATION,
    CONSUMER_LAG,
    KEY_CHECK,
    KV_DELETE,
    KV_GET,
    KV_PUT,
    PUBLISH,
    REPLICATION,
    RETENTION_HEADROOM,
    SUBJECT_OUTSIDE_API,
    replication_watch,
)
from airflow_provider_jetstream.core.signatures.shared import LOG, REQUEST, TARGET
from airflow_provider_jetstream.core.status.consumer_lag import ConsumerLagCheck, check_consumer_lag
from airflow_provider_jetstream.core.status.kv_key import KeyCheck, judge_entry
from airflow_provider_jetstream.core.status.replication import ReplicationCheck, ReplicationWatch, check_replication
from airflow_provider_jetstream.hooks.base import blocking, checked
from airflow_provider_jetstream.hooks.messages import JetStreamMessagesHook
from airflow_provider_jetstream.hooks.streams import Logger


class JetStreamHook(JetStreamMessagesHook):
    """NATS JetStream in any domain, from a ``jetstream`` connection: connections (see
    :class:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook`) and, sync and async, what
    the operators and sensors do: ``ensure_stream`` / ``ensure_consumer`` / ``ensure_key_value``,
    ``stream_info``, ``replication_status``, ``retention_headroom``, ``consumer_lag``, ``kv_get`` / ``kv_put`` /
    ``kv_delete``, ``publish``, and object stores: ``ensure_object_store``, ``put_object`` /
    ``get_object`` / ``object_info`` / ``list_objects`` / ``delete_object`` / ``check_object``, ``awatch_objects``,
    and messages: ``fetch`` (a batch) and ``consume`` (batch after batch), each message with ``ack()`` /
    ``nak(delay)`` / ``term()`` / ``in_progress()``.

    :param jetstream_conn_id: Airflow connection id. Default ``jetstream_default``.
    :param domain: JetStream domain to address (``$JS.<domain>.API``). Default: the connection's.
    :param api_prefix: JetStream API prefix, e.g. an imported ``JS.acc@hub.API``. Default: the
        connection's. ``domain`` and ``api_prefix`` exclude each other.

    The ``timeout`` of each method is the seconds to wait for each JetStream API answer (default:
    the connection's ``connect_timeout``).
    """

    # -- read and check ------------------------------------------------------------------------

    @checked(CONSUMER_LAG + REQUEST)
    async def aconsumer_lag(
        self,
        stream: str,
        consumer: str,
        *,
        max_pending: int = 0,
        max_ack_pending: int = 0,
        max_redelivered: int | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
    ) -> ConsumerLagCheck:
        """The consumer-lag check of ``JetStreamConsumerLagSensor``: ``.done`` when the consumer's
        unprocessed messages (``num_pending``) are at most ``max_pending`` (default 0), its outstanding
        acks at most ``max_ack_pending`` (default 0) and, if given, its redeliveries at most
        ``max_redelivered`` (default None: not checked); ``.reason`` says which count is over;
        ``.to_xcom()`` gives the counts and sequences as a dict. :class:`JetStreamNotFoundError` when the
        stream or consumer does not exist."""
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            return await check_consumer_lag(api, stream, consumer, max_pending, max_ack_pending, max_redelivered)

    consumer_lag = blocking(aconsumer_lag)

    @checked(CHECK_REPLICATION + REQUEST)
    async def acheck_replication(
        self,
        watch: ReplicationWatch,
        *,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
    ) -> ReplicationCheck:
        """One exact replication check of ``watch.stream`` with a :class:`ReplicationWatch` kept across
        checks (it remembers since when errors and outages last): what the replication sensor and
        trigger call at every check. For a single check, use :meth:`areplication_status`."""
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            return await check_replication(api.nc, api, watch)

    check_replication = blocking(acheck_replication)

    @checked(REPLICATION + REQUEST)
    async def areplication_status(
        self,
        stream: str,
        *,
        sources: list[str] | None = None,
        max_lag: int = 0,
        max_inactive: float | str = 10.0,
        error_grace: float | str = 30.0,
        verify_origin: str = "auto",
        unreachable_origins: str = "wait",
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
    ) -> ReplicationCheck:
        """Whether a stream's mirror, or every (named) source, has caught up with its origin: the exact
        check of ``JetStreamReplicationLagSensor`` (each origin asked for its last sequence in its own
        domain, then the stream read), made once.

        Returns a :class:`ReplicationCheck`: ``.caught_up`` (every origin), ``.done`` (what the sensor
        would succeed on), ``.failed`` (why waiting cannot help, or None), ``.verdicts`` (per origin:
        ``caught_up``, ``reason``, the rule applied), ``.waiting_for()``, ``.table()`` and
        ``.to_xcom()`` (the sensor's XCom dict). :class:`JetStreamNotFoundError` if the stream does
        not exist; :class:`JetStreamConfigError` if it has no mirror/sources or lacks a named one;
        :class:`JetStreamNoLeaderError` (a wait) while a clustered stream has no leader (a node down, an
        election, a lost quorum: its replication is configured but not running).

        :param sources: origin stream names to judge; None (default): the mirror or every source.
        :param max_lag: most messages an origin may be behind (lag/active rule). Default 0.
        :param max_inactive: most time since the last contact with an origin (lag/active rule):
            seconds or text like ``"10s"``. Default 10 seconds.
        :param error_grace: how long a replication error may last before ``.failed`` is set. Default 30 s.
        :param verify_origin: ``"auto"`` (default), ``"required"`` or ``"off"`` (lag/active rule only).
        :param unreachable_origins: ``"wait"`` (default): an unreachable origin is never caught up;
            ``"proceed"``: ``.done`` once every reachable origin is.
        """
        watch = replication_watch(
            {
                "stream": stream,
                "sources": sources,
                "max_lag": max_lag,
                "max_inactive": max_inactive,
                "error_grace": error_grace,
                "verify_origin": verify_origin,
                "unreachable_origins": unreachable_origins,
            }
        )
        return await self.acheck_replication(watch, domain=domain, api_prefix=api_prefix, timeout=timeout)

    replication_status = blocking(areplication_status)

    @checked(RETENTION_HEADROOM + REQUEST)
    async def aretention_headroom(
        self,
        stream: str,
        *,
        sources: list[str] | None = None,
        min_time_to_loss: float | str | None = None,
        min_headroom: float | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
    ) -> ReplicationCheck:
        """For each origin of a mirror or sourced stream: what the copy has not taken yet (messages, bytes, the
        oldest uncopied message's age) against the origin's limits (``max_age``, ``max_msgs``, ``max_bytes``,
        ``max_msgs_per_subject``, the account's storage), and the time until the first uncopied message would
        be discarded (or new messages refused) at the current rate: one exact replication check, read once
        (the rate is each origin's average over what it holds; the sensor measures it between its checks).
        See :mod:`airflow_provider_jetstream.core.status.headroom` for every rule.

        Returns the :class:`ReplicationCheck`: ``.headroom`` (per origin key: ``.uncopied_msgs``,
        ``.uncopied_bytes``, ``.oldest_age``, ``.seconds_left``, ``.binding``, ``.fraction``, ``.limits``,
        ``.to_dict()``), ``.low_headroom`` (why origins are below the thresholds, one clause each), ``.table()``
        (with the headroom columns) and ``.to_xcom()`` (each origin's ``headroom``). An origin that does not
        answer has no headroom in a single reading. Raises as :meth:`areplication_status`.

        :param sources: origin stream names; None (default): the mirror or every source.
        :param min_time_to_loss: seconds or text like ``"1h"``: origins that would lose data sooner are listed
            in ``.low_headroom``. Default None: not judged.
        :param min_headroom: a share between 0 and 1 of every limit that must be left. Default None: not judged.
        """
        watch = ReplicationWatch(
            stream, sources=sources, min_time_to_loss=min_time_to_loss, min_headroom=min_headroom, low_headroom="warn"
        )
        return await self.acheck_replication(watch, domain=domain, api_prefix=api_prefix, timeout=timeout)

    retention_headroom = blocking(aretention_headroom)

    # -- KV ------------------------------------------------------------------------------------

    @checked(KV_GET + TARGET)
    async def akv_get(
        self, bucket: str, key: str, *, domain: str | None = None, api_prefix: str | None = None
    ) -> KvEntry | None:
        """The latest value of ``key`` in ``bucket`` (``.value`` bytes, ``.revision``, ``.created``), read in
        the bucket's domain, mirror buckets of other domains included (nats-py's ``js.key_value()``
        cannot read those); None when the key holds no value (never put, deleted or purged).
        :class:`JetStreamNotFoundError` if the bucket does not exist."""
        async with self.aapi(domain, api_prefix) as api:
            return await kv_get(api, bucket, key)

    kv_get = blocking(akv_get)

    @checked(KEY_CHECK + TARGET)
    async def acheck_key(
        self,
        bucket: str,
        key: str,
        *,
        value: str | None = None,
        min_revision: int | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
    ) -> KeyCheck:
        """The key check of ``JetStreamKeyValueSensor``: ``.done`` when the key holds a value (equal to
        ``value`` as UTF-8 text, and at ``min_revision`` or later, when given); ``.reason`` says why not;
        ``.to_xcom()`` gives the decoded value and revision."""
        entry = await self.akv_get(bucket, key, domain=domain, api_prefix=api_prefix)
        return judge_entry(bucket, key, self.describe_target(domain, api_prefix), entry, value, min_revision)

    check_key = blocking(acheck_key)

    @checked(KV_PUT + REQUEST)
    async def akv_put(
        self,
        bucket: str,
        key: str,
        value: Any,
        *,
        expected_revision: int | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
    ) -> int:
        """Put ``value`` under ``key`` in the bucket of the target domain (as nats.go addresses it, so
        it cannot land in a same-named bucket of another domain; a mirror bucket's write goes to its
        origin); returns the new revision.

        :param value: bytes, str (stored as UTF-8), or a dict, list, number or bool (stored as JSON).
        :param expected_revision: compare-and-set: store only if the key's latest revision is this one
            (0: only if the key does not exist); else :class:`KeyValueConflictError`. Default None.
        """
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            return await kv_put(api, bucket, key, value, expected_revision=expected_revision)

    kv_put = blocking(akv_put)

    @checked(KV_DELETE + REQUEST)
    async def akv_delete(
        self,
        bucket: str,
        key: str,
        *,
        purge: bool = False,
        expected_revision: int | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float | None = None,
    ) -> int:
        """Delete ``key`` (a delete marker; ``purge=True`` also drops its history) in the bucket of the
        target domain; returns the marker's revision. ``expected_revision`` as in :meth:`akv_put`."""
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            return await kv_delete(api, bucket, key, purge=purge, expected_revision=expected_revision)

    kv_delete = blocking(akv_delete)

    # -- publish -------------------------------------------------------------------------------

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
        timeout: float | None = None,
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
        check_publish_subject(subject, "subject", prefixes)
        base = dict(headers or {})
        if expected_stream:
            base[EXPECTED_STREAM_HEADER] = expected_stream
        logger = logger or self.log
        what = f"publish to {subject!r}"
        async with self.aapi(domain, api_prefix, timeout=timeout) as api:
            guard = await self.double_store_guard(api, [subject], what, allow_double_store, logger, peer_domains)
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
