"""JetStream wire material for unit tests: Hypothesis strategies for names and ack replies, and MSG/HMSG frames."""

from __future__ import annotations

from hypothesis import strategies as st

from airflow_provider_jetstream.core.arguments.names import is_name
from airflow_provider_jetstream.core.protocol import AckReply

#: A stream, consumer or domain name: printable, no whitespace, '.', '*', '>' or path separators.
names = st.text(
    st.characters(whitelist_categories=("L", "N", "P", "S"), blacklist_characters=".*>/\\"), min_size=1, max_size=24
).filter(is_name)
#: A token of the server's own making (the account hash, the random last token).
tokens = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=22)
int64s = st.integers(0, 2**63 - 1)


def ack_reply_subject(meta: AckReply, layout: int, account: str = "ACCHASH", last: str = "r4nd0m") -> str:
    """The reply subject the server gives a delivered message: 9 tokens (before 2.9), or with
    ``<domain>.<account hash>`` after ``$JS.ACK`` (``_``: no domain), 11 tokens, or 12 with a random last one."""
    numbers = f"{meta.delivered}.{meta.sequence}.{meta.consumer_sequence}.{meta.timestamp_ns}.{meta.pending}"
    if layout == 9:
        return f"$JS.ACK.{meta.stream}.{meta.consumer}.{numbers}"
    head = f"$JS.ACK.{meta.domain or '_'}.{account}.{meta.stream}.{meta.consumer}.{numbers}"
    return head if layout == 11 else f"{head}.{last}"


@st.composite
def ack_replies(draw: st.DrawFn, layouts: tuple[int, ...] = (9, 11, 12)) -> tuple[str, AckReply]:
    """``(reply subject, what it says)`` in any layout: the 9-token one has no domain; the others a
    domain or ``_`` (none)."""
    layout = draw(st.sampled_from(layouts))
    domain = None if layout == 9 else draw(st.one_of(st.none(), names.filter(lambda n: n != "_")))
    meta = AckReply(
        draw(names), draw(names), draw(int64s), draw(int64s), draw(int64s), draw(int64s), draw(int64s), domain
    )
    return ack_reply_subject(meta, layout, draw(tokens), draw(tokens)), meta


def msg_frame(subject: bytes, sid: int, reply: bytes, data: bytes) -> bytes:
    """A ``MSG`` frame as the server writes it."""
    return b"MSG %s %d %s %d\r\n%s\r\n" % (subject, sid, reply, len(data), data)


def hmsg_frame(subject: bytes, sid: int, reply: bytes, header: bytes, data: bytes) -> bytes:
    """An ``HMSG`` frame (header block, then payload) as the server writes it."""
    total = len(header) + len(data)
    return b"HMSG %s %d %s %d %d\r\n%s%s\r\n" % (subject, sid, reply, len(header), total, header, data)
