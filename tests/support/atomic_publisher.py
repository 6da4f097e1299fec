"""An atomic-batch publish in a process of its own, for a test to kill mid-batch.

``python -m tests.support.atomic_publisher URL USER PASSWORD SUBJECT COUNT TAG`` publishes COUNT messages
(payload: the index, padded to 1 KB) with the ids ``TAG/<index>`` through
:func:`~airflow_provider_jetstream.core.publish.engine.publish_messages` in atomic batches of 1000, and prints its
tally.
"""

from __future__ import annotations

import asyncio
import sys

import nats

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.atomic import AtomicBatches, atomic_target
from airflow_provider_jetstream.core.publish.engine import publish_messages


def messages(subject: str, count: int, tag: str) -> list[tuple[str, bytes, dict[str, str]]]:
    """The messages the publisher sends (a test repeats them): payload the index, padded to 1 KB."""
    return [(subject, str(i).encode().ljust(1024, b"."), {MSG_ID_HEADER: f"{tag}/{i}"}) for i in range(count)]


async def main(url: str, user: str, password: str, subject: str, count: int, tag: str) -> None:
    nc = await nats.connect(url, user=user, password=password)
    target = await atomic_target(JetStreamApi(nc), stream=None, subject=subject, what="atomic publisher")
    summary = await publish_messages(nc, messages(subject, count, tag), mode=AtomicBatches(target))
    print(summary.counts(), "batches", summary.batches, flush=True)
    await nc.close()


if __name__ == "__main__":
    url, user, password, subject, count, tag = sys.argv[1:7]
    asyncio.run(main(url, user, password, subject, int(count), tag))
