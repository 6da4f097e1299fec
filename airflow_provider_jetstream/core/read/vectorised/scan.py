"""Finding JetStream data frames in a buffer of NATS wire bytes with numpy: no Python step per frame.

:func:`scan_data_frames` parses every offset after a LF as if a frame began there, all at once:
one pass over the bytes for LF, space and dot positions (in cache-sized steps), then the control
line's fields found by counting spaces (a control line has a fixed number), the sid and the
``$JS.ACK.`` prefix compared as whole words, and the frame sizes parsed eight digits at a time
(SWAR on unaligned uint64 words).
Which candidates are real frames is decided by the caller,
:mod:`airflow_provider_jetstream.core.read.vectorised.tap`, by chaining them from a known frame boundary. The
ack reply's numbers are only located here: :mod:`airflow_provider_jetstream.core.read.vectorised.columns`
parses them for the frames that chain, in one Arrow cast.
"""

from __future__ import annotations

import numpy as np

from airflow_provider_jetstream.core import protocol

#: The columns of a data frame row. The first :data:`OFFSET_FIELDS` are byte offsets into the
#: buffers handed over with it: subject start and end, sid end, reply end, control line end (its
#: CR), the consumer name's start in the ack reply, and the start and end of the stream sequence,
#: the timestamp (ns) and the pending count in the ack reply (in wire order, so that columns
#: ``SEQUENCE`` to ``PENDING_END`` are the bounds of the three numbers, one after another). Then
#: header size and total size (0 and the payload size without headers) and the consumer name's
#: length.
(SUBJECT, SUBJECT_END, SID_END, REPLY_END, LINE_END, CONSUMER, SEQUENCE, SEQUENCE_END, TIMESTAMP,
 TIMESTAMP_END, PENDING, PENDING_END, HEADER_SIZE, SIZE, CONSUMER_LEN) = range(15)  # fmt: skip
RECORD_FIELDS = 15
OFFSET_FIELDS = 12
ACK_PREFIX = protocol.ACK_PREFIX.encode()
# Little-endian words of the bytes they stand for.
_ACK_WORD = np.frombuffer(ACK_PREFIX, "<u8")[0]
_MSG_WORD = np.frombuffer(b"MSG ", "<u4")[0]
_HMSG_WORD = np.frombuffer(b"HMSG", "<u4")[0]
_INT64_MAX = np.uint64(2**63 - 1)


_ZEROS = np.uint64(0x3030303030303030)  # "00000000"
_HIGH_NIBBLES = np.uint64(0xF0F0F0F0F0F0F0F0)
_SIXES = np.uint64(0x0606060606060606)
#: FIRST_BYTES[j] keeps the lowest j bytes of a little-endian word (its first j characters).
FIRST_BYTES = np.array([(1 << (8 * j)) - 1 for j in range(9)], np.uint64)
_SCALE = [np.uint64(10 ** (8 * c)) for c in range(3)]


def unexpected_ack_reply(reply: bytes) -> ValueError:
    """The error for a tapped frame whose ``$JS.ACK.`` reply is not one of the known layouts."""
    return ValueError(f"unexpected JetStream ack reply subject {reply[:200]!r}")


def unaligned_words(buf: bytes | np.ndarray, size: int = 8) -> np.ndarray:
    """``buf`` as overlapping little-endian unsigned words of ``size`` bytes: element i is bytes
    i..i+size-1 (no copy)."""
    return np.ndarray((max(len(buf) - size + 1, 0),), np.dtype(f"<u{size}"), buffer=buf, strides=(1,))


def _uints(words: np.ndarray, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decimal numbers ``buf[begin:end]`` (``words`` from :func:`unaligned_words`) as int64, and which
    are valid (1 to 19 digits, all digits, below 2**63); an invalid one's value is 0.

    Eight digits at a time with SWAR: the 8 bytes ending at a chunk's last digit are one word,
    leading bytes outside the number become "0", and three multiply-shift steps turn the 8 digits
    into their value. No per-digit arrays.
    """
    length = end - begin
    ok = (length >= 1) & (length <= 19)
    value = np.zeros(len(begin), np.uint64)
    chunks = int(-(-length.max() // 8)) if len(length) else 0
    for c in range(min(chunks, 3)):
        first = end - 8 * (c + 1)
        leading = FIRST_BYTES[np.minimum(np.maximum(begin - first, 0), 8)]
        word = words[np.maximum(first, 0)]
        word = (word & ~leading) | (_ZEROS & leading)
        ok &= ((word & _HIGH_NIBBLES) == _ZEROS) & (((word + _SIXES) & _HIGH_NIBBLES) == _ZEROS)
        ok &= (first >= 0) | (begin >= first + 8)
        digits = word - _ZEROS
        digits = (digits * np.uint64(10) + (digits >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
        digits = (digits * np.uint64(100) + (digits >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
        digits = (digits * np.uint64(10000) + (digits >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
        value += digits * _SCALE[c]
    ok &= value <= _INT64_MAX
    return np.where(ok, value, 0).astype(np.int64), ok


#: Bytes looked at per step in :func:`_marks`, with two masks of this size reused from step to
#: step: cache-sized. Masks of a whole held buffer (up to 1 MiB) would be fresh memory on every
#: scan (page faults, cache misses).
_MARK_CHUNK = 1 << 17


def _marks(arr: np.ndarray) -> np.ndarray:
    """The offsets of every LF, space and dot in ``arr``, after a -1 (a LF just before it)."""
    chunk = min(len(arr), _MARK_CHUNK)
    hit, other = np.empty(chunk, bool), np.empty(chunk, bool)
    pieces = [np.array([-1], np.int64)]
    for begin in range(0, len(arr), chunk):
        part = arr[begin : begin + chunk]
        size = len(part)
        found, other_part = hit[:size], other[:size]
        np.equal(part, 10, out=found)
        np.equal(part, 32, out=other_part)
        np.logical_or(found, other_part, out=found)
        np.equal(part, 46, out=other_part)
        np.logical_or(found, other_part, out=found)
        offsets = np.flatnonzero(found)
        offsets += begin
        pieces.append(offsets)
    return np.concatenate(pieces)


def _no_frames() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    none = np.zeros(0, np.int64)
    return none, none, np.zeros((0, RECORD_FIELDS), np.int64), none


def scan_data_frames(buf: bytes, sids: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every complete, well-formed MSG/HMSG frame in ``buf`` of one of ``sids`` with an ack reply.

    Vectorised: each position after a LF (and 0) that starts with ``MSG `` or ``HMSG `` is a
    candidate, parsed as if a frame started there. A payload can hold bytes that look like a frame,
    so the caller only trusts a candidate at an offset where the previous frame ended (see
    :class:`~airflow_provider_jetstream.core.read.vectorised.tap._Runs`). Returns the candidates' start and end
    offsets, their records (columns as in :data:`RECORD_FIELDS`) and the index in ``sids`` of each
    one's sid.
    """
    n = len(buf)
    if n < 8:
        return _no_frames()
    arr = np.frombuffer(buf, np.uint8)
    words = unaligned_words(buf)
    marks = _marks(arr)
    kinds = arr[marks]
    kinds[0] = 10  # the -1 mark: a LF just before the buffer (a frame may start at 0)
    lf_at, sp_at = np.flatnonzero(kinds == 10), np.flatnonzero(kinds == 32)
    if not len(sp_at):
        return _no_frames()
    starts = marks[lf_at] + 1
    op = unaligned_words(buf, 4)[np.minimum(starts, n - 8)]
    headed = (op == _HMSG_WORD) & (arr[np.minimum(starts + 4, n - 1)] == 32)
    line = np.flatnonzero((headed | (op == _MSG_WORD)) & (starts + 8 <= n))
    at, starts, hm = lf_at[line], starts[line], headed[line].astype(np.int64)
    # MSG <subject> <sid> <reply> <size> / HMSG <subject> <sid> <reply> <header size> <size>: the
    # candidate's spaces are the next 4 or 5 after its LF, and the mark after its last space must
    # be the next LF.
    first = np.searchsorted(sp_at, at)
    last_space = len(sp_at) - 1
    last_at = sp_at[np.minimum(first + 3 + hm, last_space)]
    shaped = (first + 3 + hm <= last_space) & (last_at + 1 == lf_at[np.minimum(line + 1, len(lf_at) - 1)])
    starts, hm, first, last_at = (a[shaped] for a in (starts, hm, first, last_at))
    eol_at = last_at + 1
    sid_at, reply_at = sp_at[first + 2], sp_at[first + 3]
    subject, eol = starts + 4 + hm, marks[eol_at] - 1
    s1, s2, r_end, last = marks[sp_at[first + 1]], marks[sid_at], marks[reply_at], marks[last_at]
    size, ok = _uints(words, last + 1, eol)
    if hm.any():
        hsize, ok_h = _uints(words, r_end + 1, last)
        hsize = np.where(hm == 1, hsize, 0)
        ok &= ok_h | (hm == 0)
    else:
        hsize = np.zeros_like(size)
    end = eol + 4 + size
    tail = np.minimum(end, n)
    ok &= (arr[eol] == 13) & (s1 > subject) & (r_end - s2 > len(ACK_PREFIX)) & (hsize <= size) & (end <= n)
    ok &= (arr[tail - 2] == 13) & (arr[tail - 1] == 10)
    ok &= words[np.minimum(s2 + 1, len(words) - 1)] == _ACK_WORD
    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> (8 dots), or with
    # <domain>.<account hash> after ACK (10), and a trailing random token (11). The marks between
    # the reply's two spaces are its dots.
    dot_count = reply_at - sid_at - 1
    ok &= (dot_count == 8) | (dot_count == 10) | (dot_count == 11)
    base = sid_at + 1 + np.where(dot_count >= 10, 2, 0)
    last_mark = len(marks) - 1

    def dot(j: int) -> np.ndarray:
        return marks[np.minimum(base + j, last_mark)]

    consumer, sequence, timestamp, timestamp_end = dot(2) + 1, dot(4), dot(6), dot(7)
    pending_end = np.where(dot_count == 11, dot(8), r_end)
    which = np.full(len(starts), -1, np.int64)
    sid_len = s2 - s1 - 1
    for index, sid in enumerate(sids):
        match = ok & (sid_len == len(sid))
        for k, byte in enumerate(sid):
            match &= arr[np.minimum(s1 + 1 + k, n - 1)] == byte
        which[match] = index
    # Built field by field (contiguous copies), used row by row through the transposed view.
    # fmt: off
    records = np.stack((
        subject, s1, s2, r_end, eol, consumer, sequence + 1, dot(5), timestamp + 1, timestamp_end, timestamp_end + 1,
        pending_end, hsize, size, dot(3) - consumer,
    )).T
    # fmt: on
    found = np.flatnonzero(which >= 0)
    if len(found) and found[-1] == len(found) - 1:
        # Usually only the buffer's last frame is incomplete: a prefix, no copy.
        count = len(found)
        return starts[:count], end[:count], records[:count], which[:count]
    return starts[found], end[found], records[found], which[found]
