"""The first stream sequence stored at or after a time, as the server answers it (Spark's ``startingTime``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from nats.aio.client import Client
from nats.aio.msg import Msg

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.errors import JetStreamError
from airflow_provider_jetstream.core.protocol import HEARTBEAT, REQUEST_DONE, parse_ack_reply
from airflow_provider_jetstream.core.read.pull import PullRequests, create_ephemeral_consumer, discard_consumer


async def first_sequence_at(
    nc: Client,
    stream: str,
    when_iso: str,
    *,
    api_prefix: str = "$JS.API",
    filter_subjects: Sequence[str] = (),
    timeout: float = 10.0,
) -> int | None:
    """The sequence of the first message stored at or after ``when_iso`` (RFC 3339), or None.

    The server answers it: a consumer of this call's own that delivers by start time is pulled for one
    message, whose sequence its ack reply names.
    """
    api = JetStreamApi(nc, api_prefix, timeout=timeout)
    where = f"stream {stream!r} in {describe_prefix(api_prefix)}"
    name, pending = await create_ephemeral_consumer(
        api, stream, where=where, start_time=when_iso, filter_subjects=filter_subjects, inactive_threshold=30.0,
        kind="seek",
    )  # fmt: skip
    requests = PullRequests(nc, api_prefix, stream, name, expires=timeout, heartbeat=timeout / 2, pipelined=False)
    try:
        if pending == 0:
            return None
        answer: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()

        async def on_message(msg: Msg) -> None:
            meta = parse_ack_reply(msg.reply)
            status = None if meta is not None else requests.status(msg.headers)
            if answer.done() or (status is not None and status.outcome == HEARTBEAT):
                return
            if meta is not None:
                answer.set_result(meta.sequence)
            elif status is None or status.outcome == REQUEST_DONE:
                answer.set_result(None)
            else:
                answer.set_exception(JetStreamError(f"{where}: the server answered {status.reason}"))

        await requests.listen(on_message)
        await requests.ask(1)
        return await asyncio.wait_for(answer, timeout + 1)
    finally:
        await requests.close()
        await discard_consumer(api, stream, name)
