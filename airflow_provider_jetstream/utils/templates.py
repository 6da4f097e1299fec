"""Is an operator or sensor argument still to be rendered? One answer for the whole provider.

Arguments are validated when the DAG is parsed, unless Airflow will still change them: then they
are validated once rendered, before any request. Only two things change: a string holding Jinja
(``{{ ... }}`` or ``{% ... %}``), at any depth of lists, tuples, sets and dict values (what
Airflow renders) and in the ``template_fields`` of an object (typed options), and an object Airflow
resolves at run time (an ``XComArg``). Anything else, a
``timedelta``, a ``datetime``, a number, is final and validated at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

_JINJA_MARKERS = ("{{", "{%")


def is_templated(value: Any) -> bool:
    """True if ``value`` is, or holds in a list, tuple, set or dict value, a string with Jinja.

    >>> is_templated("{{ params.spec }}"), is_templated({"a": ["x", "{% if y %}1{% endif %}"]})
    (True, True)
    >>> import datetime; is_templated({"max_age": datetime.timedelta(hours=1)})
    False
    """
    return _walk(value, resolvable=False)


def is_resolved_at_run_time(value: Any) -> bool:
    """True if Airflow will still change ``value`` before ``execute``: Jinja anywhere in it
    (:func:`is_templated`), or an object it resolves from the run's context, such as an ``XComArg``."""
    return _walk(value, resolvable=True)


def _walk(value: Any, *, resolvable: bool, seen: set[int] | None = None) -> bool:
    if isinstance(value, str):
        return any(marker in value for marker in _JINJA_MARKERS)
    if isinstance(value, (bytes, bytearray, int, float, type(None))):
        return False
    if resolvable and not isinstance(value, os.PathLike) and callable(getattr(value, "resolve", None)):
        return True  # what Airflow's render_template resolves: XComArg and friends
    fields = getattr(value, "template_fields", None)
    if fields is not None and not isinstance(value, type):  # an object Airflow renders field by field (options)
        return any(_walk(getattr(value, name, None), resolvable=resolvable, seen=seen) for name in fields)
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        seen = seen if seen is not None else set()
        if id(value) in seen:
            return False
        seen.add(id(value))
        items = value.values() if isinstance(value, Mapping) else value
        return any(_walk(item, resolvable=resolvable, seen=seen) for item in items)
    return False
