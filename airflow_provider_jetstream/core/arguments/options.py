"""Typed options: an operator's advanced tuning grouped in one argument, ``options=``, a class or a plain dict.

A subclass of :class:`Options` is a dataclass whose fields are declared by its ``arguments`` (an
:class:`~airflow_provider_jetstream.core.arguments.Args`: the same declarations the hook methods take), each
with its meaning and default. An operator takes it as ``options=PublishOptions(max_in_flight=100)`` or as
``options={"max_in_flight": 100}`` (from ``params`` or JSON); either is checked through the argument layer,
each bad field reported at its place (``options.max_in_flight=0 is not allowed: ...``). Airflow renders the
fields the declaration marks templated (the class's ``template_fields``), and every value of a dict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from airflow_provider_jetstream.core.arguments import DEFAULT, REQUIRED, Arg, Args
from airflow_provider_jetstream.core.arguments.retired import retired_entry
from airflow_provider_jetstream.core.arguments.values import Parser, reads_text
from airflow_provider_jetstream.core.errors import SpecError, SpecErrors, unknown_key

OptionsT = TypeVar("OptionsT", bound="Options")


class Options:
    """Base of the typed options classes (see the module doc). A subclass is a ``@dataclass`` with one
    field per argument of ``arguments``, each with that argument's default (checked when it is defined)."""

    #: The declaration of every field (parser, default, whether Airflow renders it).
    arguments: ClassVar[Args]
    #: The fields Airflow renders (those ``arguments`` marks templated).
    template_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def declare(cls, subclass: type[OptionsT]) -> type[OptionsT]:
        """Check a dataclass subclass against its ``arguments`` (same fields, same defaults) and set its
        ``template_fields``; use as a class decorator under ``@dataclass``."""
        fields = {f.name: f for f in dataclasses.fields(subclass)}  # type: ignore[arg-type]
        declared = subclass.arguments.args
        if list(fields) != list(declared):
            raise TypeError(f"{subclass.__name__}: fields {list(fields)} differ from its arguments {list(declared)}")
        for name, field in fields.items():
            default = field.default if field.default is not dataclasses.MISSING else REQUIRED
            if default != declared[name].default:
                raise TypeError(f"{subclass.__name__}.{name}: default {default!r}, declared {declared[name].default!r}")
        subclass.template_fields = subclass.arguments.template_fields()
        return subclass

    @classmethod
    def from_value(cls: type[OptionsT], value: Any, field: str = "options", *, text: bool = False) -> OptionsT:
        """The checked options from ``value``: an instance of this class or a dict of its fields (None: the
        defaults). Raises :class:`SpecErrors` naming each bad field (``options.max_in_flight``)."""
        names = list(cls.arguments.args)
        if value is None:
            values: dict[str, Any] = {}
        elif isinstance(value, cls):
            values = {name: getattr(value, name) for name in names}
        elif isinstance(value, Mapping):
            values = dict(value)
        else:
            raise SpecError(field, value, f"use {cls.__name__}(...) or a dict of its fields: {', '.join(names)}")
        errors = []
        for key in [k for k in values if k not in cls.arguments.args]:
            entry = retired_entry(str(key), names, cls.__name__)
            if entry is not None:
                errors.append(entry.refusal(f"{field}.{key}", values[key]))
            else:
                errors.append(unknown_key(field, str(key), names))
        if errors:
            raise SpecErrors(errors)
        # A rendered dict's values came from templates: given even when empty (a default is not).
        rendered = set(values) if text and isinstance(value, Mapping) else ()
        return cls(**cls.arguments.check(values, text=text, rendered=rendered, prefix=f"{field}."))

    def as_kwargs(self) -> dict[str, Any]:
        """The fields by name (the hook methods' keyword arguments of the same names)."""
        return {name: getattr(self, name) for name in type(self).arguments.args}


def options_arg(cls: type[Options], doc: str) -> Arg:
    """The ``options`` argument of an operator: ``cls``, a dict of its fields, or None (every default)."""

    @reads_text
    def parse(value: Any, field: str, *, text: bool = False) -> Options:
        return cls.from_value(value, field, text=text)

    parse.options_class = cls  # type: ignore[attr-defined]
    parser: Parser = parse
    # The default {} is parsed like a given value: every field's default, as an instance of ``cls``.
    return Arg(parser, {}, DEFAULT, doc, templated=True)


__all__ = ["Options", "options_arg"]
