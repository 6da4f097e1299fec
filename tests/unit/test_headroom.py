"""Retention headroom as pure logic: each limit's room and time, the time to loss, last known headroom projected,
the thresholds, and the columns and XCom of the replication report."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_jetstream.core.status.headroom import (
    DISCARDS,
    REFUSES,
    Headroom,
    HeadroomMemory,
    compute_headroom,
    history_rate,
    low_headroom,
)
from airflow_provider_jetstream.core.status.origins import HeldSeq, OriginProbe
from airflow_provider_jetstream.core.status.replication import ReplicationWatch

NOW = 1_800_000_000.0
LEAF = {"api": "$JS.leaf.API"}


def stamp(epoch: float) -> str:
    """A server timestamp (RFC 3339, nanoseconds) for ``epoch``."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


def origin_info(*, first: int, last: int, bytes_per_msg: int = 100, **config: object) -> dict:
    messages = last - first + 1
    return {
        "config": {"name": "readings", "discard": "old", "storage": "file", **config},
        "state": {"messages": messages, "bytes": messages * bytes_per_msg, "first_seq": first, "last_seq": last},
    }


def first_message(seq: int, age: float, subject: str = "sensors.a.t") -> dict:
    return {"seq": seq, "time": stamp(NOW - age), "subject": subject}


def measure(info: dict, held: int, last: int, *, age: float = 0.0, rate: float = 10.0, **kw: object) -> Headroom:
    first = first_message(held + 1, age) if last > held else None
    return compute_headroom(
        info=info,
        account=kw.pop("account", None),  # type: ignore[arg-type]
        held=held,
        origin_last=last,
        first_uncopied=first,
        subject_messages=kw.pop("subject_messages", None),  # type: ignore[arg-type]
        rate_msgs=rate,
        now=NOW,
    )


def limit(headroom: Headroom, name: str):
    return next(item for item in headroom.limits if item.limit == name)


def test_max_msgs_with_discard_old_counts_from_the_first_uncopied_message() -> None:
    # 1000 held by the origin (seq 1..1000), the copy holds up to 900: 100 uncopied, 100 bytes each.
    found = measure(origin_info(first=1, last=1000, max_msgs=1000), held=900, last=1000, age=30, rate=20)
    assert (found.uncopied_msgs, found.uncopied_bytes, found.first_uncopied_seq) == (100, 10_000, 901)
    assert found.oldest_age == pytest.approx(30, abs=0.01)
    max_msgs = limit(found, "max_msgs")
    # The first uncopied message goes when 1000 - 100 = 900 more arrive: 45 s at 20 msg/s.
    assert (max_msgs.used, max_msgs.room, max_msgs.effect) == (100, 900, DISCARDS)
    assert max_msgs.seconds == pytest.approx(45)
    assert found.seconds_left == pytest.approx(45) and found.binding is max_msgs
    assert found.fraction == pytest.approx(0.9)


def test_discard_new_refuses_instead_and_counts_every_message_held() -> None:
    found = measure(origin_info(first=1, last=1000, max_msgs=1200, discard="new"), held=900, last=1000, rate=20)
    max_msgs = limit(found, "max_msgs")
    assert (max_msgs.used, max_msgs.effect, max_msgs.seconds) == (1000, REFUSES, pytest.approx(10))


def test_max_age_needs_no_rate() -> None:
    found = measure(origin_info(first=1, last=50, max_age=int(600e9)), held=40, last=50, age=480, rate=0)
    max_age = limit(found, "max_age")
    assert max_age.effect == DISCARDS and max_age.seconds == pytest.approx(120, abs=0.01)
    assert found.seconds_left == pytest.approx(120, abs=0.01)


def test_max_bytes_and_account_storage_use_the_byte_rate() -> None:
    account = {"storage": 900_000, "limits": {"max_storage": 1_000_000}}
    info = origin_info(first=1, last=1000, bytes_per_msg=100, max_bytes=200_000)
    found = measure(info, held=500, last=1000, rate=10, account=account)
    # From the first uncopied (501) on: 500 messages * 100 B = 50 kB of 200 kB; 1 kB/s.
    assert limit(found, "max_bytes").seconds == pytest.approx(150)
    storage = limit(found, "account_storage")
    assert (storage.effect, storage.seconds) == (REFUSES, pytest.approx(100))
    assert found.binding is storage


def test_a_memory_stream_is_held_to_the_accounts_memory_limit() -> None:
    account = {"storage": 0, "memory": 500, "limits": {"max_storage": -1, "max_memory": 1000}}
    found = measure(origin_info(first=1, last=10, storage="memory"), held=10, last=10, account=account)
    assert [(item.limit, item.used) for item in found.limits] == [("account_storage", 500)]


def test_max_msgs_per_subject_counts_the_first_uncopied_messages_subject() -> None:
    found = measure(origin_info(first=1, last=100, max_msgs_per_subject=10), held=90, last=100, subject_messages=7)
    per_subject = limit(found, "max_msgs_per_subject")
    assert (per_subject.room, per_subject.seconds) == (3, pytest.approx(0.3))


def test_nothing_uncopied_leaves_the_whole_limit_and_nothing_arriving_never_reaches_it() -> None:
    found = measure(origin_info(first=1, last=100, max_msgs=1000, max_age=int(3600e9)), held=100, last=100, rate=0)
    assert (found.uncopied_msgs, found.oldest_age, found.first_uncopied_seq) == (0, None, None)
    assert limit(found, "max_msgs").seconds is None  # nothing arrives: never
    assert found.seconds_left == pytest.approx(3600)  # a message arriving now would have max_age
    assert measure(origin_info(first=1, last=1), held=1, last=1).limits == ()


def test_uncopied_sequences_already_gone_are_reported() -> None:
    found = measure(origin_info(first=120, last=200, max_msgs=81), held=100, last=200)
    assert found.discarded == 19


def test_the_rate_of_a_first_check_is_the_average_over_what_the_origin_holds() -> None:
    info = origin_info(first=1, last=101)
    info["state"].update(first_ts=stamp(NOW - 50), last_ts=stamp(NOW))
    assert history_rate(info) == pytest.approx(2.0)
    memory = HeadroomMemory()
    assert memory.rate("k", 101, info, NOW) == pytest.approx(2.0)
    assert memory.rate("k", 105, info, NOW + 0.5) == pytest.approx(2.0)  # too soon: the last rate
    assert memory.rate("k", 141, info, NOW + 4) == pytest.approx(10.0)  # 40 messages in 4 s
    assert HeadroomMemory().restore(memory.state()).rate("k", 161, info, NOW + 6) == pytest.approx(10.0)


@given(
    held=st.integers(0, 5000),
    uncopied=st.integers(0, 5000),
    max_msgs=st.integers(1, 20_000),
    rate=st.floats(0.01, 1000),
    age=st.floats(0, 1000),
    elapsed=st.floats(0, 10_000),
)
def test_time_to_loss_is_the_least_over_the_limits_and_a_projection_only_shortens_it(
    held: int, uncopied: int, max_msgs: int, rate: float, age: float, elapsed: float
) -> None:
    last = held + uncopied
    info = origin_info(first=1, last=max(last, 1), max_msgs=max_msgs, max_age=int(2000e9))
    found = measure(info, held=held, last=last, age=age, rate=rate)
    times = [item.seconds for item in found.limits if item.seconds is not None]
    assert found.seconds_left == min(times)
    assert 0 <= found.fraction <= 1
    projected = found.projected(NOW + elapsed, NOW + 1)
    assert projected.last_known and projected.unreachable_since == NOW + 1
    assert projected.seconds_left == pytest.approx(max(0.0, found.seconds_left - elapsed), abs=1e-6)
    assert projected.uncopied_msgs >= found.uncopied_msgs
    # Round trip through the watch's JSON state, as a trigger gets it.
    again = Headroom.from_dict(found.to_dict())
    assert again.seconds_left == pytest.approx(found.seconds_left, abs=1e-3)


def test_below_a_threshold_says_which_limit_when_and_why() -> None:
    found = measure(origin_info(first=1, last=1000, max_msgs=1000), held=900, last=1000, age=30, rate=20)
    assert low_headroom("source 'readings' in leaf", found, 60, None) == (
        "source 'readings' in leaf: low retention headroom: max_msgs discards the first uncopied message in "
        "45.0s < min_time_to_loss 1m00s (100 uncopied messages, the oldest 30.0s old)"
    )
    assert low_headroom("x", found, 30, None) is None
    assert "headroom 90.0% of max_msgs < min_headroom 95.0%" in low_headroom("x", found, None, 0.95)
    assert low_headroom("x", found, None, None) is None


def stream_info(active_ns: int = 200_000_000) -> dict:
    return {
        "config": {"name": "agg", "sources": [{"name": "readings", "external": LEAF}]},
        "state": {"messages": 900, "last_seq": 900},
        "sources": [{"name": "readings", "external": LEAF, "lag": 0, "active": active_ns}],
    }


def test_an_unreachable_origin_is_judged_by_its_last_known_headroom_projected_to_now() -> None:
    watch = ReplicationWatch("agg", min_time_to_loss=20)
    (status,) = watch.select(stream_info())
    found = measure(origin_info(first=1, last=1000, max_msgs=1000), held=900, last=1000, age=1, rate=20)
    watch.headroom_memory.remember(status.key, found)
    measured = watch.judge(
        stream_info(), NOW, {status.key: OriginProbe("ok", 1000)}, {status.key: HeldSeq(900)}, {status.key: found}
    )
    assert not measured.failed and measured.headroom[status.key] is found
    assert "Time to loss" in measured.table() and "45.0s (max_msgs)" in measured.table()
    assert measured.to_xcom()["origins"][0]["headroom"]["time_to_loss"] == 45
    unreachable = OriginProbe("unreachable", None, "domain 'leaf' did not answer")
    away = watch.judge(stream_info(), NOW + 10, {status.key: unreachable})
    assert not away.failed  # 35 s left, projected: above 20 s
    (entry,) = away.to_xcom()["unreachable"]
    assert entry["headroom"]["last_known"] and entry["headroom"]["time_to_loss"] == pytest.approx(35)
    assert entry["since"] == entry["headroom"]["unreachable_since"]
    later = watch.judge(stream_info(), NOW + 30, {status.key: unreachable})
    assert later.failed_reason == "low_headroom" and "in 15.0s < min_time_to_loss 20.0s" in later.failed
    assert "last known headroom measured" in later.failed


def test_an_origin_never_measured_is_not_judged_and_warn_only_lists_low_origins() -> None:
    watch = ReplicationWatch("agg", min_time_to_loss=math.inf)
    (status,) = watch.select(stream_info())
    unreachable = OriginProbe("unreachable", None, "domain 'leaf' did not answer")
    check = watch.judge(stream_info(), NOW, {status.key: unreachable})
    assert not check.failed and check.low_headroom == ()
    assert "unknown: never measured" in check.table()
    found = measure(origin_info(first=1, last=1000, max_msgs=1000), held=900, last=1000, rate=20)
    warn = ReplicationWatch("agg", min_time_to_loss=60, low_headroom="warn")
    check = warn.judge(
        stream_info(), NOW, {status.key: OriginProbe("ok", 1000)}, {status.key: HeldSeq(900)}, {status.key: found}
    )
    assert not check.failed and len(check.low_headroom) == 1
    assert check.to_xcom()["low_headroom"] == list(check.low_headroom)
