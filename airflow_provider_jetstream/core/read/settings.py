"""How a range is read: which reader (vectorised where numpy and pyarrow are installed) and the pull's tuning."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from airflow_provider_jetstream.core.arguments import DEFAULT, Arg
from airflow_provider_jetstream.core.arguments.values import choice
from airflow_provider_jetstream.core.read.pull import PullRequests

#: The range readers: frames parsed in bulk into Arrow columns, or nats-py's message objects.
READERS = ("vectorised", "nats-py")

#: The ``reader`` of every range read (:func:`~airflow_provider_jetstream.core.read.range.read_range`, the
#: Spark option, the packaged job's ``--reader``); None or ``""``: :func:`default_reader`.
READER = Arg(
    choice(READERS, words=f"use {' or '.join(READERS)}"),
    None,
    DEFAULT,
    "vectorised (frames parsed in bulk into Arrow; needs numpy and pyarrow) or nats-py; default: vectorised "
    "where numpy and pyarrow are installed",
)


def default_reader() -> str:
    """``"vectorised"`` where numpy and pyarrow are installed, else ``"nats-py"``."""
    available = all(importlib.util.find_spec(name) is not None for name in ("numpy", "pyarrow"))
    return "vectorised" if available else "nats-py"


@dataclass(frozen=True)
class PullSettings:
    """How a range is pulled. The defaults suit 100-byte to 100-kB messages.

    :param max_buffered_messages: messages requested from the server but not yet handed to the
        caller, at most. Default 20,000.
    :param max_buffered_bytes: bytes one pull request may return (``max_bytes``). Default 16 MiB.
    :param chunk_messages: messages per chunk handed to the caller, at most (a chunk also ends at
        ``max_buffered_bytes`` of payload, and at half of ``max_buffered_messages``). Default 10,000.
    :param expires: seconds a pull request waits on the server. Default 30.
    :param heartbeat: seconds between the server's idle heartbeats while a request waits; after
        3 heartbeats without any sign of the server the read is resumed from where it stopped.
        Default 5.
    :param inactive_threshold: seconds after which the server deletes a consumer nobody pulls
        from (a reader that died). Default 120.
    :param max_resumes: times in a row a read resumes (a new consumer) before failing; on a cluster's
        connection, resumes go on for as long as a failover may last (the API's ``failover``). Default 3.
    :param request_timeout: seconds to wait for a JetStream API answer. Default 10.
    """

    max_buffered_messages: int = 20_000
    max_buffered_bytes: int = 16 * 1024 * 1024
    chunk_messages: int = 10_000
    expires: float = 30.0
    heartbeat: float = 5.0
    inactive_threshold: float = 120.0
    max_resumes: int = 3
    request_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.heartbeat * 2 > self.expires:
            raise ValueError(f"heartbeat={self.heartbeat} must be at most half of expires={self.expires}")
        for name in ("max_buffered_messages", "max_buffered_bytes", "chunk_messages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")

    def requests(self) -> PullRequests:
        """The pull requests of a range read: ``expires``, ``heartbeat``, at most ``max_buffered_bytes`` each."""
        return PullRequests(self.expires, self.heartbeat, self.max_buffered_bytes)
