#!/usr/bin/env bash
# Runs docs/docs_test.py with Debian's python3, from the runfiles.
set -euo pipefail
cd "${TEST_SRCDIR}/dcp"
exec /usr/bin/python3 docs/docs_test.py
