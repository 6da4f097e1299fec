"""Compare a spec with the server's config: what changes, and whether the server can apply it.

Only the fields the spec gives are compared (the others keep their server values, and are never
sent back changed). Both sides are normalised first (server defaults, ``-1``/``0`` unlimited,
subject order, the server's ``_nats.*`` metadata, RFC 3339 precision), so an unchanged spec shows
no change. Sources are compared per origin (stream + API): a source the spec does not name is
kept, unless ``prune_sources`` asks to remove it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_jetstream.core.manage.specs import fields as F
from airflow_provider_jetstream.core.manage.specs.fields import Struct
from airflow_provider_jetstream.core.manage.specs.sources import (
    describe_source,
    norm_sources,
    show_source,
    source_consumer,
    source_key,
)

#: Why a durable source's consumer cannot change in place (the server takes the stream update).
MOVED_CONSUMER = (
    "the origin's flow-control consumer keeps pushing where it did (the server does not move it), so the copy "
    "would stop acknowledging and the origin would never drain"
)


@dataclass(frozen=True)
class Change:
    """One field whose value differs: ``old`` (server) -> ``new`` (spec), in display form."""

    field: str
    old: str
    new: str
    in_place: bool
    note: str = ""
    #: Applied in place, it loses something stored: a limit on what is stored lowered, or set where
    #: there was none (data discarded), or fewer replicas (durability lowered); see :attr:`Field.discards
    #: <airflow_provider_jetstream.core.manage.specs.fields.Field>` and ``Field.durability``.
    discards: bool = False

    def line(self, names: Mapping[str, str] | None = None) -> str:
        """``field: old -> new (note)``; ``names`` gives the spec's own name of a field, shown beside it
        (a bucket's ``history`` beside ``max_msgs_per_subject``)."""
        note = f" ({self.note})" if self.note else ""
        name = (names or {}).get(self.field)
        return f"{self.field}{f' ({name})' if name else ''}: {self.old} -> {self.new}{note}"

    def as_dict(self) -> dict[str, Any]:
        out = {"old": self.old, "new": self.new, "in_place": self.in_place}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Diff:
    """The changes between a spec and the server, and the config to send to apply them in place."""

    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    update_config: dict[str, Any] = field(default_factory=dict)

    @property
    def unchanged(self) -> bool:
        return not self.changes

    @property
    def replace_forcing(self) -> list[Change]:
        return [c for c in self.changes if not c.in_place]

    @property
    def discarding(self) -> list[Change]:
        """The in-place changes that discard stored data (limits lowered) or lower its durability (replicas)."""
        return [c for c in self.changes if c.in_place and c.discards]

    def as_dict(self) -> dict[str, Any]:
        return {c.field: c.as_dict() for c in self.changes}

    def lines(self) -> list[str]:
        return [c.line() for c in self.changes]


def _differs(f: F.Field, old: Any, new: Any) -> bool:
    return f.normalize(old) != f.normalize(new)


def _in_place(f: F.Field, old: Any, new: Any) -> bool:
    if f.editable == F.EDITABLE:
        return True
    if f.editable in (F.ENABLE_ONLY, F.ONCE):
        return not f.normalize(old) and bool(f.normalize(new))
    return False


#: The note of a change that discards stored data.
DISCARDS = "discards stored data"
#: The note of a change that lowers the data's durability.
LOWERS_DURABILITY = "lowers durability: fewer copies, fewer node losses survived"


def _loses(f: F.Field, old: Any, new: Any) -> str:
    """What changing ``f`` from ``old`` to ``new`` loses in place: :data:`DISCARDS` (a limit on what is
    stored lowered; none -> any counts), :data:`LOWERS_DURABILITY` (fewer replicas), or ``""``."""
    if f.discards and F.limit_bound(f.normalize(new)) < F.limit_bound(f.normalize(old)):
        return DISCARDS
    if f.durability and old is not None and f.normalize(new) < f.normalize(old):
        return LOWERS_DURABILITY
    return ""


def _show(f: F.Field, value: Any) -> str:
    if value is None:
        return "unset"
    return f.show(value)


def diff_config(
    struct: Struct,
    desired: Mapping[str, Any],
    server: Mapping[str, Any],
    *,
    prune_sources: bool = False,
    server_view: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> Diff:
    """Compare ``desired`` (field name -> API value, fields given only) with ``server`` (API config)."""
    keys = struct.by_key()
    view = server_view(server) if server_view else server
    result = Diff(update_config=copy.deepcopy(dict(server)))
    for name, new in desired.items():
        f = keys[name]
        old = view.get(f.wire)
        if f.editable == F.CREATE_ONLY:
            if _differs(f, old, new) and old is not None:
                result.notes.append(f"{name} applies only when creating; the existing value {old!r} stays")
            continue
        if name == "sources":
            _diff_sources(f, old or [], new, prune_sources, result)
            continue
        if _differs(f, old, new):
            loses = _loses(f, old, new)
            change = Change(name, _show(f, old), _show(f, new), _in_place(f, old, new), loses, bool(loses))
            result.changes.append(change)
        result.update_config[f.wire] = new
    if server_view is not None:
        # One filter form at a time: the one the spec gives replaces the other.
        if "filter_subject" in desired:
            result.update_config.pop("filter_subjects", None)
        if "filter_subjects" in desired:
            result.update_config.pop("filter_subject", None)
    return result


def _diff_sources(f: F.Field, old: list[dict], new: list[dict], prune: bool, result: Diff) -> None:
    """Merge per origin: the spec's sources replace the server's of the same origin; others stay."""
    wanted: dict[tuple, list[dict]] = {}
    for source in new:
        wanted.setdefault(source_key(source), []).append(source)
    merged: list[dict] = []
    placed: set[tuple] = set()
    kept: list[dict] = []
    removed: list[dict] = []
    for source in old:
        key = source_key(source)
        if key in wanted:
            if key not in placed:
                merged.extend(wanted[key])
                placed.add(key)
        elif prune:
            removed.append(source)
        else:
            merged.append(source)
            kept.append(source)
    for key, sources in wanted.items():
        if key not in placed:
            merged.extend(sources)
    result.update_config[f.wire] = merged
    for source in old:
        before, after = source_consumer(source), [source_consumer(s) for s in wanted.get(source_key(source), [])]
        if before and after and after[0] != before:
            shown = f"{before['name']} at {before['deliver_subject']!r}"
            new_shown = f"{after[0]['name']} at {after[0]['deliver_subject']!r}" if after[0] else "none"
            field_name = f"sources[{describe_source(source)}].consumer"
            result.changes.append(Change(field_name, shown, new_shown, False, MOVED_CONSUMER))
    if kept:
        result.notes.append(
            "kept sources the spec does not name: "
            + ", ".join(describe_source(s) for s in kept)
            + " (prune_sources=True would remove them)"
        )
    if norm_sources(merged) != norm_sources(old):
        note = ""
        if removed:
            note = "removes " + ", ".join(describe_source(s) for s in removed)
        result.changes.append(
            Change(
                "sources",
                "[" + "; ".join(show_source(s) for s in old) + "]" if old else "none",
                "[" + "; ".join(show_source(s) for s in merged) + "]",
                True,
                note,
            )
        )
