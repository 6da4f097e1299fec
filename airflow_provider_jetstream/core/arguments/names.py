"""Names and subjects: their parsers (streams, consumers, domains, API prefixes, buckets, keys, subjects,
headers) and how they relate (the domain of an API prefix, whether two subject filters overlap).

What the server accepts, checked before any request; each parser is ``parse(value, field)`` and raises
:class:`SpecError` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_provider_jetstream.core.errors import SpecError, UnsafeSubjectError

_NAME_BAD = re.compile(r"[\s.*>/\\]|[\x00-\x1f\x7f]")
_BUCKET_OK = re.compile(r"^[a-zA-Z0-9_-]+$")
_KEY_OK = re.compile(r"^[-/_=.a-zA-Z0-9]+$")
MAX_NAME = 255


def is_name(value: Any) -> bool:
    """Whether ``value`` is a stream, consumer or domain name: 1-255 printable characters without
    whitespace, ``.``, ``*``, ``>`` or path separators."""
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME and not _NAME_BAD.search(value)


def name_of(what: str) -> Callable[[Any, str], str]:
    """The parser of a ``what`` name (stream, consumer...): see :func:`is_name`."""

    def parse(value: Any, field: str) -> str:
        if not is_name(value):
            raise SpecError(
                field,
                value,
                f"a {what} name is 1-{MAX_NAME} printable characters without whitespace, '.', '*', '>', "
                "'/' or '\\' (e.g. 'orders', 'backup-test-leaf')",
            )
        return value

    return parse


stream_name = name_of("stream")
consumer_name = name_of("consumer")


def domain_name(value: Any, field: str = "domain") -> str:
    """A JetStream domain name (the ``<domain>`` of ``$JS.<domain>.API``)."""
    if not is_name(value):
        raise SpecError(
            field,
            value,
            "use a non-empty name without whitespace, '.', '*', '>' or path separators (e.g. 'hub', 'leaf-a')",
            problem="is not a JetStream domain name",
        )
    return value


def api_prefix(value: Any, field: str = "api_prefix") -> str:
    """A JetStream API prefix (``$JS.hub.API``, an imported ``JS.acc@hub.API``), without a trailing dot."""
    prefix = value.rstrip(".") if isinstance(value, str) else value
    if isinstance(prefix, str) and "API" in prefix.split(".")[:-1]:
        raise SpecError(
            field,
            value,
            "an API prefix ends at its 'API' token (e.g. '$JS.hub.API', 'JS.acc@hub.API'); this one names a request "
            "inside the API",
            problem="is not a JetStream API prefix",
        )
    if subject_problem(prefix, wildcards=False):
        raise SpecError(
            field,
            value,
            "use a subject without whitespace or wildcards, e.g. '$JS.hub.API' or 'JS.acc@hub.API'",
            problem="is not a JetStream API prefix",
        )
    return prefix


def bucket_name(value: Any, field: str) -> str:
    """A KV bucket name: letters, digits, ``_`` and ``-`` (the KV convention of every client), short enough
    for its stream's name ``KV_<bucket>``."""
    if not isinstance(value, str) or not _BUCKET_OK.match(value) or len(value) > MAX_NAME - 3:
        raise SpecError(
            field,
            value,
            f"a bucket name is 1-{MAX_NAME - 3} letters, digits, '_' and '-' (e.g. 'config': its stream is KV_<it>)",
        )
    return value


def object_bucket_name(value: Any, field: str) -> str:
    """An object store bucket name: letters, digits, ``_`` and ``-`` (every client's rule), short enough for its
    stream's name ``OBJ_<bucket>``."""
    if not isinstance(value, str) or not _BUCKET_OK.match(value) or len(value) > MAX_NAME - 4:
        raise SpecError(
            field,
            value,
            f"an object store bucket name is 1-{MAX_NAME - 4} letters, digits, '_' and '-' (e.g. 'files': its "
            "stream is OBJ_<it>)",
        )
    return value


def object_name(value: Any, field: str) -> str:
    """An object's name in its bucket: any non-empty text without control characters (it is stored
    base64-encoded in the meta subject ``$O.<bucket>.M.<name>``, so dots and slashes are fine)."""
    if not isinstance(value, str) or not value.strip() or _CONTROL.search(value):
        raise SpecError(field, value, "an object name is non-empty text without control characters (e.g. 'day/1.csv')")
    return value


def kv_key(value: Any, field: str) -> str:
    """A KV key: letters, digits and ``-/_=.``; dots separate non-empty tokens (it is a subject:
    ``$KV.<bucket>.<key>``), so no leading, trailing or double ``.``."""
    if not isinstance(value, str) or not _KEY_OK.match(value) or "" in value.split("."):
        raise SpecError(
            field,
            value,
            "a key uses letters, digits and '-/_=.', and '.' only between non-empty parts (no leading, trailing "
            "or double '.'; e.g. 'site.a')",
        )
    return value


#: The longest subject accepted, in UTF-8 bytes: a client sends a subject in one protocol line
#: (``HPUB <subject> <reply> <sizes>``), which the server's default ``max_control_line`` bounds at 4096
#: bytes; longer ones are refused before sending instead of hanging until the server drops the line.
MAX_SUBJECT_BYTES = 4000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def subject_problem(subject: Any, *, wildcards: bool = True) -> str | None:
    """Why ``subject`` is not a valid subject (filter), or None if it is."""
    if not isinstance(subject, str) or not subject:
        return "a subject is a non-empty string"
    if re.search(r"\s", subject):
        return "a subject has no whitespace"
    if _CONTROL.search(subject):
        return "a subject has no control characters"
    if len(subject.encode("utf-8", "surrogatepass")) > MAX_SUBJECT_BYTES:
        return f"a subject is at most {MAX_SUBJECT_BYTES} bytes (the server's protocol line limit)"
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token:
            return "a subject has no empty tokens (no leading, trailing or double '.')"
        if ("*" in token and token != "*") or (">" in token and token != ">"):
            return "a wildcard '*' or '>' is a whole token (e.g. 'orders.*', 'orders.>')"
        if token == ">" and i != len(tokens) - 1:
            return "'>' may only be the last token"
        if token in ("*", ">") and not wildcards:
            return "no wildcards ('*', '>'): give a literal subject"
    return None


# -- reserved subject spaces ------------------------------------------------------------------------
# A subject the server answers (``$JS.API.STREAM.DELETE.orders``) is a request: data published there
# is obeyed, a stream listening there stores every request or reply, a filter there reads them.

#: Subject spaces of the server: JetStream (API, acks, flow control, advisories of every domain),
#: clustering, the system account and replies.
SERVER_SPACES: tuple[str, ...] = ("$JS.", "$JSC.", "$NRG.", "$SYS.", "_INBOX.")
#: Subject spaces of KV buckets and object stores: written through their own operations.
STORE_SPACES: tuple[str, ...] = ("$KV.", "$O.")
#: JetStream advisories and metrics: a stream may keep them, a filter may read them.
ADVISORIES = "$JS.EVENT."
#: Any JetStream API, whatever the account calls it: ``$JS.API``, ``$JS.<domain>.API``, an imported
#: ``JS.acc@hub.API``.
_JS_API = re.compile(r"^\$?JS(\.[^.]+)*\.API(\.|$)")

#: How a subject is used, for :func:`reserved_problem`.
PUBLISH, STORE, FILTER = "publish", "store", "filter"


def reserved_problem(subject: str, use: str) -> str | None:
    """Why ``subject`` is in a reserved space for ``use``, or None.

    :param use: :data:`PUBLISH` (data is sent there: every reserved space, KV and object store
        subjects too), :data:`STORE` (a stream listens there: the same, advisories allowed; a filter of
        only wildcards such as ``>`` would take the server's subjects too) or :data:`FILTER` (a stream's
        messages are selected: the server's spaces, advisories allowed; KV and object store subjects
        are what their streams hold). A lone ``*`` is
        allowed where a stream stores: no reserved subject has one token.
    """
    spaces = SERVER_SPACES if use == FILTER else SERVER_SPACES + STORE_SPACES
    for space in spaces:
        if subject.startswith(space) and not (use != PUBLISH and subject.startswith(ADVISORIES)):
            if space in STORE_SPACES:
                return f"{space}> belongs to KV buckets and object stores: write there through their own operators"
            return (
                f"{space}> is a reserved subject space (the JetStream API, acks, clustering, system or reply "
                "subjects): a message there is a request the server may obey, e.g. deleting a stream"
            )
    if _JS_API.match(subject):
        return (
            "it addresses a JetStream API (JS.<account or domain>.API): a message there is a request the server "
            "obeys, e.g. deleting a stream"
        )
    tokens = subject.split(".")
    if use == STORE and (tokens == [">"] or (len(tokens) > 1 and all(t in ("*", ">") for t in tokens))):
        return "a stream on only wildcards would also store the server's subjects ($JS.API.>, _INBOX.>)"
    return None


def subject(*, wildcards: bool = True, use: str | None = None) -> Callable[[Any, str], str]:
    """The parser of a subject: a filter (``wildcards``: ``*`` tokens, a final ``>``) or a literal one;
    with ``use``, outside the reserved spaces for that use (:func:`reserved_problem`)."""

    def parse(value: Any, field: str) -> str:
        problem = subject_problem(value, wildcards=wildcards) or (use and reserved_problem(value, use))
        if problem:
            raise SpecError(field, value, problem)
        return value

    return parse


subject_filter = subject()
#: A subject filter that selects a stream's messages (consumer and source filters, transforms' sources); where
#: the stream's config is known, it must also overlap the stream's subjects (:func:`check_stream_filter`).
stream_filter = subject(use=FILTER)
#: A subject a stream stores messages on (its subjects, the destination of a transform or republish).
stored_subject = subject(use=STORE)


def delivery_subject_problem(value: Any, api_prefixes: Iterable[str | None] = ()) -> str | None:
    """Why data or deliveries must not be sent to ``value``, or None if they may.

    :param value: the subject the package publishes to, or a consumer pushes to.
    :param api_prefixes: JetStream API prefixes of the account (``JS.acc@hub.API``...); subjects under
        them are refused like ``$JS.``. Empty entries are ignored.
    """
    problem = subject_problem(value, wildcards=False) or reserved_problem(value, PUBLISH)
    if problem:
        return problem
    for prefix in api_prefixes:
        prefix = (prefix or "").rstrip(".")
        if prefix and (value == prefix or value.startswith(prefix + ".")):
            return (
                f"it is under the account's JetStream API prefix {prefix!r}: a message there is a request "
                "the server may obey, e.g. deleting a stream"
            )
    return None


def delivery_subject(value: Any, field: str = "subject", api_prefixes: Iterable[str | None] = ()) -> str:
    """A subject the package sends data or deliveries to (a publish subject, a dead-letter subject, a push
    consumer's ``deliver_subject``): literal, never empty, outside the reserved spaces (``$JS.``, ``$JSC.``,
    ``$NRG.``, ``$SYS.``, ``_INBOX.``, ``$KV.``, ``$O.``), any JetStream API (``$JS.<domain>.API``,
    ``JS.acc@hub.API``) and ``api_prefixes``: a message there is a request the server may obey.

    :raises UnsafeSubjectError: naming ``field``, the value and what is allowed.
    """
    problem = delivery_subject_problem(value, api_prefixes)
    if problem:
        raise UnsafeSubjectError(
            field,
            value,
            f"{problem}; send to a literal subject outside $JS., $KV., $O., $SYS., _INBOX. and the JetStream "
            "API prefixes (e.g. 'orders.created')",
        )
    return value


def subject_list(parse_item: Callable[[Any, str], str] = subject_filter) -> Callable[[Any, str], list[str]]:
    """The parser of a subject, or a non-empty list of distinct ones, each parsed by ``parse_item``."""

    def parse(value: Any, field: str) -> list[str]:
        if isinstance(value, str):
            return [parse_item(value, field)]  # one subject: its refusal names the field itself
        items = value
        if not isinstance(items, (list, tuple)) or not items:
            raise SpecError(field, value, "use a subject or a non-empty list of subjects")
        out = [parse_item(s, f"{field}[{i}]") for i, s in enumerate(items)]
        if len(set(out)) != len(out):
            raise SpecError(field, value, "each subject once")
        return out

    parse.parses = parse_item  # type: ignore[attr-defined]  # the type of each subject
    return parse


def subject_text(value: Any, field: str) -> tuple[str, ...]:
    """A subject filter or a comma-separated list of them, as a command line or Spark option gives it."""
    subjects = tuple(s.strip() for s in value.split(",")) if isinstance(value, str) else (value,)
    for item in subjects:
        problem = subject_problem(item, wildcards=True) or reserved_problem(item, FILTER)
        if problem:
            raise SpecError(
                field, value, f"{problem}; use a subject or a comma-separated list (e.g. 'orders.*,events.>')"
            )
    return subjects


def stream_names_text(value: Any, field: str) -> tuple[str, ...]:
    """One stream name, or several separated by commas (``'orders, payments'``), as a Spark option gives them.

    Spaces around a name are dropped (a name holds none). Refused: an empty name (``'a,,b'``, a trailing
    comma), a name given twice, and a name that is not a stream name. A stream whose name holds a comma
    cannot be named here: the comma separates names.
    """
    if not isinstance(value, str):
        return (stream_name(value, field),)
    names = tuple(s.strip() for s in value.split(","))
    allowed = "give one stream name or several separated by commas, e.g. 'orders' or 'orders,payments'"
    if not all(names):
        raise SpecError(field, value, f"{allowed} (an empty name is not one)")
    for name in names:
        if not is_name(name):
            raise SpecError(field, value, f"{allowed}; {name!r} is not a stream name (see 'orders', 'edge-a')")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise SpecError(field, value, f"{allowed}, each once ({twice[0]!r} is named twice)")
    return names


def headers(value: Any, field: str) -> dict[str, str]:
    """Headers: a mapping of names (non-empty, no whitespace or ``:``) to strings without line breaks."""
    if not isinstance(value, Mapping):
        raise SpecError(field, value, "give a mapping of header names to string values, e.g. {'source': 'airflow'}")
    for name, item in value.items():
        if not isinstance(name, str) or not name or re.search(r"[\s:]", name):
            raise SpecError(
                field,
                name,
                message=f"{field} name {name!r} is not allowed: a header name is a non-empty string without "
                "whitespace or ':'",
            )
        if not isinstance(item, str) or "\r" in item or "\n" in item:
            raise SpecError(
                f"{field}[{name!r}]",
                item,
                "a header value is a string without line breaks (convert numbers with str())",
            )
    return dict(value)


def connection_id(value: Any, field: str) -> str:
    """The id of an Airflow connection."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, value, "use the id of an Airflow connection, e.g. 'jetstream_default'")
    return value


def kv_key_pattern(value: Any, field: str) -> str:
    """A KV key or a pattern of keys: ``*`` matches one ``.``-separated part, a final ``>`` the rest."""
    if not isinstance(value, str) or not value:
        raise SpecError(field, value, "a key or key pattern is a non-empty string (e.g. 'site.a', 'site.*', '>')")
    tokens = value.split(".")
    for i, token in enumerate(tokens):
        if token == ">" and i == len(tokens) - 1:
            continue
        if token == "*":
            continue
        if ">" in token or "*" in token:
            raise SpecError(field, value, "'*' is a whole part and '>' only the whole last part (e.g. 'site.*.load')")
    kv_key(".".join(t if t not in ("*", ">") else "x" for t in tokens), field)
    return value


# -- how subjects and API prefixes relate ----------------------------------------------------------


def domain_of(prefix: str | None) -> str | None:
    """The domain of a ``$JS.<domain>.API`` prefix; None for ``$JS.API`` or an imported prefix."""
    if prefix and prefix.startswith("$JS.") and prefix.endswith(".API") and prefix.count(".") == 2:
        return prefix.split(".")[1]
    return None


def subjects_collide(a: str, b: str) -> bool:
    """True if some literal subject matches both subject filters ``a`` and ``b``."""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and x != "*" and y != "*":
            return False
    return True


def consumer_filters(config: Mapping[str, Any]) -> list[str]:
    """A consumer config's filter subjects, from its ``filter_subject`` or ``filter_subjects`` (none: all)."""
    if config.get("filter_subject"):
        return [config["filter_subject"]]
    return list(config.get("filter_subjects") or [])


def filters_outside_stream(filters: Iterable[str], stream_config: Mapping[str, Any]) -> list[str]:
    """The subject filters of ``filters`` that select nothing the stream stores: that overlap none of its
    ``subjects`` (nats subject semantics: tokens, ``*``, ``>``). Empty when all overlap, and when the stream's
    subjects do not say what it stores: a mirror, a stream with sources or a subject transform, or one with no
    subjects (it stores its name's subject then)."""
    subjects = stream_config.get("subjects") or []
    if not subjects or stream_config.get("mirror") or stream_config.get("sources"):
        return []
    if stream_config.get("subject_transform"):
        return []
    return [f for f in filters if not any(subjects_collide(f, s) for s in subjects)]


def check_stream_filter(filters: Iterable[str], stream_config: Mapping[str, Any], field: str, where: str) -> None:
    """Refuse a filter subject that selects nothing of the stream it reads (:func:`filters_outside_stream`):
    a consumer on it would wait for ever. ``where`` names the stream (``stream 'orders' in domain 'hub'``)."""
    outside = filters_outside_stream(filters, stream_config)
    if outside:
        shown = outside[0] if len(outside) == 1 else outside
        raise SpecError(
            field,
            shown,
            f"a filter subject selects messages of the stream it reads, and {shown!r} overlaps none of the subjects "
            f"of {where} ({', '.join(stream_config['subjects'])}): give a filter within those subjects",
        )
