"""Subjects and API prefixes compared: the domain of an API prefix, and whether two subject filters overlap.

The parsers of names and subjects (what the server accepts) are
:mod:`airflow_provider_jetstream.core.arguments.names`.
"""

from __future__ import annotations


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
