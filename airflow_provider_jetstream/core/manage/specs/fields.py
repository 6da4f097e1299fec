"""The field engine behind every spec: one :class:`Field` per key, one :class:`Struct` per dict.

A field knows its spec key and aliases, its JSON key in the JetStream API, how to validate and
convert a value (one of the shared parsers of :mod:`airflow_provider_jetstream.core.arguments`, given
the text forms too: plain dict values, as templated DAG arguments give them, may hold numbers as
strings), whether the server can change it in place, the JetStream API level and server version
that introduced it, and how to normalise the server's representation for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from airflow_provider_jetstream.core.arguments import values as V
from airflow_provider_jetstream.core.arguments.durations import format_duration, instant, nanoseconds
from airflow_provider_jetstream.core.errors import SpecError, SpecErrors, unknown_key

Parser = V.Parser

#: How a field may change on an existing object.
EDITABLE = "yes"  # updated in place
IMMUTABLE = "no"  # only by deleting and creating again
ENABLE_ONLY = "enable"  # false -> true in place; true -> false needs a new object
ONCE = "once"  # like ENABLE_ONLY, and only through an update (sealed)
CREATE_ONLY = "create"  # used when creating; ignored on an existing object (first_seq)

#: JetStream API level -> the first nats-server release that reports it.
API_LEVEL_VERSIONS = {0: "2.10", 1: "2.11", 2: "2.12", 4: "2.14"}


@dataclass(frozen=True)
class Field:
    name: str
    wire: str
    parse: Parser
    doc: str = ""
    #: Other keys it is accepted under, besides its name and its API name (``wire``).
    aliases: tuple[str, ...] = ()
    editable: str = EDITABLE
    level: int = 0
    since: str = "2.2"
    normalize: Callable[[Any], Any] = field(default=lambda v: v)
    show: Callable[[Any], str] = field(default=lambda v: repr(v))
    #: True if the value uses the feature (only then does it need ``level``).
    active: Callable[[Any], bool] = field(default=bool)
    #: A limit on what is stored (unlimited when absent, -1 or 0): lowering it, or setting it where
    #: there was none, makes the server discard what is stored beyond it, in place.
    discards: bool = False
    #: How many copies of the data the servers keep (``replicas``): lowering it lowers the data's
    #: durability in place (fewer node losses survived). The reconcile refuses it as it refuses a
    #: change that discards data (:attr:`discards`): both need ``allow_data_loss=True``.
    durability: bool = False


@dataclass(frozen=True)
class Struct:
    """The fields of one kind of dict (a stream, a source, a placement...)."""

    kind: str
    fields: tuple[Field, ...]

    def by_key(self) -> dict[str, Field]:
        keys: dict[str, Field] = {}
        for f in self.fields:
            for key in (f.name, f.wire, *f.aliases):
                keys[key] = f
        return keys

    def parse(self, data: Any, path: str) -> dict[str, Any]:
        """``{field name: wire value}`` for the keys given; every invalid key reported at once."""
        if not isinstance(data, Mapping):
            raise SpecError(path, data, f"a {self.kind} is a dict of fields")
        keys = self.by_key()
        values: dict[str, Any] = {}
        errors: list[SpecError] = []
        for key, value in data.items():
            f = keys.get(key)
            if f is None:
                errors.append(unknown_key(path, key, [x.name for x in self.fields]))
                continue
            if f.name in values:
                errors.append(SpecError(f"{path}.{key}", value, f"{f.name!r} was given twice (by an alias)"))
                continue
            if value is None:
                continue  # None means "not set": templated specs often carry empty optionals
            try:
                # Spec values come from templated dicts: text forms ("5", "true") are accepted. The error
                # names the key as the user wrote it (an alias such as opt_start_seq too).
                values[f.name] = V.parse_value(f.parse, value, f"{path}.{key}", text=True)
            except (SpecError, SpecErrors) as refused:
                errors.extend(refused.errors)
        if errors:
            raise SpecErrors(errors)
        return values

    def to_wire(self, values: Mapping[str, Any]) -> dict[str, Any]:
        keys = self.by_key()
        return {keys[name].wire: value for name, value in values.items()}


def raise_all(errors: list[SpecError]) -> None:
    if errors:
        raise SpecErrors(errors)


# -- spec kinds built on the shared parsers (:mod:`airflow_provider_jetstream.core.arguments`) -------------

#: A limit where -1 means unlimited (the server's default).
limit = V.integer(-1, V.INT64_MAX, hint=" (-1: unlimited)")


def nested(struct: Struct, check: Callable[[dict[str, Any], str], None] | None = None) -> Parser:
    """A dict of ``struct``'s fields, returned in wire form."""

    def parse(value: Any, path: str) -> dict[str, Any]:
        values = struct.parse(value, path)
        if check is not None:
            check(values, path)
        return struct.to_wire(values)

    return parse


# -- normalisers (server form vs desired form) ----------------------------------------------------


def norm_limit(value: Any) -> Any:
    """-1, 0 and absent all mean unlimited."""
    return -1 if value in (None, 0) or (isinstance(value, int) and value < 0) else value


def norm_bool(value: Any) -> bool:
    return bool(value)


def show_bool(value: Any) -> str:
    return "true" if value else "false"


def flag(name: str, api_name: str, help: str, **options: Any) -> Field:
    """A boolean field (absent counts as false)."""
    return Field(name, api_name, V.boolean, help, normalize=norm_bool, show=show_bool, **options)


def choice_field(name: str, api_name: str, words: Mapping[str, str], help: str, default: str, **options: Any) -> Field:
    """A field of one of ``words`` (each mapped to its API word); absent counts as ``default``, the server's."""
    return Field(name, api_name, V.choice(words), help, normalize=lambda v: v or default, **options)


def limit_field(
    name: str, api_name: str, help: str = "-1: unlimited", *, parse: Parser = limit, **options: Any
) -> Field:
    """A limit where -1, 0 and absent all mean unlimited (``parse``: default :data:`limit`)."""
    return Field(name, api_name, parse, help, normalize=norm_limit, show=show_limit, **options)


def duration_field(name: str, api_name: str, help: str, *, allow_zero: bool = True, **options: Any) -> Field:
    """A duration in nanoseconds (given as seconds or text like ``"30s"``); 0 and absent both mean none."""
    return Field(
        name,
        api_name,
        nanoseconds(allow_zero=allow_zero),
        help,
        normalize=norm_zero_none,
        show=show_duration,
        **options,
    )


def norm_text(value: Any) -> Any:
    return value or None


def norm_sorted(value: Any) -> Any:
    return sorted(value) if value else None


def norm_metadata(value: Any) -> Any:
    if not value:
        return None
    user = {k: v for k, v in value.items() if not k.startswith("_nats.")}
    return user or None


def norm_instant(value: Any) -> Any:
    moment = instant(value) if value else None
    if moment is None or moment.year <= 1:
        return None
    return moment


def norm_zero_none(value: Any) -> Any:
    return value or None


def norm_struct(value: Any) -> Any:
    """A nested dict without its empty / default members (``{}`` and None are equal)."""
    if not value:
        return None
    if isinstance(value, Mapping):
        out = {k: norm_struct(v) for k, v in value.items()}
        out = {k: v for k, v in out.items() if v not in (None, False, "", 0, [], {})}
        return out or None
    if isinstance(value, list):
        return [norm_struct(v) for v in value] or None
    return value


# -- display ---------------------------------------------------------------------------------------


def show_duration(value: Any) -> str:
    return format_duration(value) if isinstance(value, int) else repr(value)


def limit_bound(value: Any) -> float:
    """A normalised limit as a number to compare: none (None, negative) is infinite."""
    return math.inf if value is None or value < 0 else value


def show_limit(value: Any) -> str:
    return "unlimited" if value in (None, -1, 0) else repr(value)


@dataclass(frozen=True)
class Requirement:
    """A field that needs a newer server than JetStream API level 0."""

    path: str
    level: int
    since: str

    def message(self, target: str, level: int) -> str:
        return f"{self.path} needs nats-server >= {self.since}; {target} reports API level {level}"

    def top_field(self, spec_path: str) -> str:
        """The spec's own field this requirement is in: ``sources`` for ``stream.sources[0].consumer``."""
        if not self.path.startswith(spec_path + "."):
            return self.path.rsplit(".", 1)[-1]
        return self.path[len(spec_path) + 1 :].split(".", 1)[0].split("[", 1)[0]


def requirements(struct: Struct, values: Mapping[str, Any], path: str) -> list[Requirement]:
    keys = struct.by_key()
    return [
        Requirement(f"{path}.{name}" if path else name, keys[name].level, keys[name].since)
        for name, value in values.items()
        if keys[name].level > 0 and keys[name].active(value)
    ]


_Spec = TypeVar("_Spec", bound="Spec")


@dataclass(frozen=True)
class Spec:
    """A validated spec: ``values`` maps field names to API values, for the fields given; ``struct``
    (set by each kind of spec) says which fields there are, ``name_field`` which one names the object."""

    values: Mapping[str, Any]
    path: str

    struct: ClassVar[Struct]
    #: The field that names the object (required), and the refusal of a spec without it.
    name_field: ClassVar[str] = "name"
    unnamed: ClassVar[str] = "it needs a name"

    @classmethod
    def from_dict(cls: type[_Spec], data: Any, path: str | None = None) -> _Spec:
        """The validated spec of ``data`` (a dict of fields; a spec of this kind is returned as it is); every
        problem at once. ``path``: where the spec is, in refusals (default: its kind, ``stream``...)."""
        if isinstance(data, cls):
            return data
        path = cls.path if path is None else path
        errors: list[SpecError] = []
        data = cls.prepare(data, path, errors)
        try:
            values = cls.struct.parse(data, path)
        except SpecErrors as many:
            raise SpecErrors(errors + many.errors) from None
        if cls.name_field not in values:
            errors.append(SpecError(f"{path}.{cls.name_field}", None, cls.unnamed))
        errors.extend(cls.check(values, path))
        raise_all(errors)
        return cls(values=values, path=path)

    @classmethod
    def prepare(cls, data: Any, path: str, errors: list[SpecError]) -> Any:
        """``data`` as the fields to parse, refusals found on the way added to ``errors`` (as given by default)."""
        return data

    @classmethod
    def check(cls, values: dict[str, Any], path: str) -> list[SpecError]:
        """What this kind refuses of parsed fields beyond a missing name (none by default); it may fill in a field
        another implies (a consumer's ``deliver_policy``)."""
        return []

    def wire(self) -> dict[str, Any]:
        """The API config: exactly the fields given (never a default the user did not set)."""
        return self.struct.to_wire(self.values)

    def requirements(self) -> list[Requirement]:
        """The fields given that need a newer server than API level 0."""
        return requirements(self.struct, self.values, self.path)


@dataclass(frozen=True)
class BucketSpec(Spec):
    """A bucket spec (KV, object store): named by ``bucket`` (or given as its name alone), with at most one kind
    of origin (a mirror or sources), stored in a stream of its own. A kind adds its own checks in :meth:`problems`."""

    path: str = "bucket"

    name_field = "bucket"
    unnamed = "a bucket needs a name"

    @classmethod
    def prepare(cls, data: Any, path: str, errors: list[SpecError]) -> Any:
        return {"bucket": data} if isinstance(data, str) else data

    @classmethod
    def check(cls, values: dict[str, Any], path: str) -> list[SpecError]:
        errors: list[SpecError] = []
        if "mirror" in values and "sources" in values:
            errors.append(SpecError(f"{path}.sources", "...", "a mirror bucket has one origin: give mirror or sources"))
        return errors + cls.problems(values, path)

    @classmethod
    def problems(cls, values: Mapping[str, Any], path: str) -> list[SpecError]:
        """What this kind of bucket refuses beyond a name and one kind of origin (none by default)."""
        return []

    @property
    def bucket(self) -> str:
        return self.values["bucket"]
