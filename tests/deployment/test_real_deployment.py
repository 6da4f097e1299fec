"""The example pipeline as deployed: real processes, no Docker, driven through Airflow's REST API.

The stack of ``make stack`` (:class:`~local_stack.stack.LocalStack`): PostgreSQL,
Airflow's api-server, scheduler (LocalExecutor), dag-processor and triggerer as separate processes,
a Spark standalone master with two workers, and a NATS hub with leaves ``leaf-a`` and ``leaf-b``.
``jetstream_edge_to_hub`` runs scheduled, then through the REST API without and with a logical date,
while ``leaf-b`` is cut off from the hub for longer than the DAG's retry window, and once more after
it is back. The cut and the relink are the ``make stack-cut`` / ``make stack-relink`` lines ``make stack``
prints, run as printed against the stack's control socket. At each step (both leaves caught up, leaf-b cut,
leaf-b back) Chromium shows the JetStream page inside Airflow's UI
(test-output/stack-page-{before,during,after}.png) and the test asserts what it shows: leaf-b unreachable with
its lag unknown (never a false 0), then caught up, in the page's history. The run that went on without leaf-b
says so in its sensor's task note. Every process is stopped at the end, on failure too, and none may be left.

Select it alone with ``pytest -m deployment``. The DAGs' retry settings are shortened through
their ``JETSTREAM_*`` variables (1 retry, 5 s apart), so the cut outlasts every retry of a per-leaf
step many times over within a short test.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import psutil
import pytest

from local_stack.control import CONTROL_SOCKET, StackControl
from local_stack.processes import wait_until
from local_stack.stack import NATS_CONN_ID, LocalStack, ready_banner
from tests.support.airflow_ui import OUTPUT, chromium, get, login_token, open_jetstream_page

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dags"))
import edge_pipeline_config as cfg  # noqa: E402

DAG_ID = "jetstream_edge_to_hub"
RETRIES, RETRY_DELAY = 1, 5.0
#: Everything a per-leaf step's retries could wait: the cut must last longer.
RETRY_WINDOW = RETRIES * RETRY_DELAY
RUN_TIMEOUT = 420.0

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(1200)]
_T0 = time.monotonic()


def phase(what: str) -> None:
    """A progress line with the time since the module started (shown with ``-s``)."""
    print(f"[deployment {time.monotonic() - _T0:6.1f}s] {what}", flush=True)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The whole stack; stopped at the end however the tests went, and checked to leave nothing running."""
    stack = LocalStack(
        tmp_path_factory.mktemp("stack"),
        dags_folder=REPO / "dags",
        dag_env={"JETSTREAM_RETRIES": str(RETRIES), "JETSTREAM_RETRY_DELAY": str(RETRY_DELAY)},
    )
    control = StackControl(stack.nats, stack.workdir / CONTROL_SOCKET)  # as `make stack` serves it
    seen: dict[int, float] = {}
    try:
        stack.start(timeout=420, progress=phase)
        stack.airflow.wait_dags([DAG_ID, "jetstream_kv_gate", "jetstream_maintenance"])
        control.start()
        phase("stack ready, DAGs parsed")
        seen = started_at(stack.pids())
        yield stack
    finally:
        seen |= started_at(stack.pids())
        phase("stopping the stack")
        control.stop()
        stack.stop()
        phase("stack stopped")
        left = [pid for pid, created in seen.items() if running(pid, created)]
        assert not left, f"processes of the stack still running: {left}"


def started_at(pids: set[int]) -> dict[int, float]:
    """Each process's start time, to tell it from a later process that reuses its pid."""
    times = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            times[pid] = psutil.Process(pid).create_time()
    return times


def running(pid: int, created: float) -> bool:
    try:
        process = psutil.Process(pid)
        return process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- helpers ---------------------------------------------------------------------------------------


async def _publish(stack: LocalStack, leaf: str, count: int) -> tuple[int, int]:
    """An edge process publishes ``count`` readings on its own leaf server; returns their sequences."""
    from airflow_provider_jetstream.core.api import JetStreamApi
    from airflow_provider_jetstream.core.manage.reconcile import reconcile_stream
    from airflow_provider_jetstream.core.manage.specs import StreamSpec

    nc = await nats.connect(stack.nats.url(leaf))
    try:
        await reconcile_stream(JetStreamApi(nc), StreamSpec.from_dict(cfg.leaf_stream_spec(leaf)))
        js = nc.jetstream()
        acks = [
            await js.publish(f"sensors.{leaf}.temp", json.dumps({"sensor": f"temp-{i % 2}", "value": i}).encode())
            for i in range(count)
        ]
        return acks[0].seq, acks[-1].seq
    finally:
        await nc.drain()


def stack_command(stack: LocalStack, target: str, leaf: str) -> subprocess.CompletedProcess[str]:
    """The ``make <target> LEAF=...`` line ``make stack`` prints once ready, run as printed with ``leaf``
    (``leaf=""``: without ``LEAF``)."""
    banner = ready_banner(stack, readings=0, seconds=0)
    [line] = [line.strip() for line in banner.splitlines() if line.strip().startswith(f"make {target} ")]
    args = [
        *shlex.split(re.sub(r"LEAF=\S*", f"LEAF={leaf}" if leaf else "", line)),
        f"VENV={Path(sys.executable).parents[1]}",
    ]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=180)


def publish(stack: LocalStack, leaf: str, count: int) -> tuple[int, int]:
    return asyncio.run(_publish(stack, leaf, count))


def hub_kv(stack: LocalStack, key: str, revision: int | None = None) -> dict[str, Any]:
    """A JSON value of the hub's pipeline bucket (the latest, or that revision)."""

    async def get() -> dict[str, Any]:
        nc = await nats.connect(stack.nats.url())
        try:
            kv = await nc.jetstream(domain=stack.hub_domain).key_value(cfg.PIPELINE_BUCKET)
            return json.loads((await kv.get(key, revision=revision)).value)
        finally:
            await nc.close()

    return asyncio.run(get())


def run_marker(stack: LocalStack, run_id: str) -> dict[str, Any]:
    """What this run's mark_run wrote (by the revision it returned: a later run may have written since)."""
    return hub_kv(stack, cfg.LAST_RUN_KEY, revision=int(xcom(stack, run_id, "mark_run")))


def parquet(stack: LocalStack) -> list[tuple[str, int]]:
    """``(subject, seq)`` of every row written so far."""
    import pyarrow.dataset as ds

    path = stack.output_dir / "readings"
    if not path.exists():
        return []
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=["subject", "seq"])
    return list(zip(table.column("subject").to_pylist(), table.column("seq").to_pylist(), strict=True))


def rows_per_leaf(rows: list[tuple[str, int]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for subject, _seq in rows:
        leaf = subject.split(".")[1]  # edge.<leaf>.<sensor>: the hub keeps the origin in the subject
        counts[leaf] = counts.get(leaf, 0) + 1
    return counts


def trigger(stack: LocalStack, logical_date: str | None, conf: dict[str, Any] | None = None) -> str:
    run = stack.airflow.api.request(
        "POST", f"/dags/{DAG_ID}/dagRuns", {"logical_date": logical_date, "conf": conf or {}}, expect=(200,)
    )
    return run["dag_run_id"]


def task_instance(stack: LocalStack, run_id: str, task_id: str) -> dict[str, Any]:
    return stack.airflow.api.request("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}")


def task_states(stack: LocalStack, run_id: str) -> dict[str, str | None]:
    """Each task's state; a mapped task's instances as ``task_id[leaf]`` (their rendered map index)."""
    tis = stack.airflow.api.request("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=100")
    return {
        f"{ti['task_id']}[{ti['rendered_map_index']}]" if ti["map_index"] >= 0 else ti["task_id"]: ti["state"]
        for ti in tis["task_instances"]
    }


def xcom(stack: LocalStack, run_id: str, task_id: str) -> Any:
    entry = stack.airflow.api.request(
        "GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value?deserialize=true"
    )
    value = entry["value"]
    return json.loads(value) if isinstance(value, str) else value


def task_log(stack: LocalStack, run_id: str, task_id: str) -> str:
    """The task's log files (the worker's, and the triggerer's while it was deferred); every instance of
    a mapped task (``task_id[leaf]`` as :func:`task_states` names one: the task's)."""
    task_id = task_id.split("[", 1)[0]
    folder = stack.airflow.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={task_id}"
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return "\n".join(f"== {p.relative_to(folder)}\n{p.read_text(errors='replace')}" for p in files)


def wait_run(stack: LocalStack, run_id: str, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    """Wait until the run has finished; fail with its task states and the failed tasks' logs if it failed."""

    def finished() -> dict[str, Any] | None:
        stack.airflow.check_alive()
        run = stack.airflow.api.request("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")
        return run if run["state"] in ("success", "failed") else None

    run = wait_until(f"run {run_id} finished", finished, timeout, interval=1.0)
    if run["state"] != "success":
        states = task_states(stack, run_id)
        bad = [task for task, state in states.items() if state in ("failed", "up_for_retry", "upstream_failed")]
        logs = "\n".join(task_log(stack, run_id, task)[-3000:] for task in bad)
        pytest.fail(f"run {run_id} {run['state']}: {states}\n{logs}")
    return run


def exactly_once(rows: list[tuple[str, int]]) -> None:
    seqs = [seq for _subject, seq in rows]
    assert len(seqs) == len(set(seqs)), "a sequence was written twice"
    assert sorted(seqs) == list(range(1, len(seqs) + 1)), "a sequence is missing"


# -- the test ---------------------------------------------------------------------------------------


def test_edge_to_hub_scheduled_rest_and_leaf_outage(stack: LocalStack) -> None:
    api = stack.airflow.api
    publish(stack, "leaf-a", 30)
    publish(stack, "leaf-b", 20)

    # 1. Scheduled: unpausing creates the run of the latest hourly interval (it has a logical date).
    api.request("PATCH", f"/dags/{DAG_ID}", {"is_paused": False})

    def scheduled_run() -> str | None:
        runs = api.request("GET", f"/dags/{DAG_ID}/dagRuns?run_type=scheduled")["dag_runs"]
        return runs[0]["dag_run_id"] if runs else None

    scheduled = wait_until("the scheduler creates a scheduled run", scheduled_run, 120, interval=1.0)
    wait_run(stack, scheduled)
    phase(f"scheduled run {scheduled} succeeded")
    rows = parquet(stack)
    assert rows_per_leaf(rows) == {"leaf-a": 30, "leaf-b": 20}
    exactly_once(rows)
    assert hub_kv(stack, cfg.CHECKPOINT_KEY)["seq"] == 50
    found, text = jetstream_page(stack, "before")
    assert all(domain["reachable"] for domain in found["domains"]), found["domains"]
    assert {leaf: aggregate_origin(found, leaf)["state"] for leaf in ("leaf-a", "leaf-b")} == dict.fromkeys(
        ("leaf-a", "leaf-b"), "caught up"
    )
    assert "Domain leaf-b" in text and cfg.AGGREGATE_STREAM in text

    # 2. leaf-b is cut off; each edge keeps publishing locally (leaf-b's readings stay on leaf-b).
    # With `make stack-cut`, as `make stack` says to (its control socket); a leaf the stack lacks is refused.
    wrong = stack_command(stack, "stack-cut", "leaf-z")
    assert wrong.returncode != 0 and "LEAF='leaf-z' is not allowed: one of leaf-a, leaf-b" in wrong.stderr
    missing = stack_command(stack, "stack-relink", "")
    assert missing.returncode != 0 and "LEAF=<name> is required" in missing.stderr
    cut = stack_command(stack, "stack-cut", "leaf-b")
    assert cut.returncode == 0 and "leaf-b cut off the hub" in cut.stdout, cut.stderr
    cut_at = time.monotonic()
    publish(stack, "leaf-a", 5)
    publish(stack, "leaf-b", 7)

    # 3. REST, no logical date (as `airflow dags trigger` and the UI's default): the run succeeds without
    #    leaf-b, with leaf-a's new readings, and records that leaf-b was away and since when.
    manual = trigger(stack, None, {"max_inactive": "5s"})
    run = wait_run(stack, manual)
    phase(f"run without logical date {manual} succeeded with leaf-b cut off")
    assert run["logical_date"] is None and run["run_type"] == "manual"
    states = task_states(stack, manual)
    # The per-leaf steps are mapped over the run's leaves: leaf-b's instances skipped, leaf-a's done.
    assert states["ensure_leaf_readings[leaf-b]"] == states["ensure_leaf_commands_mirror[leaf-b]"] == "skipped"
    assert states["ensure_leaf_readings[leaf-a]"] == states["ensure_leaf_commands_mirror[leaf-a]"] == "success"
    assert states["ensure_hub_aggregate"] == "success"
    assert states["wait_replicated"] == states["readings_to_parquet"] == states["mark_run"] == "success"
    reach = xcom(stack, manual, "find_reachable_leaves")
    assert reach["leaves"] == ["leaf-a", "leaf-b"] and reach["reachable"] == ["leaf-a"]
    [away] = reach["unreachable"]
    assert away["leaf"] == "leaf-b" and away["api_prefix"] == "$JS.leaf-b.API" and away["reason"]
    assert away["since"] and dt.datetime.fromisoformat(away["since"]) <= dt.datetime.fromisoformat(reach["checked_at"])
    unreachable = xcom(stack, manual, "wait_replicated")["unreachable"]
    assert [origin["domain"] for origin in unreachable] == ["leaf-b"]
    # What the grid shows on the sensor's task: it went on without leaf-b (set as the run ended).
    note = stack.airflow.api.request("GET", f"/dags/{DAG_ID}/dagRuns/{manual}/taskInstances/wait_replicated")["note"]
    assert note and note.startswith("Proceeded without 1 origin(s)") and "leaf-b" in note, note
    rows = parquet(stack)
    assert rows_per_leaf(rows) == {"leaf-a": 35, "leaf-b": 20}  # the reachable data, not the late data
    exactly_once(rows)
    assert hub_kv(stack, cfg.CHECKPOINT_KEY)["seq"] == 55
    marker = run_marker(stack, manual)
    assert marker["run_id"] == manual and marker["logical_date"] == "" and marker["proceeded_without"] == "leaf-b"
    found, text = jetstream_page(stack, "during")
    away = aggregate_origin(found, "leaf-b")
    assert away["state"] == "unreachable" and away["behind"] is None, away  # never a false 0
    assert aggregate_origin(found, "leaf-a")["state"] == "caught up"
    assert "lag unknown" in text and "UNREACHABLE" in text
    assert time.monotonic() - cut_at > RETRY_WINDOW  # longer than every retry of a per-leaf step

    # 4. REST with a logical date, waiting for every edge: the sensor defers to the triggerer while
    #    leaf-b is away; leaf-b comes back; its late readings arrive in this run, exactly once.
    logical_date = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    waiting = trigger(stack, logical_date, {"unreachable_origins": "wait", "max_inactive": "5s"})

    def deferred_in_triggerer() -> dict[str, Any] | None:
        stack.airflow.check_alive()
        if task_instance(stack, waiting, "wait_replicated")["state"] != "deferred":
            return None
        with stack.postgres.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT t.classpath, t.triggerer_id, j.job_type, j.hostname FROM task_instance ti "
                "JOIN trigger t ON t.id = ti.trigger_id LEFT JOIN job j ON j.id = t.triggerer_id "
                "WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.task_id = 'wait_replicated'",
                (DAG_ID, waiting),
            )
            row = cur.fetchone()
        if not row or row[1] is None:
            return None
        return dict(zip(("classpath", "triggerer_id", "job_type", "hostname"), row, strict=True))

    trigger_row = wait_until("wait_replicated deferred and its trigger taken by the triggerer", deferred_in_triggerer,
                             RUN_TIMEOUT, interval=0.5)  # fmt: skip
    phase(f"run {waiting}: wait_replicated deferred, trigger {trigger_row['triggerer_id']} in the triggerer")
    assert trigger_row["classpath"].endswith("JetStreamReplicationLagTrigger")
    assert trigger_row["job_type"] == "TriggererJob"
    assert time.monotonic() - cut_at > RETRY_WINDOW
    relink = stack_command(stack, "stack-relink", "leaf-b")
    assert relink.returncode == 0 and "leaf-b linked to the hub again" in relink.stdout, relink.stderr
    run = wait_run(stack, waiting)
    phase(f"run with logical date {waiting} succeeded after leaf-b came back")
    assert run["logical_date"] and dt.datetime.fromisoformat(run["logical_date"].replace("Z", "+00:00")) == (
        dt.datetime.fromisoformat(logical_date)
    )
    log = task_log(stack, waiting, "wait_replicated")
    assert ".trigger." in log and "Replication of" in log.split(".trigger.", 1)[1]  # checked in the triggerer
    rows = parquet(stack)
    assert rows_per_leaf(rows) == {"leaf-a": 35, "leaf-b": 27}  # leaf-b's late readings, once
    exactly_once(rows)
    assert hub_kv(stack, cfg.CHECKPOINT_KEY)["seq"] == 62
    marker = run_marker(stack, waiting)
    assert marker["run_id"] == waiting and marker["proceeded_without"] == "" and marker["logical_date"]
    found, text = jetstream_page(stack, "after")
    assert (
        aggregate_origin(found, "leaf-b")["state"] == "caught up" and aggregate_origin(found, "leaf-b")["behind"] == 0
    )
    news = [n["what"] for n in found["history"]["news"]]
    assert "domain leaf-b UNREACHABLE" in news and "domain leaf-b reachable" in news, news
    assert "domain leaf-b reachable" in text
    assert stack.airflow.admin_password not in json.dumps(found) + text


def jetstream_page(stack: LocalStack, name: str) -> tuple[dict[str, Any], str]:
    """The JetStream page for the stack's connection: its JSON, and its text in Chromium inside Airflow's UI
    (a screenshot, test-output/stack-page-{name}.png)."""
    url = stack.airflow.url
    token = login_token(url, "admin", stack.airflow.admin_password)
    status, body = get(f"{url}/jetstream/api/connections/{NATS_CONN_ID}", token)
    assert status == 200, body[-2000:]
    with chromium() as browser:
        context, page, frame = open_jetstream_page(browser, url, token, NATS_CONN_ID)
        text = frame.locator("body").inner_text()
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / f"stack-page-{name}.png"), full_page=True)
        context.close()
    phase(f"JetStream page {name}: screenshot saved")
    return json.loads(body), text


def aggregate_origin(found: dict[str, Any], leaf: str) -> dict[str, Any]:
    """The hub aggregate's replication state from ``leaf``, as the page's JSON gives it."""
    (hub,) = [d for d in found["domains"] if d["domain"] == cfg.HUB_DOMAIN]
    (aggregate,) = [s for s in hub["streams"] if s["name"] == cfg.AGGREGATE_STREAM]
    (origin,) = [o for o in aggregate["replication"]["origins"] if o["domain"] == leaf]
    return origin


def test_grid_view_shows_the_successful_runs(stack: LocalStack) -> None:
    """The DAG's grid in Airflow's UI, in Debian's Chromium, after the runs above: saved to test-output/."""
    from playwright.sync_api import expect

    runs = stack.airflow.api.request("GET", f"/dags/{DAG_ID}/dagRuns?state=success&order_by=-run_after&limit=1")
    runs = runs["dag_runs"]
    assert runs, "no successful run to show"
    run_id = runs[0]["dag_run_id"]
    OUTPUT.mkdir(exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(f"{stack.airflow.url}/dags/{DAG_ID}/runs/{run_id}")
        # A new browser is not logged in: the simple auth manager's form, then back to the run.
        page.locator("input[name=username]").wait_for(timeout=60000)
        page.locator("input[name=username]").fill("admin")
        page.locator("input[name=password]").fill(stack.airflow.admin_password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"**/dags/{DAG_ID}/runs/**", timeout=60000)
        # The grid has a column for the run with a cell per task (a mapped task's instances share one), and
        # the run's header says it succeeded.
        page.locator(f'[data-run-id="{run_id}"]').first.wait_for(timeout=60000)
        tasks = {name.partition("[")[0] for name in task_states(stack, run_id)}
        expect(page.locator(f'[data-testid^="grid-{run_id}-"]')).to_have_count(len(tasks), timeout=60000)
        badge = page.get_by_test_id("header-card").get_by_test_id("state-badge").first
        expect(badge).to_have_text("Success", timeout=60000)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(OUTPUT / "edge-to-hub-grid.png"))
        phase("grid screenshot saved")
