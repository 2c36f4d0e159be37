#!/usr/bin/env bash
# Runs a Python test of client_lib/python (its runfiles path and arguments
# are this script's) with Debian's python3, the interpreter whose
# python3-grpcio and python3-protobuf the package runs on here, from the
# runfiles root.
set -euo pipefail
cd "${TEST_SRCDIR}/dcp"
exec /usr/bin/python3 "$@"
