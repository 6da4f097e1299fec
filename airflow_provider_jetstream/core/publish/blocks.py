"""Messages in bulk: a :class:`Block` of many messages to one subject, and the runs of them a batch sent.

A block holds its messages as columns (payloads, ids), so that the fast-ingest sender frames them a run at
a time (:meth:`~airflow_provider_jetstream.core.publish.frames.FrameBuffer.add_block`) instead of building a
tuple and a header dict per message; the per-message engine and atomic batches take it apart
(:func:`one_by_one`, :func:`expand`). The Spark writer makes one of each record batch, the publish operator
of each thousand messages of a list. Airflow-free: Spark executors import it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.summary import Outgoing


@dataclass(frozen=True)
class Block:
    """Messages to one ``subject`` in bulk: ``payloads[i]`` with the headers ``headers`` (every message's,
    in order), ``msg_ids[i]`` set as its ``Nats-Msg-Id`` (where ``headers`` has that name, in its place,
    else last); or, with ``each``, ``each[i]`` as its own headers (then neither ``headers`` nor ``msg_ids``).
    :meth:`message` gives message ``i`` as the tuple the per-message engine sends."""

    subject: str
    payloads: Sequence[bytes]
    headers: Mapping[str, str] | None = None
    msg_ids: Sequence[str] | None = None
    each: Sequence[Mapping[str, str] | None] | None = None

    def __post_init__(self) -> None:
        for column in (self.msg_ids, self.each):
            if column is not None and len(column) != len(self.payloads):
                raise ValueError(f"a block of {len(self.payloads)} payloads has a column of {len(column)}")
        if self.each is not None and (self.headers is not None or self.msg_ids is not None):
            raise ValueError("a block's own headers per message (each) exclude shared headers and msg_ids")

    def __len__(self) -> int:
        return len(self.payloads)

    def message(self, i: int) -> Outgoing:
        """Message ``i`` as ``(subject, payload, headers or None)``."""
        if self.each is not None:
            own = self.each[i]
            return self.subject, self.payloads[i], dict(own) if own else None
        if self.msg_ids is None:
            return self.subject, self.payloads[i], dict(self.headers) if self.headers else None
        headers = dict(self.headers or {})
        headers[MSG_ID_HEADER] = self.msg_ids[i]
        return self.subject, self.payloads[i], headers

    def messages(self, start: int = 0) -> Iterator[Outgoing]:
        """Each message from ``start`` on."""
        return (self.message(i) for i in range(start, len(self.payloads)))

    def slice(self, start: int, stop: int | None = None) -> Block:
        """Messages ``start`` to ``stop`` (default: the last) as a block."""
        return Block(
            self.subject,
            self.payloads[start:stop],
            self.headers,
            None if self.msg_ids is None else self.msg_ids[start:stop],
            None if self.each is None else self.each[start:stop],
        )


#: What a publish takes: single messages, blocks of them, or both.
Item = Outgoing | Block


def numbered(items: Iterable[Item], index: int = 0) -> Iterator[tuple[int, Item]]:
    """Each item with the index of its (first) message, from ``index``: a block of n messages takes n."""
    for item in items:
        yield index, item
        index += len(item) if isinstance(item, Block) else 1


def expand(items: Iterable[Item]) -> Iterator[Outgoing]:
    """Each message of ``items``, blocks taken apart."""
    for item in items:
        if isinstance(item, Block):
            yield from item.messages()
        else:
            yield item


def one_by_one(items: Iterable[tuple[int, Item]]) -> Iterator[tuple[int, Outgoing]]:
    """``(index, message)`` of each message, blocks taken apart."""
    for index, item in items:
        if isinstance(item, Block):
            yield from enumerate(item.messages(), index)
        else:
            yield index, item


class Sent:
    """The messages of a fast-ingest batch sent and not known persisted, as runs ``[first batch seq, index,
    item, start, stop]``: messages ``start`` to ``stop`` of a block, or one message (0 to 1)."""

    def __init__(self) -> None:
        self.runs: deque[list[Any]] = deque()

    def __bool__(self) -> bool:
        return bool(self.runs)

    def drop_through(self, seq: int) -> None:
        """Forget the messages up to batch sequence ``seq`` (persisted)."""
        runs = self.runs
        while runs and runs[0][0] <= seq:
            run = runs[0]
            persisted = seq - run[0] + 1
            if persisted >= run[4] - run[3]:
                runs.popleft()
                continue
            run[0] += persisted
            run[1] += persisted
            run[3] += persisted
            return

    def first_seq(self) -> int | None:
        return self.runs[0][0] if self.runs else None

    def pop_first(self) -> tuple[int, Outgoing]:
        """The first message, forgotten: ``(index, message)``."""
        _, index, item, start, _ = self.runs[0]
        self.drop_through(self.runs[0][0])
        return index, item.message(start) if isinstance(item, Block) else item

    def messages(self) -> Iterator[tuple[int, int, Outgoing]]:
        """``(batch seq, index, message)`` of each."""
        for seq, index, item, start, stop in self.runs:
            for k in range(stop - start):
                yield seq + k, index + k, item.message(start + k) if isinstance(item, Block) else item
