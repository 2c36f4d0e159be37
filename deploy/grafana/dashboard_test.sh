#!/usr/bin/env bash
# Runs deploy/grafana/dashboard_test.py with Debian's python3 (the one
# python3-yaml is for), from the runfiles.
set -euo pipefail
cd "${TEST_SRCDIR}/dcp"
exec /usr/bin/python3 deploy/grafana/dashboard_test.py
