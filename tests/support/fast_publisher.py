"""A fast-ingest publish in a process of its own, for a test to kill mid-batch.

``python -m tests.support.fast_publisher URL USER PASSWORD SUBJECT COUNT TAG`` publishes COUNT
messages (payload: the index) with the ids ``TAG/<index>`` (as the hook's ``msg_id="TAG/{index}"``)
through the publish engine's fast-ingest path, and prints its tally.
"""

from __future__ import annotations

import asyncio
import sys

import nats

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.engine import publish_messages
from airflow_provider_jetstream.core.publish.fast_ingest import batch_target


async def main(url: str, user: str, password: str, subject: str, count: int, tag: str) -> None:
    nc = await nats.connect(url, user=user, password=password)
    target = await batch_target(JetStreamApi(nc), subject)
    assert target is not None, f"no stream with allow_batched stores {subject!r}"
    messages = ((subject, str(i).encode(), {MSG_ID_HEADER: f"{tag}/{i}"}) for i in range(count))
    summary = await publish_messages(nc, messages, mode=target)
    print(summary.counts(), "batches", summary.batches, flush=True)
    await nc.close()


if __name__ == "__main__":
    url, user, password, subject, count, tag = sys.argv[1:7]
    asyncio.run(main(url, user, password, subject, int(count), tag))
