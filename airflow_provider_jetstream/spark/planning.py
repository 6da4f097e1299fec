"""Driver-side planning: a stream's sequence bounds, the range a read covers, and its partitions.

Stream sequences are the offsets: a range ``[start, end]`` names exactly the messages a task
reads, so the same options over the same stored data always give the same rows, and a retried
task reads the same messages again.

Airflow-free: it runs in Spark's planner processes.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.errors import (
    JetStreamDataLossError,
    JetStreamNotFoundError,
)
from airflow_provider_jetstream.core.read.identity import stream_created
from airflow_provider_jetstream.core.read.seek import first_sequence_at
from airflow_provider_jetstream.spark.options import ReadOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamBounds:
    """What the stream holds now: sequences ``first..last`` (``first = last + 1`` when empty), the domain
    that holds it, and its identity (``created``, see :mod:`airflow_provider_jetstream.core.read.identity`)."""

    first: int
    last: int
    domain: str | None
    created: str | None = None


def target_name(options: ReadOptions) -> str:
    return f"stream {options.stream!r} in {describe_prefix(options.api_prefix)}"


async def stream_bounds(nc: Client, options: ReadOptions) -> StreamBounds:
    """The stream's first and last sequence, the JetStream domain that holds it, and its identity."""
    api = JetStreamApi(nc, options.api_prefix, timeout=options.pull.request_timeout)
    info = await api.stream_info(options.stream)
    if info is None:
        raise JetStreamNotFoundError(f"{target_name(options)} does not exist")
    account = await api.account_info()
    state = info["state"]
    first = max(state.get("first_seq", 0), 1)
    last = state.get("last_seq", 0)
    if state.get("messages", 0) == 0:
        first = last + 1
    return StreamBounds(first=first, last=last, domain=account.get("domain") or None, created=stream_created(info))


async def resolve_start(nc: Client, options: ReadOptions, bounds: StreamBounds) -> int:
    """The first sequence to read, from startingSequence / startingTime and what the stream holds."""
    if options.starting_time is not None:
        seq = await first_sequence_at(
            nc,
            options.stream,
            options.starting_time,
            api_prefix=options.api_prefix,
            filter_subjects=options.filter_subjects,
            timeout=options.pull.request_timeout,
        )
        return bounds.last + 1 if seq is None else seq
    starting = options.starting_sequence
    if starting == "earliest":
        return bounds.first
    if starting == "latest":
        return bounds.last + 1
    assert isinstance(starting, int)
    if starting < bounds.first and starting <= bounds.last:
        gone = f"{starting}-{bounds.first - 1}" if bounds.first - 1 > starting else str(starting)
        if options.fail_on_data_loss:
            raise JetStreamDataLossError(
                f"{target_name(options)}: startingSequence={starting} but the stream's first stored sequence is "
                f"{bounds.first}: sequences {gone} are gone. Set failOnDataLoss=false to start at {bounds.first}."
            )
        log.warning("%s: sequences %s are gone; starting at %d", target_name(options), gone, bounds.first)
        return bounds.first
    return starting


def resolve_end(options: ReadOptions, bounds: StreamBounds) -> int:
    """The last sequence of a batch read: endingSequence, at most the stream's last sequence."""
    ending = options.ending_sequence
    if ending == "latest":
        return bounds.last
    assert isinstance(ending, int)
    if ending > bounds.last:
        log.warning(
            "%s: endingSequence=%d is past the stream's last sequence %d; reading up to %d",
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
