"""The replication model: durations, origins read from raw stream info, the caught-up judgement, the table."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_jetstream.core.arguments.durations import duration_seconds
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.status.origins import HeldSeq, OriginProbe, statuses_from_stream_info
from airflow_provider_jetstream.core.status.replication import LOG_HEARTBEAT, ReplicationWatch
from airflow_provider_jetstream.core.status.report import format_seconds


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (10, 10.0),
        (2.5, 2.5),
        ("10s", 10.0),
        ("500ms", 0.5),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("3", 3.0),
        (timedelta(minutes=2), 120.0),
    ],
)
def test_duration_seconds_accepts_seconds_timedelta_and_text(value, seconds) -> None:
    assert duration_seconds(value, "max_inactive") == seconds


@pytest.mark.parametrize("value", ["10 parsecs", "", "-5s", -1, True, None, "s10", "10x"])
def test_duration_seconds_names_the_field_and_what_is_allowed(value) -> None:
    with pytest.raises(JetStreamConfigError, match=r"max_inactive=.* is not allowed: use ") as err:
        duration_seconds(value, "max_inactive")
    assert "'5m'" in str(err.value) or "non-negative" in str(err.value)


def info(sources=None, mirror=None, config_sources=None, messages=5) -> dict:
    return {
        "config": {"name": "agg", "sources": config_sources or [], **({"mirror": mirror} if mirror else {})},
        "state": {"messages": messages, "last_seq": messages},
        **({"sources": sources} if sources is not None else {}),
        **({"mirror": mirror} if mirror else {}),
    }


LEAF = {"api": "$JS.leaf.API", "deliver": ""}


def test_origins_are_read_with_their_domain_and_active_in_seconds() -> None:
    raw = info(
        sources=[
            {"name": "orders", "external": LEAF, "lag": 3, "active": 1_500_000_000},
            {"name": "local", "lag": 0, "active": -1},
            {
                "name": "imported",
                "external": {"api": "JS.acc@hub.API"},
                "lag": 0,
                "active": 0,
                "error": {"code": 404, "err_code": 10059, "description": "stream not found"},
            },
        ]
    )
    orders, local, imported = statuses_from_stream_info(raw)
    assert (orders.kind, orders.origin, orders.domain, orders.lag, orders.active) == (
        "source",
        "orders",
        "leaf",
        3,
        1.5,
    )
    assert (local.api_prefix, local.where, local.active) == (None, "(local)", None)
    assert (imported.domain, imported.where) == (None, "JS.acc@hub.API")
    assert imported.error == "stream not found (code 10059)"


def test_origin_prefix_falls_back_to_the_stream_config_when_the_info_has_none() -> None:
    raw = info(
        sources=[{"name": "orders", "lag": 0, "active": 0}],
        config_sources=[{"name": "orders", "external": {"api": "$JS.edge-1.API"}}],
    )
    (status,) = statuses_from_stream_info(raw)
    assert status.domain == "edge-1"


def test_a_silent_origin_with_lag_zero_is_not_caught_up() -> None:
    watch = ReplicationWatch("agg", max_lag=0, max_inactive=3)
    check = watch.judge(info(sources=[{"name": "orders", "external": LEAF, "lag": 0, "active": 8_000_000_000}]))
    assert not check.caught_up and check.failed is None
    assert "origin silent for 8.00s > max_inactive 3.00s" in check.waiting_for()
    assert "source 'orders' in leaf" in check.waiting_for()


def test_caught_up_needs_lag_within_max_lag_recent_contact_and_no_error() -> None:
    watch = ReplicationWatch("agg", max_lag=2, max_inactive=10)
    fresh = {"external": LEAF, "active": 400_000_000}
    assert watch.judge(info(sources=[{"name": "a", "lag": 2, **fresh}])).caught_up
    lagging = watch.judge(info(sources=[{"name": "a", "lag": 3, **fresh}]))
    assert not lagging.caught_up and "lag 3 > max_lag 2" in lagging.waiting_for()
    never = watch.judge(info(sources=[{"name": "a", "lag": 0, "external": LEAF, "active": -1}]))
    assert not never.caught_up and "never heard from the origin" in never.waiting_for()


def test_mirror_is_judged_like_a_source() -> None:
    mirror = {"name": "orders", "external": LEAF, "lag": 0, "active": 200_000_000}
    check = ReplicationWatch("backup").judge(info(mirror=mirror))
    assert check.caught_up and check.verdicts[0].status.kind == "mirror"
    assert check.to_xcom()["origins"][0] == {
        "kind": "mirror",
        "origin": "orders",
        "domain": "leaf",
        "api_prefix": "$JS.leaf.API",
        "lag": 0,
        "active": 0.2,
        "error": None,
        "caught_up": True,
        "reason": "caught up",
        "check": "lag/active",
        "origin_last_seq": None,
        "held_seq": None,
    }


def test_a_replication_error_fails_only_after_the_grace_period() -> None:
    error = {
        "name": "gone",
        "external": LEAF,
        "lag": 0,
        "active": -1,
        "error": {"code": 404, "err_code": 10059, "description": "stream not found"},
    }
    watch = ReplicationWatch("agg", error_grace=30)
    assert watch.judge(info(sources=[error]), now=100.0).failed is None
    assert watch.errors_pending
    assert watch.judge(info(sources=[error]), now=129.0).failed is None
    failed = watch.judge(info(sources=[error]), now=130.0).failed
    assert "source 'gone' in leaf reports a replication error for 30.0s" in failed
    assert "stream not found (code 10059)" in failed


def test_an_exact_check_is_not_caught_up_while_the_copy_reports_an_error() -> None:
    """An origin created after its mirror: empty when probed, but the mirror still says "stream not found"."""
    error = {"code": 404, "err_code": 10059, "description": "stream not found"}
    mirror = {"name": "orders", "external": LEAF, "lag": 0, "active": -1}
    key = statuses_from_stream_info(info(mirror=mirror))[0].key
    watch = ReplicationWatch("backup")
    probes, held = {key: OriginProbe("ok", last_seq=0)}, {key: HeldSeq(0)}
    failing = watch.judge(info(mirror={**mirror, "error": error}), now=0.0, probes=probes, held=held)
    assert not failing.done and "replication error: stream not found" in failing.waiting_for()
    assert watch.judge(info(mirror={**mirror, "active": 100_000_000}), now=1.0, probes=probes, held=held).done


def test_an_error_that_clears_resets_the_grace_period() -> None:
    error = {"name": "a", "external": LEAF, "lag": 0, "active": -1, "error": {"code": 503, "description": "x"}}
    healthy = {"name": "a", "external": LEAF, "lag": 0, "active": 100_000_000}
    watch = ReplicationWatch("agg", error_grace=10)
    watch.judge(info(sources=[error]), now=0.0)
    assert watch.judge(info(sources=[healthy]), now=5.0).caught_up
    assert watch.judge(info(sources=[error]), now=12.0).failed is None


def test_named_sources_are_checked_and_unknown_names_refused() -> None:
    raw = info(
        sources=[
            {"name": "a", "external": LEAF, "lag": 0, "active": 0},
            {"name": "b", "external": LEAF, "lag": 9, "active": 0},
        ]
    )
    assert ReplicationWatch("agg", sources=["a"]).judge(raw).caught_up
    assert not ReplicationWatch("agg").judge(raw).caught_up
    with pytest.raises(JetStreamConfigError, match=r"no mirror or source named 'c'; its origins are 'a', 'b'"):
        ReplicationWatch("agg", sources=["c"]).judge(raw)


def test_a_stream_without_mirror_or_sources_is_refused() -> None:
    with pytest.raises(JetStreamConfigError, match="has no mirror and no sources"):
        ReplicationWatch("plain").judge(info(sources=[]))


def test_table_has_one_row_per_origin_like_nats_stream_report() -> None:
    raw = info(
        sources=[
            {"name": "orders", "external": LEAF, "lag": 0, "active": 18_300_000_000},
            {"name": "local", "lag": 0, "active": 590_000_000},
        ]
    )
    table = ReplicationWatch("agg", max_inactive=10).judge(raw).table().splitlines()
    assert [c.strip() for c in table[0].split("|")][:7] == [
        "Stream",
        "Kind",
        "Origin",
        "Domain / API prefix",
        "Lag",
        "Active",
        "Error",
    ]
    assert [c.strip() for c in table[2].split("|")][:8] == [
        "agg",
        "Source",
        "orders",
        "leaf",
        "0",
        "18.3s",
        "",
        "WAITING",
    ]
    assert table[2].split("|")[8].strip().startswith("lag/active: origin silent for 18.3s")
    assert [c.strip() for c in table[3].split("|")] == [
        "agg",
        "Source",
        "local",
        "(local)",
        "0",
        "0.59s",
        "",
        "caught up",
        "lag/active: caught up",
    ]


def test_format_seconds() -> None:
    assert [format_seconds(s) for s in (None, 0.59, 18.25, 125, 7300)] == ["never", "0.59s", "18.2s", "2m05s", "2h01m"]


def test_after_a_silence_the_lag_is_trusted_only_after_max_inactive_of_contact() -> None:
    """Right after a relink the server reports fresh contact with the lag it knew before the outage."""
    watch = ReplicationWatch("agg", max_inactive=3)

    def source(active_s: float, lag: int = 0) -> dict:
        return info(sources=[{"name": "test", "lag": lag, "active": int(active_s * 1e9), "external": LEAF}])

    assert watch.judge(source(0.2), now=100.0).caught_up  # healthy: caught up
    silent = watch.judge(source(8.0), now=101.0)
    assert not silent.caught_up and "origin silent for" in silent.verdicts[0].reason
    back = watch.judge(source(0.1), now=102.0)
    assert not back.caught_up and "heard from again" in back.verdicts[0].reason
    assert not watch.judge(source(0.1), now=104.0).caught_up  # 2 s of contact < max_inactive
    assert watch.judge(source(0.1), now=105.5).caught_up  # 3.5 s of contact: the lag is trusted again


def test_the_watch_state_survives_a_json_round_trip_between_processes() -> None:
    """Reschedule and the hand-off to the trigger rebuild the watch from its JSON state (issue #9):
    the relink rule, the error grace and the unreachable clock carry over."""
    import json

    from airflow_provider_jetstream.core.status.replication import OriginProbe

    def source(active_s: float, error: dict | None = None) -> dict:
        entry = {"name": "test", "lag": 0, "active": int(active_s * 1e9), "external": LEAF}
        return info(sources=[{**entry, **({"error": error} if error else {})}])

    def next_process(watch: ReplicationWatch) -> ReplicationWatch:
        return ReplicationWatch("agg", max_inactive=3, error_grace=10).restore(json.loads(json.dumps(watch.state())))

    watch = ReplicationWatch("agg", max_inactive=3, error_grace=10)
    assert not watch.judge(source(8.0), now=100.0).caught_up  # silent
    watch = next_process(watch)
    assert not watch.judge(source(0.1), now=101.0).caught_up  # back, not trusted yet
    watch = next_process(watch)
    assert not watch.judge(source(0.1), now=103.0).caught_up  # 2 s of contact < 3 s
    watch = next_process(watch)
    assert watch.judge(source(0.1), now=104.5).caught_up  # 3.5 s: trusted again

    error = {"code": 503, "description": "x"}
    watch.judge(source(0.1, error), now=200.0)
    watch = next_process(watch)
    assert "reports a replication error for 10.0s" in watch.judge(source(0.1, error), now=210.0).failed

    unreachable = {"source:test:$JS.leaf.API": OriginProbe("unreachable", reason="domain 'leaf' did not answer")}
    watch = ReplicationWatch("agg", unreachable_timeout=5)
    assert watch.judge(source(0.1), now=300.0, probes=unreachable).failed is None
    watch = ReplicationWatch("agg", unreachable_timeout=5).restore(json.loads(json.dumps(watch.state())))
    check = watch.judge(source(0.1), now=306.0, probes=unreachable)
    assert "unreachable for 6.00s > unreachable_timeout 5.00s" in check.failed
    assert check.failed_reason == "unreachable"
    assert check.unreachable()[0]["since"] == "1970-01-01T00:05:00Z"


def test_the_table_is_logged_when_it_changes_and_at_a_heartbeat() -> None:
    watch = ReplicationWatch("agg", max_inactive=10)

    def judged(active_s: float, lag: int = 0):
        return watch.judge(info(sources=[{"name": "a", "lag": lag, "active": int(active_s * 1e9), "external": LEAF}]))

    assert watch.should_log(judged(0.1), now=0.0)
    assert not watch.should_log(judged(0.7), now=5.0)  # only `active` ticked
    assert watch.should_log(judged(0.2, lag=4), now=6.0)  # news
    assert not watch.should_log(judged(0.3, lag=4), now=30.0)
    assert not watch.should_log(judged(0.3, lag=4), now=66.0)  # a minute without news: a summary line, not a table
    assert watch.should_log(judged(0.3, lag=4), now=6.0 + LOG_HEARTBEAT)  # the heartbeat: the table again


LEAF_A, LEAF_B = {"api": "$JS.leaf-a.API", "deliver": ""}, {"api": "$JS.leaf-b.API", "deliver": ""}
TWO_LEAVES = [{"name": "readings", "external": LEAF_A}, {"name": "readings", "external": LEAF_B}]


def two_leaves(order: list[int], active_s: float = 1.0) -> dict:
    """The info of a hub stream sourcing ``readings`` of two leaves, listed in ``order``; the hub last heard from
    both at 05:16:11.3Z, ``active_s`` seconds before the info's server time (``ts``)."""
    reported = [{**TWO_LEAVES[i], "lag": 0, "active": int(active_s * 1e9), "seq": 7 + i} for i in order]
    ts = datetime(2026, 11, 26, 5, 16, 11, 317550, tzinfo=timezone.utc) + timedelta(seconds=active_s)
    return {**info(sources=reported, config_sources=TWO_LEAVES), "ts": ts.isoformat().replace("+00:00", "123Z")}


def test_sources_of_one_name_in_two_domains_keep_the_configured_order() -> None:
    for order in ([0, 1], [1, 0]):
        assert [s.domain for s in statuses_from_stream_info(two_leaves(order))] == ["leaf-a", "leaf-b"]


def test_rows_swapped_are_no_news() -> None:
    watch = ReplicationWatch("agg", max_inactive=10)
    unreachable = {
        f"source:readings:{leaf['api']}": OriginProbe("unreachable", reason="away") for leaf in (LEAF_A, LEAF_B)
    }
    first = watch.judge(two_leaves([0, 1]), now=100.0, probes=unreachable)
    swapped = replace(first, verdicts=list(reversed(first.verdicts)))
    assert swapped.fingerprint() == first.fingerprint()
    assert watch.should_log(first, now=100.0)
    assert not watch.should_log(swapped, now=101.0)
    assert swapped.summary() == (
        "Stream 'agg' in : no change: 0/2 origins caught up; unreachable: source 'readings' in leaf-a since "
        "2026-11-26T05:16:11Z, source 'readings' in leaf-b since 2026-11-26T05:16:11Z"
    )


def test_an_unreachable_origin_has_an_unknown_lag_and_a_stable_since() -> None:
    watch = ReplicationWatch("agg", max_inactive=10, unreachable_origins="proceed")
    key_a, key_b = (f"source:readings:{leaf['api']}" for leaf in (LEAF_A, LEAF_B))
    reached = {key_a: OriginProbe("ok", 12), key_b: OriginProbe("ok", 8)}
    watch.judge(two_leaves([0, 1]), now=50.0, probes=reached, held={key_a: HeldSeq(7), key_b: HeldSeq(8)})
    a_away = {key_a: OriginProbe("unreachable", reason="domain 'leaf-a' did not answer"), key_b: reached[key_b]}
    held = {key_a: HeldSeq(7), key_b: HeldSeq(8)}
    checks = [
        watch.judge(two_leaves([1, 0], active_s=active), now=now, probes=a_away, held=held)
        for active, now in ((3.0, 100.0), (30.0, 127.0), (60.0, 157.0))
    ]
    xcoms = [check.to_xcom() for check in checks]
    # The hub's last contact: the info's server time (05:16:14.3Z) minus active 3 s, in whole seconds.
    assert {x["unreachable"][0]["since"] for x in xcoms} == {"2026-11-26T05:16:11Z"}
    origin = xcoms[0]["origins"][0]
    assert (origin["lag"], origin["reported_lag"], origin["held_seq"], origin["origin_last_known_seq"]) == (
        None,
        0,
        7,
        12,
    )
    assert origin["since"] == "2026-11-26T05:16:11Z"
    row = checks[0].table().splitlines()[2]
    assert "unknown (holds 7 of 12 at 1970-01-01T00:00:50Z)" in row and "UNREACHABLE" in row
    assert checks[0].done and not checks[0].caught_up
    assert xcoms[0]["note"].startswith("Proceeded without 1 origin(s) of 'agg': source 'readings' in leaf-a")
    # The watch's state carries the outage start and the last known sequence to the next process.
    again = ReplicationWatch("agg", max_inactive=10, unreachable_origins="proceed").restore(watch.state())
    later = again.judge(two_leaves([0, 1], active_s=90.0), now=187.0, probes=a_away, held=held)
    assert later.to_xcom()["unreachable"][0]["origin_last_known_seq"] == 12
    assert later.to_xcom()["unreachable"][0]["since"] == "2026-11-26T05:16:11Z"
