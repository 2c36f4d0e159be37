#!/usr/bin/env bash
# Runs a Python test of client_lib/python or examples/ (its runfiles path
# and arguments are this script's) with Debian's python3, the interpreter
# whose python3-grpcio, python3-protobuf and python3-torch the package runs
# on here, from the runfiles root.
set -euo pipefail
cd "${TEST_SRCDIR}/dcp"
exec /usr/bin/python3 "$@"
