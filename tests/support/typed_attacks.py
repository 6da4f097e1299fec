"""Attacks by type: the values every argument of a type must refuse, whatever surface declares it.

Each public argument is declared once (:class:`~airflow_provider_jetstream.core.arguments.Arg`) with a parser: its
type. :func:`type_of` finds the type behind a parser (a wrapper such as ``optional(...)`` or ``subject_list(...)``
points at the parser it wraps with its ``parses`` attribute; a parser made by a factory, ``name_of("stream")``, is
of the factory's type). :data:`ATTACKS` gives each type the values it must refuse, so an argument added later is
attacked the day it lands, and a parser with no entry fails the suite (``tests/reliability/test_typed_inputs.py``).
:data:`EMPTY_REFUSED`: the types where a given ``""`` must be refused (empty is not absent: it would widen or
redirect an action), never taken as "not given".
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any

import airflow_provider_jetstream.core.signatures as signatures
from airflow_provider_jetstream.core.arguments import Arg, Args
from airflow_provider_jetstream.core.arguments import durations as D
from airflow_provider_jetstream.core.arguments import names as N
from airflow_provider_jetstream.core.arguments import options as O
from airflow_provider_jetstream.core.arguments import values as V
from airflow_provider_jetstream.core.manage.specs import fields as F
from airflow_provider_jetstream.core.manage.specs import kv
from airflow_provider_jetstream.core.signatures import (
    consume,
    durable,
    events,
    objects,
    operations,
    operator_only,
    shared,
    waits,
)
from airflow_provider_jetstream.core.signatures import options as signature_options
from tests.support.generated import RESERVED

NOT_FINITE = [math.nan, math.inf, -math.inf]
#: Values no text parser takes: a number, bytes, a set.
NOT_TEXT: list[Any] = [5, b"bytes", {1, 2}]
#: Subjects of bad form: empty tokens, whitespace, misplaced wildcards, control characters, too long.
BAD_SUBJECTS = ["a..b", ".a", "a.", "a b", "a.>.b", "a*", "a\x00b", "a" * 5000]
NAIVE = "2026-01-01T00:00:00"

ATTACKS: dict[Callable[..., Any], list[Any]] = {
    # names and subjects
    N.delivery_subject: [
        *RESERVED,
        "$KV.b.k",
        "$O.b.M.x",
        "$JS.hub.API.STREAM.PURGE.victim",
        "a.*",
        "a.>",
        *BAD_SUBJECTS,
        5,
    ],
    N.subject: [*BAD_SUBJECTS, 5],
    N.name_of: ["a.b", "a b", "a*", ">", "a/b", "a\\b", "a\x00", "x" * 300, *NOT_TEXT],
    N.domain_name: ["a.b", "a b", "*", "x" * 300, 5],
    N.api_prefix: ["$JS.API.STREAM.DELETE.x", "a b", "a.*", "a..b", 5],
    N.bucket_name: ["a.b", "a b", "x" * 300, 5],
    N.object_bucket_name: ["a.b", "a b", "x" * 300, 5],
    N.object_name: ["  ", "a\x00b", 5],
    N.kv_key: ["a..b", ".a", "a b", "a*", 5],
    N.headers: ["x", {"a b": "v"}, {"a:b": "v"}, {"a": "x\ny"}, {"a": 5}],
    N.connection_id: ["  ", 5],
    # plain values
    V.boolean: ["maybe", 2, 0.5, [], *NOT_FINITE],
    V.choice: ["no-such-choice", 5, []],
    V.fraction: [-0.1, 1.5, "x", *NOT_FINITE],
    V.integer: ["x", 0.5, 2**64, -(2**64), *NOT_FINITE],
    V.seconds: [-1, "x", "-5s", *NOT_FINITE],
    V.message_id: ["  ", "a\nb", "a\rb", 5],
    V.text: [5, b"x"],
    V.string_map: [5, {"a": 5}, {5: "a"}],
    V.json_map: [5, "x", {"a": {1, 2}}],
    V.list_of: [5, "x", {"a": 1}],
    V.instance_of: [5, "x"],
    D.parse_instant: ["yesterday", NAIVE, 5],
    D.seconds_of: [-1, "x", *NOT_FINITE],
    D.duration_seconds: [-1, "x", *NOT_FINITE],
    # composite values
    O.options_arg: [5, "x", [1], {"no_such_field": 1}],
    signature_options.family_options: [5, "x", [1], {"no_such_field": 1}],
    F.Spec.from_dict.__func__: [5, [1], {"no_such_field": 1}],  # type: ignore[attr-defined]
    kv.encode_kv_value: [{1: "a"}, {1, 2}],
    consume._exception_classes: [5, "x", [5]],
    consume._function: [5, "not a path"],
    consume._instant_text: ["yesterday", NAIVE, 5],
    consume._keywords: [5, "x", [1]],
    consume._positional: [5, "x", {"a": 1}],
    durable._fields: [5, "x", [1]],
    durable._transforms: [5, [], "x"],  # each transform is checked in the spec the rule builds
    events._consumer_at_spec_path: ["a.b", "a b", 5],
    events._instant_text: ["yesterday", NAIVE, 5],
    events._keys: [5, ["a..b"]],
    events._subjects: [5, ["a..b"], ["$JS.API.>"]],
    operations.expected_text: [5],
    operations.origin_names: [5, ["a.b"]],
    operations.payloads: [5],
    operator_only._callable: [5, "x"],
    operator_only._keyword_arguments: [5, "x"],
    operator_only._overrides: [5, {"name": "x"}, {"mirror": {}}],
    shared.logger_like: [5, "x"],
    waits._state: [5, "x"],
    waits._state_with_positions: [5, "x"],
    waits.dotted_path: ["not a path", 5],
}

#: The types where a given ``""`` is refused wherever they are declared: subjects (an empty filter or
#: destination would widen or redirect the action), message ids (an empty one turns deduplication off).
EMPTY_REFUSED: frozenset[Callable[..., Any]] = frozenset({N.delivery_subject, N.subject, V.message_id})


def type_of(parse: Callable[..., Any]) -> Callable[..., Any]:
    """The type of a parser: the parser a wrapper ``parses``, a partial's function, a bound method's function, or
    the factory that made a parser (``name_of`` for ``name_of("stream")``)."""
    while True:
        if hasattr(parse, "parses"):
            parse = parse.parses
        elif isinstance(parse, functools.partial):
            parse = parse.func
        elif inspect.ismethod(parse):
            parse = parse.__func__
        else:
            break
    qualname = getattr(parse, "__qualname__", "")
    if "<locals>" in qualname:
        found: Any = importlib.import_module(parse.__module__)
        for part in qualname.split(".<locals>")[0].split("."):
            found = getattr(found, part)
        return found
    return parse


# Local paths: whatever types the object signatures declare for the file a put reads and the one a get writes.
ATTACKS.update({type_of(s.args["local_path"].parse): ["a\x00b", 5] for s in (objects.PUT_OBJECT, objects.GET_OBJECT)})


def public_arguments() -> Iterator[tuple[str, Arg]]:
    """Every public argument declared in :mod:`airflow_provider_jetstream.core.signatures`: those of each
    signature (:class:`Args`) and of each group of declarations (a dict of :class:`Arg`), and of the typed options
    they take (``MessageOptions.ack_wait``), each once, named ``<where>.<argument>``."""
    found: list[tuple[str, Arg]] = []
    for info in pkgutil.iter_modules(signatures.__path__):
        module = importlib.import_module(f"{signatures.__name__}.{info.name}")
        for name, value in vars(module).items():
            declared = value.args if isinstance(value, Args) else value if isinstance(value, dict) else {}
            found += [(f"{info.name}.{name}.{arg}", a) for arg, a in declared.items() if isinstance(a, Arg)]
    seen: set[int] = set()
    while found:
        where, arg = found.pop(0)
        if id(arg) in seen:
            continue
        seen.add(id(arg))
        yield where, arg
        options = getattr(arg.parse, "options_class", None)
        if options is not None:
            found += [(f"{options.__name__}.{name}", a) for name, a in options.arguments.args.items()]
