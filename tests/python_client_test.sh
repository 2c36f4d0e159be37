#!/usr/bin/env bash
# Runs tests/python_client_test.py with Debian's python3 (the interpreter
# of python3-torch, python3-grpcio and python3-protobuf), from the runfiles.
set -euo pipefail
cd "${TEST_SRCDIR}/dcp"
exec /usr/bin/python3 tests/python_client_test.py -v
