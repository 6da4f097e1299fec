"""``JetStreamReplicationLagTrigger`` and the replication check it shares with the sensor's poke.

The check asks each origin, in its own domain, for its last sequence, then reads the stream and
judges every origin: see :mod:`airflow_provider_jetstream.core.replication` for what "caught up" means.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import nats.errors
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_jetstream.core.errors import (
    JetStreamApiError,
    JetStreamConfigError,
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamImportMissingError,
    JetStreamNotFoundError,
    JetStreamPermissionError,
)
from airflow_provider_jetstream.core.jetstream_api import JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.replication import (
    UNREACHABLE_ORIGINS,
    VERIFY_ORIGIN,
    HeldSeq,
    OriginProbe,
    ReplicationWatch,
    unreachable_reason,
)
from airflow_provider_jetstream.core.replication_report import ReplicationCheck
from airflow_provider_jetstream.core.replication_status import ReplicationStatus, stream_source_seq, subject_matches
from airflow_provider_jetstream.core.specs.durations import duration_seconds, optional_duration_seconds
from airflow_provider_jetstream.core.values import validate_choice
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.triggers.base import TRANSIENT_ERRORS, PollClock, UnreachableClock, transient_reason

#: Most messages read back from the end of a stream to find the newest copy from one origin, when
#: other origins write to the same subjects (each read is one request; see :func:`held_seq`).
WALK_BACK_LIMIT = 500


async def probe_origin(api: JetStreamApi, status: ReplicationStatus) -> OriginProbe:
    """Ask the origin, through its own domain or API prefix, for its last sequence among the
    subjects the copy takes (``STREAM.MSG.GET`` with ``last_by_subj``: one indexed lookup per
    filter, wildcards allowed, on every server version; 0 when nothing matches).

    A refused request (``Permissions Violation``) raises :class:`JetStreamPermissionError`.
    """
    try:
        last = 0
        for subject in status.origin_filters:
            message = await api.last_msg(status.origin, subject)
            if message:
                last = max(last, int(message["seq"]))
        return OriginProbe("ok", last)
    except JetStreamNotFoundError:
        return OriginProbe("missing", None, f"origin stream {status.origin!r} does not exist in {api.target}")
    except JetStreamImportMissingError:
        return OriginProbe(
            "unverifiable",
            None,
            f"origin not verifiable from this account (no import of {api.prefix}.STREAM.MSG.GET): lag/active rule",
        )
    except JetStreamDomainUnavailableError:
        return OriginProbe("unreachable", None, unreachable_reason(api.prefix))
    except JetStreamApiError as err:  # e.g. 503: JetStream temporarily unavailable there
        return OriginProbe("unreachable", None, f"{api.target} did not answer: {err.description}")


async def held_seq(api: JetStreamApi, info: dict[str, Any], status: ReplicationStatus, probe: OriginProbe) -> HeldSeq:
    """The highest origin sequence the stream holds from one origin.

    A mirror keeps the origin's sequences: its last sequence. For a source, nats-server >= 2.15
    reports it (the source's ``seq``); otherwise the newest message on the subjects this origin's
    copies land on (``last_by_subj``, one lookup) names its origin and origin sequence in the
    ``Nats-Stream-Source`` header. When other origins write to the same subjects, that message may
    be theirs: then the stream is read backwards from there, at most :data:`WALK_BACK_LIMIT`
    messages, to the newest copy from this origin (copies from one origin arrive in order, so the
    newest holds the highest sequence). Beyond that the answer is unknown (``seq`` None).
    """
    state = info.get("state") or {}
    if status.kind == "mirror":
        return HeldSeq(int(state.get("last_seq") or 0))
    if status.seq is not None:
        return HeldSeq(status.seq)
    if not probe.last_seq:
        return HeldSeq(0)
    first = int(state.get("first_seq") or 0)
    best = 0
    walked = 0
    for pattern in status.copy_patterns:
        message = await api.last_msg(info["config"]["name"], pattern)
        while message is not None:
            origin_seq = stream_source_seq(message, status.index_name)
            if origin_seq is not None:
                best = max(best, origin_seq)
                break
            seq, message = int(message["seq"]) - 1, None
            while seq >= first:
                walked += 1
                if walked > WALK_BACK_LIMIT:
                    return HeldSeq(
                        None,
                        f"the last {WALK_BACK_LIMIT} messages on its subjects came from other origins sharing them",
                    )
                candidate = await api.msg(info["config"]["name"], seq)
                if candidate is not None and subject_matches(candidate["subject"], pattern):
                    message = candidate
                    break
                seq -= 1
    return HeldSeq(best)


async def check_replication(hook: JetStreamHook, watch: ReplicationWatch) -> ReplicationCheck:
    """Read the stream, probe each watched origin in its own domain, read the stream again, judge.

    The origins are probed before the stream is read, so "the stream holds the origin's last
    sequence" is exact. Raises :class:`JetStreamNotFoundError` when the stream does not exist,
    :class:`JetStreamConfigError` when it has no mirror/sources or lacks a named one,
    :class:`JetStreamPermissionError` when a request is refused, and
    :class:`JetStreamDomainUnavailableError` when no JetStream answers for the stream's domain.
    """
    async with hook.aconnect() as nc:
        config = await hook.aget_conn_config()
        watch.target = hook.describe_target()
        own_prefix = hook.resolve_api_prefix()
        api = JetStreamApi(nc, own_prefix, timeout=config.connect_timeout, target=watch.target)
        # The raw info: nats-py's parsed one drops each origin's external API prefix.
        info = await api.stream_info(watch.stream)
        if info is None:
            raise JetStreamNotFoundError(f"stream {watch.stream!r} does not exist in {watch.target}")
        statuses = watch.select(info)
        probes: dict[str, OriginProbe] = {}
        if watch.verify_origin != "off":

            async def probe(status: ReplicationStatus) -> None:
                prefix = status.api_prefix or own_prefix
                origin_api = JetStreamApi(nc, prefix, timeout=config.connect_timeout, target=describe_prefix(prefix))
                probes[status.key] = await probe_origin(origin_api, status)

            await asyncio.gather(*(probe(s) for s in statuses))
        after = await api.stream_info(watch.stream)  # read after the probes: exact
        if after is None:
            raise JetStreamNotFoundError(f"stream {watch.stream!r} does not exist in {watch.target}")
        held: dict[str, HeldSeq] = {}
        for status in watch.select(after):
            found = probes.get(status.key)
            if found is not None and found.state == "ok":
                held[status.key] = await held_seq(api, after, status, found)
    return watch.judge(after, probes=probes, held=held)


class JetStreamReplicationLagTrigger(BaseTrigger):
    """Fires when a stream's mirror, or every (named) source, is caught up with its origin.

    Polls every ``poll_interval`` seconds over the triggerer's one shared NATS connection for
    ``jetstream_conn_id``: asks each origin for its last sequence in the origin's own domain, then
    reads the stream (see :mod:`airflow_provider_jetstream.core.replication`). Logs the replication table
    when it changes, and once a minute while it does not. Fires ``{"status": "success",
    "replication": {...}}``, or ``{"status": "error", "reason": ..., "message": ...}`` when the stream
    does not exist, has no such origin, a request is refused, an origin's replication error outlasts
    ``error_grace``, or an origin (or the stream's own domain) stays unreachable for longer than
    ``unreachable_timeout``.

    :param jetstream_conn_id: Airflow connection id (the connection is resolved in the triggerer).
    :param stream: the stream that mirrors or sources.
    :param domain: JetStream domain of that stream. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param max_lag: most messages an origin may be behind (lag/active rule). Default 0.
    :param max_inactive: most time since the last contact with an origin (lag/active rule), in
        seconds or text like ``"10s"``; must be > 0. Default 10 seconds.
    :param error_grace: how long a replication error may last before failing (seconds or text).
        Default 30 seconds.
    :param sources: names of the origin streams to watch; None (default) watches all.
    :param poll_interval: seconds between checks. Default 5.
    :param verify_origin: ``"auto"`` (default): probe every origin, and where this account cannot
        call the origin's API by design fall back to the lag/active rule; ``"required"``: such an
        origin fails the trigger; ``"off"``: the lag/active rule only.
    :param unreachable_origins: ``"wait"`` (default): an origin whose domain does not answer is never
        caught up; ``"proceed"``: fire once every reachable origin is caught up, listing the others
        under ``"unreachable"``.
    :param unreachable_timeout: seconds (or text) an origin, or the stream's domain, may stay
        unreachable before the trigger fails; None (default): no bound (the sensor's timeout).
    :param state: what the sensor's checks so far left (:meth:`ReplicationWatch.state` and since when
        the domain has not answered), so the trigger goes on where the sensor was. Default: none.

    What it opens (its use of the shared connection) is held by ``run()``'s context manager and
    released when ``run()`` returns, is cancelled or is closed: ``cleanup()`` has nothing left to do.
    """

    def __init__(
        self,
        jetstream_conn_id: str,
        stream: str,
        domain: str | None = None,
        api_prefix: str | None = None,
        max_lag: int = 0,
        max_inactive: float | str = 10.0,
        error_grace: float | str = 30.0,
        sources: list[str] | None = None,
        poll_interval: float = 5.0,
        verify_origin: str = "auto",
        unreachable_origins: str = "wait",
        unreachable_timeout: float | str | None = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.jetstream_conn_id = jetstream_conn_id
        self.stream = stream
        self.domain = domain
        self.api_prefix = api_prefix
        self.max_lag = max_lag
        self.max_inactive = duration_seconds(max_inactive, "max_inactive", positive=True)
        self.error_grace = duration_seconds(error_grace, "error_grace")
        self.sources = list(sources) if sources else None
        self.poll_interval = float(poll_interval)
        self.verify_origin = validate_choice(verify_origin, "verify_origin", VERIFY_ORIGIN)
        self.unreachable_origins = validate_choice(unreachable_origins, "unreachable_origins", UNREACHABLE_ORIGINS)
        self.unreachable_timeout = optional_duration_seconds(unreachable_timeout, "unreachable_timeout")
        self.state = dict(state or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "jetstream_conn_id": self.jetstream_conn_id,
                "stream": self.stream,
                "domain": self.domain,
                "api_prefix": self.api_prefix,
                "max_lag": self.max_lag,
                "max_inactive": self.max_inactive,
                "error_grace": self.error_grace,
                "sources": self.sources,
                "poll_interval": self.poll_interval,
                "verify_origin": self.verify_origin,
                "unreachable_origins": self.unreachable_origins,
                "unreachable_timeout": self.unreachable_timeout,
                "state": self.state,
            },
        )

    def new_watch(self) -> ReplicationWatch:
        return ReplicationWatch(
            self.stream,
            self.max_lag,
            self.max_inactive,
            self.error_grace,
            self.sources,
            verify_origin=self.verify_origin,
            unreachable_origins=self.unreachable_origins,
            unreachable_timeout=self.unreachable_timeout,
        ).restore(self.state.get("watch"))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = JetStreamHook(self.jetstream_conn_id, domain=self.domain, api_prefix=self.api_prefix)
        watch = self.new_watch()
        unanswered = UnreachableClock(self.unreachable_timeout, self.state.get("unreachable_since"))
        try:
            # Held for the trigger's life: every check reuses the triggerer's shared connection.
            async with hook.aconnect():
                clock = PollClock(self.poll_interval)
                while True:
                    try:
                        check = await check_replication(hook, watch)
                    except TRANSIENT_ERRORS as err:
                        event = unanswered.on_no_answer(
                            f"stream {self.stream!r}", transient_reason(hook, err), self.log
                        )
                        if event:
                            yield event
                            return
                    else:
                        unanswered.clear()
                        if watch.should_log(check):
                            self.log.info(
                                "Replication of stream %r in %s:\n%s", self.stream, check.target, check.table()
                            )
                            if not check.done:
                                self.log.info("Stream %r: waiting: %s", self.stream, check.waiting_for())
                        if check.failed:
                            message = f"stream {self.stream!r} in {check.target}: {check.failed}"
                            yield TriggerEvent({"status": "error", "reason": check.failed_reason, "message": message})
                            return
                        if check.done:
                            yield TriggerEvent({"status": "success", "replication": check.to_xcom()})
                            return
                    await clock.wait()
        except JetStreamNotFoundError as err:
            yield TriggerEvent({"status": "error", "reason": "not_found", "message": str(err)})
        except JetStreamConfigError as err:
            yield TriggerEvent({"status": "error", "reason": "invalid", "message": str(err)})
        except JetStreamPermissionError as err:
            yield TriggerEvent({"status": "error", "reason": "permission", "message": str(err)})
        except JetStreamError as err:
            yield TriggerEvent({"status": "error", "reason": "error", "message": str(err)})
        except nats.errors.ConnectionClosedError:
            message = f"connection {self.jetstream_conn_id!r}: the NATS connection closed (reconnects exhausted)"
            yield TriggerEvent({"status": "error", "reason": "connection_closed", "message": message})
