"""Local file paths by role: a file the package reads (:func:`local_file`) or writes (:func:`local_destination`).

Each role is checked twice, in the one place that can know:

- **its form**, where the value is known (an operator's literal when the DAG is parsed, a rendered one before
  the task connects, a hook method's on each call): non-empty text or an ``os.PathLike``, no NUL, each component
  at most the file system's ``NAME_MAX`` bytes (``os.pathconf``, 255 where it cannot be asked) and the whole at
  most ``PATH_MAX``; a longer name would only fail as a raw ``OSError`` once the download is done;
- **what is there**, on the machine the task runs on, before anything is sent (:func:`readable_file`,
  :func:`destination_file`): a file read must be a regular file (a FIFO or a device could block or never end);
  a destination is never a device node, FIFO, socket or symbolic link (writing would replace ``/dev/null`` as
  root, or write through a link), its directory must exist, and a directory (or a path ending in ``/``) means
  ``<directory>/<last part of the object's name>``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from airflow_provider_jetstream.core.errors import SpecError

#: ``NAME_MAX`` and ``PATH_MAX`` where the file system cannot be asked (Linux's and most others').
DEFAULT_NAME_MAX, DEFAULT_PATH_MAX = 255, 4096
_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep) if sep)


def _limit(path: str, name: str, default: int) -> int:
    """The file system's ``name`` limit (``PC_NAME_MAX``...) at the nearest existing directory of ``path``."""
    directory = Path(os.path.abspath(path))
    while not os.path.isdir(directory) and directory != directory.parent:
        directory = directory.parent
    try:
        return int(os.pathconf(directory, name))
    except (OSError, ValueError, AttributeError):
        return default


def _path_text(value: Any, field: str, allowed: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise SpecError(field, value, allowed)
    name_max = _limit(value, "PC_NAME_MAX", DEFAULT_NAME_MAX)
    too_long = [part for part in Path(value).parts if len(os.fsencode(part)) > name_max]
    if too_long:
        raise SpecError(field, value, f"each part of a path is at most {name_max} bytes; {allowed}")
    path_max = _limit(value, "PC_PATH_MAX", DEFAULT_PATH_MAX)
    if len(os.fsencode(value)) >= path_max:
        raise SpecError(field, value, f"a path is under {path_max} bytes; {allowed}")
    return value


def local_file(value: Any, field: str) -> str:
    """A file the task reads, on the machine it runs on (text or ``os.PathLike``), as text."""
    return _path_text(value, field, "a file path (text or a pathlib.Path), e.g. '/data/day-1.csv'")


def local_destination(value: Any, field: str) -> str:
    """A file the task writes, on the machine it runs on (text or ``os.PathLike``), as text; a path ending in
    ``/`` names a directory."""
    return _path_text(
        value, field, "a file path, or a directory ending in '/' (text or a pathlib.Path), e.g. '/data/day-1.csv'"
    )


def readable_file(value: Any, field: str) -> Path:
    """The regular file ``value`` on this machine; :class:`SpecError` when it is missing or not a regular file."""
    path = Path(local_file(value, field))
    try:
        is_regular = stat.S_ISREG(path.stat().st_mode)
    except OSError:
        is_regular = False
    if not is_regular:
        raise SpecError(field, value, "an existing regular file on the machine the task runs on, to read")
    return path


def refuse_special(path: Path, field: str, value: Any) -> None:
    """Refuse a destination that is there and is not a regular file (a device, FIFO, socket, symbolic link or
    directory): it is never replaced. Checked before connecting, and again just before the rename."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    if stat.S_ISLNK(mode):
        what = f"{str(path)!r} is a symbolic link: give the path of the file itself"
    elif stat.S_ISDIR(mode):
        what = f"{str(path)!r} is a directory: give a file path"
    else:
        what = f"{str(path)!r} is a device, FIFO or socket, never replaced: give a regular file's path"
    raise SpecError(field, value, what)


def destination_file(value: Any, object_name: str, field: str) -> Path:
    """The file to write ``object_name`` to for the destination ``value`` on this machine: ``value`` itself, or
    ``<value>/<last part of object_name>`` when ``value`` is a directory or ends in ``/``. :class:`SpecError`
    when that directory, or the file's directory, does not exist, or the file is there and is not a regular file
    (see :func:`refuse_special`)."""
    text = local_destination(value, field)
    path = Path(text)
    if os.path.islink(path):  # "link/" too: a link to a directory is not followed either
        refuse_special(path, field, value)
    if text.endswith(_SEPARATORS) or os.path.isdir(path):
        if not os.path.isdir(path):
            raise SpecError(
                field, value, f"the directory {text!r} does not exist: create it first, or give a file path"
            )
        last = object_name.replace("\\", "/").rsplit("/", 1)[-1]
        if last in ("", ".", "..") or len(os.fsencode(last)) > _limit(text, "PC_NAME_MAX", DEFAULT_NAME_MAX):
            raise SpecError(
                field, value, f"the object's name {object_name!r} does not end in a file name: give a file path"
            )
        path = path / last
    if not os.path.isdir(path.parent):
        raise SpecError(field, value, f"the directory {str(path.parent)!r} does not exist: create it first")
    refuse_special(path, field, value)
    return path


__all__ = [
    "destination_file",
    "local_destination",
    "local_file",
    "readable_file",
    "refuse_special",
]
