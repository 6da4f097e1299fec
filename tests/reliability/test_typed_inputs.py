"""Attacks generated from the types (issue #36): every public argument declared in
:mod:`airflow_provider_jetstream.core.signatures` gets the attack values of its type
(:data:`tests.support.typed_attacks.ATTACKS`) and must refuse each of them, naming itself, before anything is
sent (its declaration checks it when the DAG is parsed, the hook method is called or the trigger is rebuilt).
An argument whose type has no attacks fails the suite: a surface added later is attacked the day it lands.

This is the fast, server-free sweep by type; ``test_generated_inputs.py`` runs generated values through every
entry point against real servers.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_jetstream.core.arguments import REFUSE, Arg
from airflow_provider_jetstream.core.arguments import names as N
from airflow_provider_jetstream.core.arguments import values as V
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from tests.support.generated import show
from tests.support.typed_attacks import ATTACKS, EMPTY_REFUSED, public_arguments, type_of

ARGUMENTS = list(public_arguments())


def test_every_public_argument_has_attacks_for_its_type() -> None:
    missing = sorted(
        f"{where} ({type_of(arg.parse)!r})" for where, arg in ARGUMENTS if type_of(arg.parse) not in ATTACKS
    )
    assert not missing, "no attacks for the type of: " + ", ".join(missing) + " (add them to typed_attacks.ATTACKS)"


def test_the_sweep_reaches_every_kind_of_declaration() -> None:
    """Signatures, groups of declarations and the fields of typed options (each declaration once), with the
    types by role."""
    found = {where: type_of(arg.parse) for where, arg in ARGUMENTS}
    assert found["operations.PUBLISH.subject"] is N.delivery_subject
    assert found["operations.PUBLISH.msg_id"] is V.message_id
    assert found["durable.DURABLE_TUNING.deliver_subject"] is N.delivery_subject
    assert found["events.MESSAGE_SETTINGS.dead_letter_subject"] is N.delivery_subject
    assert found["waits.AWAIT_MESSAGE.filter_subjects"] is N.subject  # stream_filter: subject(use=FILTER)
    assert len(ARGUMENTS) > 120  # each declaration once, however many signatures share it


def _refusal(arg: Arg, value: Any, field: str, text: bool) -> str | None:
    """What is wrong with how ``arg`` treats ``value`` (None: refused, naming the field)."""
    try:
        arg.value(value, field, given=True, text=text)
    except JetStreamConfigError as err:
        return None if field in str(err) else f"refused without naming {field}: {err}"
    except Exception as err:  # any other exception is what this test finds
        return f"raw {type(err).__name__}: {err}"
    return "accepted"


@pytest.mark.parametrize(("where", "arg"), ARGUMENTS, ids=[where for where, _ in ARGUMENTS])
def test_each_argument_refuses_the_attacks_of_its_type(where: str, arg: Arg) -> None:
    kind = type_of(arg.parse)
    if kind not in ATTACKS:
        pytest.fail(f"no attacks for {kind!r}")  # reported once more by the test above, by argument
    field = where.rsplit(".", 1)[-1]
    empty_refused = kind in EMPTY_REFUSED or arg.empty == REFUSE
    values = [*ATTACKS[kind], *([""] if empty_refused else [])]
    problems = [
        f"{field}={show(value)} ({'text' if text else 'python'}): {problem}"
        for value in values
        for text in (False, True)
        if (problem := _refusal(arg, value, field, text))
    ]
    assert not problems, "\n".join(problems)
