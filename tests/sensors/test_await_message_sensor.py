"""``JetStreamAwaitMessageSensor`` through ``dag.test()``: the match in the leaf's domain returned to XCom and acked
once Airflow has it, in the worker (poke) and in the triggerer (deferrable); bad arguments refused at parse time."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_provider_jetstream.core.consume.matching import task_consumer_name
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.sensors.await_message import JetStreamAwaitMessageSensor
from tests.dags import sensors_await_message as dags
from tests.support.logs import captured_logs
from tests.support.natsutil import acked_through, connect, consumer_state, leaf_stream, unique
from tests.support.waiting import Later, wait_until

BODIES = [{"status": "started", "site": "lyon"}, {"status": "done", "site": "oslo"}]
MATCH = {"status": "done", "site": "lyon", "batch": 3}


def publish_once_waiting(url: str, stream: str, logs, mode: str) -> Later:
    """Once the sensor is looking (in the triggerer, when deferrable), publish two messages that do not match,
    the match and one more."""

    async def work() -> list[int]:
        looking = "waiting in the triggerer" if mode == "deferrable" else "looking for the first message"
        await logs.wait_for(f"stream {stream!r}: {looking}" if mode == "deferrable" else looking, timeout=60)
        nc = await connect(url)
        js = nc.jetstream()
        seqs = [(await js.publish(f"{stream}.ev", json.dumps(b).encode())).seq for b in [*BODIES, MATCH, {}]]
        await nc.close()
        return seqs

    worker = Later(work)
    worker.start()
    return worker


# The thread method: dag.test() runs the task under Airflow's own SIGALRM timeout, which clears the signal
# method's alarm; a trigger that never fired would otherwise hang the run.
@pytest.mark.timeout(240, method="thread")
@pytest.mark.parametrize("mode", ["poke", "deferrable"])
def test_the_match_goes_to_xcom_and_is_acked_once_airflow_has_it(airflow_db, hub_leaf, hub_conn, mode) -> None:
    stream, leaf = unique("aws"), hub_leaf.url("leaf")
    asyncio.run(leaf_stream(leaf, stream))
    dag = getattr(dags, f"sensors_await_message_{mode}")
    with captured_logs() as logs:
        publisher = publish_once_waiting(leaf, stream, logs, mode)
        run = dag.test(run_conf={"conn_id": hub_conn, "domain": "leaf", "stream": stream})
        seqs = publisher.finish()
    ti = run.get_task_instance("wait_for_message")
    assert (run.state, ti.state) == ("success", "success")
    xcom = ti.xcom_pull(task_ids="wait_for_message")
    assert xcom["value"] == {"site": "lyon", "batch": 3}
    assert (xcom["seq"], xcom["domain"], xcom["subject"]) == (seqs[2], "leaf", f"{stream}.ev")
    consumer = task_consumer_name(dag.dag_id, "wait_for_message")
    assert xcom["consumer"] == consumer
    # all_seen: the two examined and the match (by the task, after Airflow had it) are acked; the fourth waits
    # (the server counts a message just stored as pending a moment later: nats-server 2.10 is seen lagging).
    wait_until(
        lambda: asyncio.run(consumer_state(leaf, stream, consumer)),
        lambda state: (acked_through(state), state["num_ack_pending"], state["num_pending"]) == (3, 0, 1),
        timeout=10,
        what="the consumer acked through the match with the fourth message pending",
    )


def test_bad_arguments_fail_the_dag_import() -> None:
    with pytest.raises(JetStreamConfigError) as err:
        JetStreamAwaitMessageSensor(
            task_id="wait",
            stream="a.b",
            apply_function="not a path",
            apply_function_kwargs={"when": {1, 2}},
            ack_mode="none",
            consumer="mine",
            filter_subjects="",
        )
    text = str(err.value)
    for expected in (
        "stream='a.b' is not allowed",
        "apply_function='not a path' is not allowed",
        "apply_function_kwargs['when']",
        "filter_subjects='' is not allowed",
    ):
        assert expected in text, text


def test_one_run_at_a_time_pulls_a_durable_consumer_unless_told_otherwise() -> None:
    """Each message of a durable consumer reaches one puller: an overlapping run's sensor waits (queued) by
    default; ack_mode='none' reads with a consumer per look, so runs may overlap; an explicit limit is kept."""

    def sensor(**kwargs) -> JetStreamAwaitMessageSensor:
        return JetStreamAwaitMessageSensor(task_id="wait", stream="s", apply_function="pkg.f", **kwargs)

    assert sensor().max_active_tis_per_dag == 1
    assert sensor(ack_mode="on_match", consumer="mine").max_active_tis_per_dag == 1
    assert sensor(ack_mode="{{ params.ack_mode }}").max_active_tis_per_dag == 1  # unknown until rendered: the safe side
    assert sensor(ack_mode="none").max_active_tis_per_dag is None
    assert sensor(max_active_tis_per_dag=3).max_active_tis_per_dag == 3
