"""Operators' and sensors' arguments checked with their signature: literal ones at parse time, the rest once rendered.

A class names its signature (an ``Args`` of :mod:`airflow_provider_jetstream.core.arguments`) in
``arguments``; :class:`CheckedArguments` then checks, with that one declaration:

- when the object is made (``__new__``, before Airflow reads the arguments), a retired name: refused naming
  what replaced it (``name=... is not allowed: renamed stream``, or ``moved into options=...``);
- at the end of ``__init__`` (the outermost one of the class chain), every argument whose value is
  final: a refusal fails the DAG's import, naming the argument, the value and what is allowed. Values
  Airflow still changes (Jinja, an ``XComArg``: :func:`.templates.is_resolved_at_run_time`) are left,
  with the rules that involve them;
- after ``render_template_fields`` (the task runner and ``dag.test()`` render before ``execute``),
  every argument again, before any request. A refusal found then is raised by
  :meth:`CheckedArguments.checked_arguments`, which ``execute`` (a sensor's poke) calls first: so it
  goes through the run method's refusal handling (an operator fails without retries, a sensor fails or
  skips with ``soft_fail``), and the UI still shows the rendered value that was refused.

``checked_arguments()`` returns every argument's checked value (``"true"`` rendered for a boolean is
``True``, a spec dict a spec): what ``execute`` passes to the hook. Assigning an argument's attribute
after ``__init__`` (rendering does) makes the next call check again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time

if TYPE_CHECKING:
    from airflow_provider_jetstream.core.arguments import Args

F = TypeVar("F", bound=Callable[..., Any])

_DEPTH = "_arguments_init_depth"
_CHECKED = "_arguments_checked"
_REFUSAL = "_arguments_refusal"
_LATER = "_arguments_rendered"


def _checking_after(init: F) -> F:
    """``init``, then (for the outermost ``__init__`` of the class chain) the check of literal values."""

    @functools.wraps(init)
    def wrapper(self: CheckedArguments, *args: Any, **kwargs: Any) -> None:
        depth = self.__dict__.get(_DEPTH, 0)
        self.__dict__[_DEPTH] = depth + 1
        try:
            init(self, *args, **kwargs)
        finally:
            self.__dict__[_DEPTH] = depth
        if depth == 0:
            self.check_literal_arguments()

    wrapper._checks_arguments = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class CheckedArguments:
    """Mixin for operators and sensors: their arguments checked with ``arguments`` (see the module doc).

    Put it before ``BaseOperator`` / ``BaseSensorOperator``. Each argument is read from the attribute
    of its name (or the one ``argument_attributes`` names).
    """

    #: The signature of the class's public arguments (besides Airflow's own); its templated ones are the class's
    #: ``template_fields``.
    arguments: ClassVar[Args]
    #: Where text forms (``"true"``, ``"5"``) are accepted: None, the arguments whose values came from
    #: a template (a rendered template is text; a literal ``purge="yes"`` is a mistake, not a boolean);
    #: True, every argument (a command line's).
    text_arguments: ClassVar[bool | Collection[str] | None] = None
    #: Argument name -> the attribute holding it, where they differ.
    argument_attributes: ClassVar[Mapping[str, str]] = {}
    #: Arguments the class passes on as they are, besides Airflow's (a retired name among them is not refused).
    other_arguments: ClassVar[Collection[str]] = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Refuse a retired name among the keyword arguments, naming its replacement, before anything else
        reads them: Airflow would call it invalid, or first call the renamed argument missing."""
        taken = {*cls.arguments.args, *cls.other_arguments}
        unknown = {name: value for name, value in kwargs.items() if name not in taken}
        if unknown:
            cls.arguments.refuse_retired(unknown, cls.__name__)
        return super().__new__(cls)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A class that names its ``arguments`` renders their templated ones (its ``template_fields``, unless it
        sets its own); its ``__init__`` checks the literal values when it ends (see the module doc)."""
        super().__init_subclass__(**kwargs)
        if "arguments" in cls.__dict__ and "template_fields" not in cls.__dict__:
            cls.template_fields = cls.arguments.template_fields()
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_checks_arguments", False):
            cls.__init__ = _checking_after(init)  # type: ignore[method-assign]

    def __setattr__(self, key: str, value: Any) -> None:
        super().__setattr__(key, value)
        cls = type(self)
        if _LATER in self.__dict__ and (key in cls.arguments.args or key in cls.argument_attributes.values()):
            self.__dict__[_CHECKED] = None
            self.__dict__[_REFUSAL] = None

    def argument_values(self) -> dict[str, Any]:
        """Every declared argument's current value (as given, or as rendered)."""
        attributes = type(self).argument_attributes
        return {name: getattr(self, attributes.get(name, name)) for name in type(self).arguments.args}

    def _check(self, values: Mapping[str, Any], rendered: Collection[str] = (), **options: Any) -> dict[str, Any]:
        text = type(self).text_arguments
        return type(self).arguments.check(values, text=rendered if text is None else text, rendered=rendered, **options)

    def check_literal_arguments(self) -> None:
        """Check every argument whose value is final; the others once rendered (see the module doc)."""
        values = self.argument_values()
        later = frozenset(name for name, value in values.items() if is_resolved_at_run_time(value))
        checked = self._check(values, skip=is_resolved_at_run_time)
        self.__dict__[_LATER] = later
        self.__dict__[_CHECKED] = None if later else checked
        self.__dict__[_REFUSAL] = None

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        super().render_template_fields(context, jinja_env)  # type: ignore[misc]
        try:
            self.__dict__[_CHECKED] = self._check(self.argument_values(), rendered=self.__dict__.get(_LATER, ()))
        except Exception as err:  # raised before any request, by checked_arguments()
            self.__dict__[_REFUSAL] = err

    def checked_arguments(self) -> dict[str, Any]:
        """Every argument's checked value; raises what the check after rendering refused.

        Without rendering (``execute`` called directly), or after an argument was assigned, it checks
        the current values first.
        """
        refusal = self.__dict__.get(_REFUSAL)
        if refusal is not None:
            raise refusal
        checked = self.__dict__.get(_CHECKED)
        if checked is None:
            checked = self._check(self.argument_values(), rendered=self.__dict__.get(_LATER, ()))
            self.__dict__[_CHECKED] = checked
        return checked
