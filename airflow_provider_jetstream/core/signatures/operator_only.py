"""Arguments only operators take: the parts of the stream a mirror or sourced-stream operator declares,
and the publish operator's message function.

The hook methods take the spec itself (:data:`.operations.ENSURE_STREAM`); these operators take its
fields as arguments, each checked on its own (refused under the argument's name, ``start_time``), then the
whole spec they build (the derived value ``spec``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_jetstream.core.arguments import DEFAULT, REFUSE, REQUIRED, VALUE, Arg, Args, Rule
from airflow_provider_jetstream.core.arguments.values import Parser, optional, parse_value
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.specs import StreamSpec
from airflow_provider_jetstream.core.manage.specs.fields import Struct
from airflow_provider_jetstream.core.manage.specs.sources import SOURCE
from airflow_provider_jetstream.core.manage.specs.stream import STREAM as STREAM_FIELDS


def _spec_part(struct: Struct, key: str) -> Parser:
    """The parser of ``struct``'s field ``key``: an operator argument that is a field of the spec it builds,
    refused under the argument's own name (``start_time``, not ``stream.mirror.start_time``). The value is
    returned as given: the whole spec, built from it, parses it in context."""
    field_parse = struct.by_key()[key].parse

    def parse(value: Any, field: str) -> Any:
        parse_value(field_parse, value, field, text=True)
        return value

    parse.parses = field_parse  # type: ignore[attr-defined]  # the type of the spec's field
    return parse


def _overrides(reserved: tuple[str, ...]) -> Parser:
    """The parser of ``stream_overrides``: a dict of other stream fields, none the operator sets itself."""

    def parse(value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise SpecError(field, value, "use a dict of stream fields (storage, max_age, replicas...)")
        clash = [k for k in value if k in reserved]
        if clash:
            raise SpecError(f"{field}.{clash[0]}", value[clash[0]], "this operator sets it from its own argument")
        STREAM_FIELDS.parse(value, field)  # each field checked under the argument's own name
        return dict(value)

    return parse


def _stream_from(build: Callable[[Mapping[str, Any]], dict[str, Any]], names: tuple[str, ...]) -> Rule:
    """The rule that builds the operator's stream spec from its arguments (the derived value ``spec``)."""

    def check(values: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        return {"spec": StreamSpec.from_dict(build(values))}

    return Rule(names, check, "the stream these arguments declare")


def _from_the_first(parse: Parser) -> Parser:
    """A start sequence where 0, like None, means from the first (sequences start at 1)."""

    def parse_start(value: Any, field: str) -> Any:
        return None if value == 0 and not isinstance(value, bool) else parse(value, field)

    parse_start.parses = parse  # type: ignore[attr-defined]
    return parse_start


def _source_arg(key: str, doc: str, templated: bool = True) -> Arg:
    return Arg(_spec_part(SOURCE, key), None, DEFAULT, doc, templated=templated)


def _one_filter(value: Any, field: str) -> Any:
    """``filter_subjects`` of a mirror: one subject filter, as text or a list of one (several filters are
    ``subject_transforms``, one ``src`` each)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise SpecError(
                field, value, "give one subject filter (text or a list of one); for several, use subject_transforms"
            )
        value = value[0]
    return _spec_part(SOURCE, "filter_subject")(value, field)


_one_filter.parses = SOURCE.by_key()["filter_subject"].parse  # type: ignore[attr-defined]


_MIRROR_ARGS = {
    "stream": Arg(_spec_part(STREAM_FIELDS, "name"), REQUIRED, VALUE, "the mirror's name", templated=True),
    "origin": Arg(_spec_part(SOURCE, "name"), REQUIRED, VALUE, "the origin stream", templated=True),
    "origin_domain": _source_arg("domain", "JetStream domain of the origin"),
    "origin_api_prefix": _source_arg("api_prefix", "API prefix of the origin (another account), instead"),
    "filter_subjects": Arg(
        _one_filter, None, REFUSE, "copy only messages on this subject filter (wildcards allowed)", templated=True
    ),
    "start_seq": _source_arg("start_seq", "first origin sequence to copy; 0 or None: from the first").but(
        parse=_from_the_first(_spec_part(SOURCE, "start_seq"))
    ),
    "start_time": _source_arg("start_time", "copy from this instant (with a time zone)"),
    "stream_overrides": Arg(
        _overrides(("name", "mirror", "sources")), None, DEFAULT, "other stream fields", templated=True
    ),
}
#: What a mirror operator takes in its options (:class:`~.options.MirrorOptions`) besides the declare options.
MIRROR_TUNING = {
    "deliver_prefix": _source_arg("deliver_prefix", "delivery subject prefix of an imported origin; default none").but(
        empty=REFUSE
    ),
    "subject_transforms": _source_arg(
        "subject_transforms", "filter and transform subjects ([{src, dest}]); default none", templated=False
    ),
}


def _mirror_dict(values: Mapping[str, Any]) -> dict[str, Any]:
    options = values["options"]
    first = values["filter_subjects"]
    mirror = {
        "name": values["origin"],
        "domain": values["origin_domain"],
        "api_prefix": values["origin_api_prefix"],
        "deliver_prefix": options.deliver_prefix,
        "filter_subject": first[0] if isinstance(first, (list, tuple)) else first,
        "subject_transforms": options.subject_transforms,
        "start_seq": values["start_seq"],
        "start_time": values["start_time"],
    }
    return {**(values["stream_overrides"] or {}), "name": values["stream"], "mirror": mirror}


def create_mirror(options: Arg) -> Args:
    """``JetStreamCreateMirrorOperator``'s own arguments with its ``options`` argument; the derived value
    ``spec`` is the stream they declare."""
    args = {**_MIRROR_ARGS, "options": options}
    return Args("create mirror", args, [_stream_from(_mirror_dict, tuple(args))])


def _subjects(value: Any, field: str) -> Any:
    return _spec_part(STREAM_FIELDS, "subjects")(value, field) if value else None


_subjects.parses = STREAM_FIELDS.by_key()["subjects"].parse  # type: ignore[attr-defined]


_SOURCED_ARGS = {
    "stream": _MIRROR_ARGS["stream"].but(doc="the stream's name"),
    "sources": Arg(
        _spec_part(STREAM_FIELDS, "sources"),
        REQUIRED,
        VALUE,
        "the stream's sources, each a spec: name, domain | api_prefix (+ deliver_prefix), filter_subject | "
        "subject_transforms, start_seq | start_time",
        templated=True,
    ),
    "subjects": Arg(_subjects, None, REFUSE, "subjects the stream also listens on", templated=True),
    "stream_overrides": _MIRROR_ARGS["stream_overrides"].but(
        parse=_overrides(("name", "mirror", "sources", "subjects"))
    ),
}


def _sourced_dict(values: Mapping[str, Any]) -> dict[str, Any]:
    stream = {**(values["stream_overrides"] or {}), "name": values["stream"], "sources": values["sources"]}
    if values["subjects"]:
        stream["subjects"] = values["subjects"]
    return stream


#: ``JetStreamCreateSourcedStreamOperator``'s own arguments; ``spec`` the stream they declare.
CREATE_SOURCED = Args("create sourced stream", _SOURCED_ARGS, [_stream_from(_sourced_dict, tuple(_SOURCED_ARGS))])


def _callable(value: Any, field: str) -> Any:
    if not callable(value):
        raise SpecError(field, value, "give a function that returns the messages (an iterable; a generator streams)")
    return value


def _keyword_arguments(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(field, value, "use a dict of keyword arguments")
    return dict(value)


def _messages_or_function(values: Mapping[str, Any], prefix: str) -> None:
    if (values["messages"] is None) == (values["messages_function"] is None):
        raise SpecError(f"{prefix}messages", values["messages"], "give messages or messages_function (exactly one)")


#: ``JetStreamPublishOperator``'s messages: given, or returned by a function (exactly one of them).
PUBLISH_FROM_FUNCTION = Args(
    "publish from a function",
    {
        "messages_function": Arg(
            optional(_callable),
            None,
            DEFAULT,
            "a function returning the messages, called with messages_function_kwargs; default none",
        ),
        "messages_function_kwargs": Arg(
            optional(_keyword_arguments), None, DEFAULT, "messages_function's keyword arguments", templated=True
        ),
    },
)
PUBLISHED_MESSAGES = Rule(("messages", "messages_function"), _messages_or_function, "messages or messages_function")
