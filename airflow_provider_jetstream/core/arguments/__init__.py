"""The one argument layer: each public argument declared once (:class:`Arg`), checked per signature (:class:`Args`).

An operation (a purge, a publish, a consumer-lag check...) has one :class:`Args`: its arguments by
name, each an :class:`Arg` (how to parse it, its default, what an empty value means, whether
operators render it), and the rules between them (``keep`` or ``up_to_seq``, not both). Every
layer that offers the operation checks the same declaration: the hook method (on each call), the
operator or sensor (when the DAG is parsed for literal values, once rendered for templated ones, see
:mod:`airflow_provider_jetstream.utils.arguments`), the trigger (its kwargs), the Spark option or job
argument. Every refusal has one form: ``field=value is not allowed: what is allowed``, all of them
reported at once as :class:`~airflow_provider_jetstream.core.errors.SpecErrors`.

The parsers live in :mod:`.values` (booleans, numbers, seconds, choices, lists), :mod:`.names`
(names, subjects, domains, API prefixes, headers) and :mod:`.durations`; the names no surface takes any
more, each refused naming its replacement (:meth:`Args.refuse_retired`), in :mod:`.retired`; the base of
typed options (an operator's advanced tuning as one ``options`` argument) in :mod:`.options`; the
declarations, one signature per operation, in :mod:`airflow_provider_jetstream.core.signatures`. Airflow-free: Spark
executors and the packaged Spark job import it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.arguments.retired import SNAKE, retired_entry
from airflow_provider_jetstream.core.arguments.values import Parser, parse_value
from airflow_provider_jetstream.core.errors import JetStreamConfigError, SpecError, SpecErrors

#: What a given empty value (``""`` or None) means, for each :class:`Arg`:
#: ``"refuse"``: it is refused, naming the field: a value that narrows or redirects an action must never
#: silently become "not given" (a rendered ``subject=""`` would turn a narrow purge into a purge of all);
#: ``"default"``: it means "not given" (the argument's default applies);
#: ``"value"``: it is a meaningful value, passed to the parser (``msg_id=None``: no message id).
REFUSE, DEFAULT, VALUE = "refuse", "default", "value"
EMPTY_MODES = (REFUSE, DEFAULT, VALUE)


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of an argument that has none: it must be given (None and ``""`` are then given values).
REQUIRED: Any = _Required()


def is_empty(value: Any) -> bool:
    """Whether ``value`` is empty: None or ``""`` (what a template often renders to when nothing is set)."""
    return value is None or (isinstance(value, str) and value == "")


def _same(value: Any, default: Any) -> bool:
    return value is default or (type(value) is type(default) and value == default)


def _never(value: Any) -> bool:
    return False


@dataclass(frozen=True)
class Arg:
    """One public argument: how to parse it, its default, what a given empty value means.

    :param parse: ``parse(value, field) -> the value to use``; raises :class:`SpecError` naming the
        field, the value and what is allowed (see :mod:`.values` for the text forms).
    :param default: the value when it is not given (parsed like a given one; None stays None), or
        :data:`REQUIRED`.
    :param empty: what a given ``""`` or None means: :data:`REFUSE`, :data:`DEFAULT` or :data:`VALUE`.
    :param doc: its meaning and default, in words.
    :param templated: whether operators and sensors render it (it is one of their ``template_fields``).
    """

    parse: Parser
    default: Any = None
    empty: str = DEFAULT
    doc: str = ""
    templated: bool = False

    def __post_init__(self) -> None:
        if self.empty not in EMPTY_MODES:
            raise ValueError(f"empty={self.empty!r}: use one of {', '.join(EMPTY_MODES)}")

    def but(self, **changes: Any) -> Arg:
        """This declaration with some of its fields changed (for an operation that treats it otherwise)."""
        return dataclasses.replace(self, **changes)

    def default_value(self, field: str) -> Any:
        """The value used when the argument is not given."""
        if self.default is REQUIRED:
            raise SpecError(field, None, "give a value: it has no default")
        return None if self.default is None else parse_value(self.parse, self.default, field)

    def value(self, value: Any, field: str, *, given: bool = True, text: bool = False) -> Any:
        """The value to use for ``value`` of ``field`` (``given``: passed by the caller, not its default)."""
        empty = is_empty(value)
        if empty and (not given or self.empty == DEFAULT):
            return self.default_value(field)
        parsed = parse_value(self.parse, value, field, text=text)
        if empty and self.empty == REFUSE:
            raise SpecError(field, value, "give a value: an empty one is refused here, not taken as 'not given'")
        return parsed


#: A rule's check: ``check(values, prefix)`` with the checked values of the signature; returns values it
#: derives (merged into the result) or None; raises :class:`SpecError` / :class:`SpecErrors`.
RuleCheck = Callable[[Mapping[str, Any], str], "Mapping[str, Any] | None"]


@dataclass(frozen=True)
class Rule:
    """A rule between arguments of one signature, checked once each of ``names`` is checked (skipped
    while one is still to be rendered, or is itself refused)."""

    names: tuple[str, ...]
    check: RuleCheck
    doc: str = ""


def exclusive(first: str, second: str, why: str) -> Rule:
    """``first`` or ``second``, not both: ``domain='a' and api_prefix='b' were both given: <why>``."""

    def check(values: Mapping[str, Any], prefix: str) -> None:
        a, b = values.get(first), values.get(second)
        if not is_empty(a) and not is_empty(b):
            raise SpecError(first, a, why, message=f"{prefix}{first}={a!r} and {second}={b!r} were both given: {why}")

    return Rule((first, second), check, f"{first} or {second}, not both")


def requires(first: str, second: str, why: str) -> Rule:
    """``first`` only with ``second``: ``first=<value> is not allowed: <why>``."""

    def check(values: Mapping[str, Any], prefix: str) -> None:
        if not is_empty(values.get(first)) and is_empty(values.get(second)):
            raise SpecError(f"{prefix}{first}", values.get(first), why)

    return Rule((first, second), check, f"{first} needs {second}")


class Args:
    """The signature of one operation: its arguments by name and the rules between them.

    ``PURGE + TARGET`` adds the arguments (and rules) of another signature, ``renamed(spec="stream")``
    renames an argument for a layer that calls it otherwise; both keep every declaration.
    """

    def __init__(self, name: str, args: Mapping[str, Arg], rules: Sequence[Rule] = ()) -> None:
        self.name = name
        self.args = dict(args)
        self.rules = tuple(rules)
        for rule in self.rules:
            missing = [n for n in rule.names if n not in self.args]
            if missing:
                raise ValueError(f"{name}: a rule names {missing}, which it does not declare")

    def __repr__(self) -> str:
        return f"Args({self.name!r}: {', '.join(self.args)})"

    def __add__(self, other: Args) -> Args:
        clash = sorted(set(self.args) & set(other.args))
        if clash:
            raise ValueError(f"{self.name} + {other.name}: both declare {clash}")
        return Args(self.name, {**self.args, **other.args}, self.rules + other.rules)

    def renamed(self, **names: str) -> Args:
        """The same declarations with some arguments named otherwise (``old=new``)."""

        def rename(n: str) -> str:
            return names.get(n, n)

        def moved(rule: Rule) -> Rule:
            def check(values: Mapping[str, Any], prefix: str) -> Mapping[str, Any] | None:
                return rule.check({old: values[rename(old)] for old in rule.names}, prefix)

            return Rule(tuple(rename(n) for n in rule.names), check, rule.doc)

        return Args(self.name, {rename(n): a for n, a in self.args.items()}, [moved(r) for r in self.rules])

    def without(self, *names: str) -> Args:
        """The signature less some arguments (and the rules that involve them)."""
        rules = [r for r in self.rules if not set(r.names) & set(names)]
        return Args(self.name, {n: a for n, a in self.args.items() if n not in names}, rules)

    def only(self, *names: str) -> Args:
        """The signature of some of its arguments only (and the rules between them alone)."""
        return self.without(*(n for n in self.args if n not in names))

    def ruled(self, *rules: Rule) -> Args:
        """The signature with more rules (between its own arguments)."""
        return Args(self.name, self.args, self.rules + rules)

    def refuse_retired(self, values: Mapping[str, Any], surface: str, form: str = SNAKE) -> None:
        """Refuse each name of ``values`` this signature does not take that was retired on ``surface`` (see
        :mod:`.retired`: ``old=value is not allowed: renamed <new>``) or moved into one of its options
        arguments (``moved into options=...``), all at once; other unknown names are left to the caller.

        :param surface: the surface's name: a hook method's qualified name, a class name, ``spark read``...
        :param form: how the names are spelled: ``snake`` (Python), ``camel`` (Spark options), ``flag``.
        """
        errors: list[SpecError] = []
        accepted = [*self.args, *(field for _, options in self._options() for field in options.arguments.args)]
        for name, value in values.items():
            if name in self.args:
                continue
            moved = self._moved_into(name)
            entry = retired_entry(name, accepted, surface, form)
            if moved is not None:
                errors.append(SpecError(name, value, f"moved into {moved}({name}={value!r})"))
            elif entry is not None:
                # Renamed into an options field: say where the new name lives.
                home = self._moved_into(entry.new) if entry.new else None
                instead = entry.instead(form) + (f", in {home}" if home else "")
                errors.append(SpecError(name, value, instead))
        if errors:
            raise SpecErrors(errors)

    def _options(self) -> list[tuple[str, Any]]:
        """``(argument name, options class)`` of each typed-options argument of this signature."""
        found = ((name, getattr(arg.parse, "options_class", None)) for name, arg in self.args.items())
        return [(name, options) for name, options in found if options is not None]

    def _moved_into(self, name: str) -> str | None:
        """``options=PublishOptions`` when ``name`` is a field of this signature's options argument."""
        for arg_name, options in self._options():
            if name in options.arguments.args:
                return f"{arg_name}={options.__name__}"
        return None

    def template_fields(self) -> tuple[str, ...]:
        """The names of the arguments operators and sensors render, in declaration order."""
        return tuple(n for n, a in self.args.items() if a.templated)

    def check(
        self,
        values: Mapping[str, Any],
        *,
        skip: Callable[[Any], bool] = _never,
        rendered: Collection[str] = (),
        text: bool | Collection[str] = False,
        prefix: str = "",
    ) -> dict[str, Any]:
        """Check ``values`` (by argument name; those absent are not given) and return every argument's value.

        :param skip: values to leave for later (``skip(value)`` true: still to be rendered); they are
            returned as they are, and the rules that involve them are not checked.
        :param rendered: names whose values came from rendering a template: given, even when empty.
            Any other empty value equal to the declared default counts as not given.
        :param text: where text forms are accepted (True: everywhere; or the names), see :mod:`.values`.
        :param prefix: put before each field name in messages (``"jetstream option "``).
        :raises SpecErrors: every refused argument and rule, all at once.
        """
        unknown = [name for name in values if name not in self.args]
        if unknown:
            raise TypeError(f"{self.name}: no argument {unknown[0]!r} (it takes {', '.join(self.args)})")
        out: dict[str, Any] = {}
        errors: list[SpecError] = []
        unchecked: set[str] = set()
        for name, arg in self.args.items():
            field = f"{prefix}{name}"
            if name not in values:
                try:
                    out[name] = arg.default_value(field)
                except SpecError as err:
                    errors.append(err)
                    unchecked.add(name)
                continue
            value = values[name]
            if skip(value):
                out[name] = value
                unchecked.add(name)
                continue
            given = name in rendered or not _same(value, arg.default)
            reads_text = text if isinstance(text, bool) else name in text
            try:
                out[name] = arg.value(value, field, given=given, text=reads_text)
            except JetStreamConfigError as err:
                errors.extend(_spec_errors(err, field, value))
                unchecked.add(name)
        for rule in self.rules:
            if unchecked.intersection(rule.names):
                continue
            try:
                out.update(rule.check(out, prefix) or {})
            except JetStreamConfigError as err:
                errors.extend(_spec_errors(err, f"{prefix}{rule.names[0]}", out.get(rule.names[0])))
        if errors:
            raise SpecErrors(errors)
        return out


def refusing_retired(init: Callable[..., None]) -> Callable[..., None]:
    """An ``__init__`` (of a class with an ``arguments`` signature: a trigger...) that first refuses the retired
    names among its keyword arguments, naming their replacements (:meth:`Args.refuse_retired`)."""
    parameters = inspect.signature(init).parameters

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        unknown = {name: value for name, value in kwargs.items() if name not in parameters}
        if unknown:
            type(self).arguments.refuse_retired(unknown, type(self).__name__)
        init(self, *args, **kwargs)

    return wrapper


def _spec_errors(err: JetStreamConfigError, field: str, value: Any) -> list[SpecError]:
    if isinstance(err, (SpecError, SpecErrors)):
        return list(err.errors)
    return [SpecError(field, value, message=str(err))]


__all__ = [
    "DEFAULT",
    "EMPTY_MODES",
    "REFUSE",
    "REQUIRED",
    "VALUE",
    "Arg",
    "Args",
    "Rule",
    "exclusive",
    "is_empty",
    "refusing_retired",
    "requires",
]
