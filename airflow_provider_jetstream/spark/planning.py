"""Driver-side planning: a stream's sequence bounds, the range a read covers, and its partitions.

Stream sequences are the offsets: a range ``[start, end]`` names exactly the messages a task
reads, so the same options over the same stored data always give the same rows, and a retried
task reads the same messages again.

A time window ``[startTime, endTime)`` becomes such a range too: a stream's timestamps rise with its
sequences, so the server's answer to "where does this time fall" (:mod:`airflow_provider_jetstream.core.read.seek`)
is a sequence bound. The window is *closed* (no message of it can still be stored) once the stream
holds a message stored at or after ``endTime``, or once the server's clock has passed ``endTime``
on a stream that stamps its own messages (a mirror keeps its origin's stamps: only a later message closes
its windows). See :func:`range_end`.

Airflow-free: it runs in Spark's planner processes.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.arguments.durations import instant
from airflow_provider_jetstream.core.arguments.names import check_stream_filter
from airflow_provider_jetstream.core.errors import (
    JetStreamDataLossError,
    JetStreamNotFoundError,
    WindowOpenError,
)
from airflow_provider_jetstream.core.read.identity import stream_created
from airflow_provider_jetstream.core.read.seek import time_boundary
from airflow_provider_jetstream.spark.options import ReadOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamBounds:
    """What the stream holds now: sequences ``first..last`` (``first = last + 1`` when empty), the domain
    that holds it, its identity (``created``, see :mod:`airflow_provider_jetstream.core.read.identity`), the
    server's time when it answered (``server_time``, RFC 3339) and whether it is a ``mirror``."""

    first: int
    last: int
    domain: str | None
    created: str | None = None
    server_time: str | None = None
    mirror: bool = False


@dataclass(frozen=True)
class RangeEnd:
    """The last sequence of a read; ``closed`` False: the read ends at a time (``endTime``) that messages
    may still reach (see :func:`range_end`), and ``last`` is the stream's last sequence when asked."""

    last: int
    closed: bool = True


def target_name(options: ReadOptions) -> str:
    return f"stream {options.stream!r} in {describe_prefix(options.api_prefix)}"


async def stream_bounds(nc: Client, options: ReadOptions) -> StreamBounds:
    """The stream's first and last sequence, the JetStream domain that holds it, and its identity; a
    ``filterSubjects`` that overlaps none of the stream's subjects is refused (the read would be empty)."""
    api = JetStreamApi(nc, options.api_prefix, timeout=options.pull.request_timeout)
    info = await api.stream_info(options.stream)
    if info is None:
        raise JetStreamNotFoundError(f"{target_name(options)} does not exist")
    check_stream_filter(options.filter_subjects, info.get("config") or {}, "filterSubjects", target_name(options))
    account = await api.account_info()
    state = info["state"]
    first = max(state.get("first_seq", 0), 1)
    last = state.get("last_seq", 0)
    if state.get("messages", 0) == 0:
        first = last + 1
    return StreamBounds(
        first=first,
        last=last,
        domain=account.get("domain") or None,
        created=stream_created(info),
        server_time=info.get("ts"),
        mirror=bool((info.get("config") or {}).get("mirror")),
    )


async def resolve_start(nc: Client, options: ReadOptions, bounds: StreamBounds) -> int:
    """The first sequence to read, from startSeq / startTime and what the stream holds."""
    if options.start_time is not None:
        boundary = await time_boundary(
            nc,
            options.stream,
            options.start_time,
            api_prefix=options.api_prefix,
            timeout=options.pull.request_timeout,
        )
        return boundary.first_at
    starting = options.start_seq
    if starting == "earliest":
        return bounds.first
    if starting == "latest":
        return bounds.last + 1
    assert isinstance(starting, int)
    if starting < bounds.first and starting <= bounds.last:
        gone = f"{starting}-{bounds.first - 1}" if bounds.first - 1 > starting else str(starting)
        if options.fail_on_data_loss:
            raise JetStreamDataLossError(
                f"{target_name(options)}: startSeq={starting} but the stream's first stored sequence is "
                f"{bounds.first}: sequences {gone} are gone. Set failOnDataLoss=false to start at {bounds.first}."
            )
        log.warning("%s: sequences %s are gone; starting at %d", target_name(options), gone, bounds.first)
        return bounds.first
    return starting


async def range_end(nc: Client, options: ReadOptions, bounds: StreamBounds) -> RangeEnd:
    """The last sequence of a batch read: endSeq (at most the stream's last), or the last stored before
    endTime; ``bounds`` must have been read before this call (its server time closes a window).

    The window ``[startTime, endTime)`` holds every message stored at or after its start and before
    its end (the server compares at nanoseconds; the ``timestamp`` column shows microseconds). It is closed
    when the stream holds a message stored at or after ``endTime`` (its sequence is higher than every
    message of the window, so none can be added), or when the server's clock had passed ``endTime`` when
    ``bounds`` were read and the stream is not a mirror (it stamps what it stores, so a message it stores
    from then on is stamped later). Otherwise it is open: messages may still arrive (the end is in the
    future, a leaf cut off has not replicated them yet, a mirror's origin is ahead).
    """
    if options.end_time is None:
        return RangeEnd(resolve_end(options, bounds))
    boundary = await time_boundary(
        nc, options.stream, options.end_time, api_prefix=options.api_prefix, timeout=options.pull.request_timeout
    )
    clock_past = (
        not bounds.mirror and bounds.server_time is not None and instant(bounds.server_time) > instant(options.end_time)  # type: ignore[operator]
    )
    return RangeEnd(boundary.before, boundary.reached or clock_past)


def open_window(options: ReadOptions, end: RangeEnd, bounds: StreamBounds) -> str:
    """Why a read up to endTime is not complete yet (``end`` not closed)."""
    why = "it is a mirror (its origin stamps its messages)" if bounds.mirror else "its clock has not passed it"
    return (
        f"{target_name(options)}: the window before endTime={options.end_time} is still open: the stream "
        f"holds no message stored at or after it (it holds sequences up to {end.last}) and {why}; messages of "
        "the window may still arrive (the end is ahead, or a leaf domain has not replicated them yet)"
    )


def check_window(options: ReadOptions, end: RangeEnd, bounds: StreamBounds) -> None:
    """Fail a batch read whose window is open (:class:`WindowOpenError`), or with failOnOpenWindow=false warn."""
    if end.closed:
        return
    if options.fail_on_open_window:
        raise WindowOpenError(
            f"{open_window(options, end, bounds)}. Read again later, or set failOnOpenWindow=false to read what is "
            "stored now"
        )
    log.warning("%s; reading what is stored now (failOnOpenWindow=false)", open_window(options, end, bounds))


def resolve_end(options: ReadOptions, bounds: StreamBounds) -> int:
    """The last sequence of a read bounded by sequences: endSeq, at most the stream's last sequence."""
    ending = options.end_seq
    if ending == "latest":
        return bounds.last
    assert isinstance(ending, int)
    if ending > bounds.last:
        log.warning(
            "%s: endSeq=%d is past the stream's last sequence %d; reading up to %d",
            target_name(options),
            ending,
            bounds.last,
            bounds.last,
        )
        return bounds.last
    return ending


def split_range(start: int, end: int, partitions: int, max_per_partition: int | None = None) -> list[tuple[int, int]]:
    """Split ``[start, end]`` into contiguous, equal-sized sequence ranges.

    :param partitions: how many ranges at least (fewer only when there are fewer sequences).
    :param max_per_partition: more ranges if one would span more sequences than this.
    """
    count = end - start + 1
    if count <= 0:
        return []
    wanted = max(1, partitions)
    if max_per_partition:
        wanted = max(wanted, math.ceil(count / max_per_partition))
    wanted = min(wanted, count)
    size, extra = divmod(count, wanted)
    ranges = []
    first = start
    for index in range(wanted):
        last = first + size - 1 + (1 if index < extra else 0)
        ranges.append((first, last))
        first = last + 1
    return ranges
