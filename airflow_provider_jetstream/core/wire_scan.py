"""Finding JetStream data frames in a buffer of NATS wire bytes with numpy: no Python step per frame.

:func:`scan_data_frames` parses every offset after a LF as if a frame began there, all at once:
one pass over the bytes for LF, space and dot positions, then the control line's fields, the sid
and the ``$JS.ACK.`` prefix compared as whole words, and the ack reply's numbers parsed eight digits
at a time (SWAR on unaligned uint64 words). Which candidates are real frames is decided by the
caller, :mod:`airflow_provider_jetstream.core.wire`, by chaining them from a known frame boundary.
"""

from __future__ import annotations

import numpy as np

#: The columns of a data frame row. The first :data:`OFFSET_FIELDS` are byte offsets into the
#: buffers handed over with it: subject start and end, sid end, reply end, control line end (its
#: CR) and the consumer name's start in the ack reply. Then header size and total size (0 and the
#: payload size without headers), the consumer name's length, and from the ack reply the stream
#: sequence, the timestamp (ns) and the pending count.
(SUBJECT, SUBJECT_END, SID_END, REPLY_END, LINE_END, CONSUMER,
 HEADER_SIZE, SIZE, CONSUMER_LEN, SEQUENCE, TIMESTAMP, PENDING) = range(12)  # fmt: skip
RECORD_FIELDS = 12
OFFSET_FIELDS = 6
ACK_PREFIX = b"$JS.ACK."
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


def scan_data_frames(buf: bytes, sids: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every complete, well-formed MSG/HMSG frame in ``buf`` of one of ``sids`` with an ack reply.

    Vectorised: each position after a LF (and 0) that starts with ``MSG `` or ``HMSG `` is a
    candidate, parsed as if a frame started there. A payload can hold bytes that look like a frame,
    so the caller only trusts a candidate at an offset where the previous frame ended (see
    :class:`_Runs`). Returns the candidates' start and end offsets, their records (columns as in
    :data:`RECORD_FIELDS`) and the index in ``sids`` of each one's sid.
    """
    n = len(buf)
    arr = np.frombuffer(buf, np.uint8)
    words = unaligned_words(buf)
    marks = np.flatnonzero((arr == 10) | (arr == 32) | (arr == 46))
    kinds = arr[marks]
    lf, sp, dots = marks[kinds == 10], marks[kinds == 32], marks[kinds == 46]
    starts = lf + 1
    starts = starts[starts + 8 <= n]
    if n >= 8:
        starts = np.concatenate((np.zeros(1, np.int64), starts))
    if not len(starts) or not len(sp) or not len(dots):
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros((0, RECORD_FIELDS), np.int64), empty
    op = unaligned_words(buf, 4)[starts]
    headed = (op == _HMSG_WORD) & (arr[starts + 4] == 32)
    keep = headed | (op == _MSG_WORD)
    starts, hm = starts[keep], headed[keep].astype(np.int64)
    subject = starts + 4 + hm
    line = np.searchsorted(lf, subject)
    complete = line < len(lf)
    starts, hm, subject, line = starts[complete], hm[complete], subject[complete], line[complete]
    eol = lf[line] - 1
    first, past = np.searchsorted(sp, subject), np.searchsorted(sp, eol)
    # MSG <subject> <sid> <reply> <size> / HMSG <subject> <sid> <reply> <header size> <size>
    shaped = (past - first == 3 + hm) & (arr[eol] == 13)
    starts, hm, subject, eol, first, past = (a[shaped] for a in (starts, hm, subject, eol, first, past))
    s1, s2, last = sp[first], sp[first + 1], sp[past - 1]
    r_end = np.where(hm == 1, sp[np.maximum(past - 2, 0)], last)
    size, ok = _uints(words, last + 1, eol)
    if hm.any():
        hsize, ok_h = _uints(words, r_end + 1, last)
        hsize = np.where(hm == 1, hsize, 0)
        ok &= ok_h | (hm == 0)
    else:
        hsize = np.zeros_like(size)
    end = eol + 4 + size
    tail = np.minimum(end, n)
    ok &= (s1 > subject) & (r_end - s2 > len(ACK_PREFIX)) & (hsize <= size) & (end <= n)
    ok &= (arr[tail - 2] == 13) & (arr[tail - 1] == 10)
    ok &= words[np.minimum(s2 + 1, len(words) - 1)] == _ACK_WORD
    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> (9 tokens), or with
    # <domain>.<account hash> after ACK (11), and a trailing random token (12).
    first_dot = np.searchsorted(dots, s2)
    dot_count = np.searchsorted(dots, r_end) - first_dot
    ok &= (dot_count == 8) | (dot_count == 10) | (dot_count == 11)
    base = first_dot + np.where(dot_count >= 10, 2, 0)
    top = len(dots) - 1

    def dot(j: int) -> np.ndarray:
        return dots[np.minimum(base + j, top)]

    consumer = dot(2) + 1
    sequence, ok_s = _uints(words, dot(4) + 1, dot(5))
    stamp, ok_t = _uints(words, dot(6) + 1, dot(7))
    pending, ok_p = _uints(words, dot(7) + 1, np.where(dot_count == 11, dot(8), r_end))
    ok &= ok_s & ok_t & ok_p
    which = np.full(len(starts), -1, np.int64)
    sid_len = s2 - s1 - 1
    for index, sid in enumerate(sids):
        match = ok & (sid_len == len(sid))
        for k, byte in enumerate(sid):
            match &= arr[np.minimum(s1 + 1 + k, n - 1)] == byte
        which[match] = index
    records = np.stack(
        (subject, s1, s2, r_end, eol, consumer, hsize, size, dot(3) - consumer, sequence, stamp, pending), axis=1
    )
    found = which >= 0
    if found.all():
        return starts, end, records, which
    return starts[found], end[found], records[found], which[found]
