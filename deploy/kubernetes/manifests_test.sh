#!/usr/bin/env bash
# Runs deploy/kubernetes/manifests_test.py with Debian's python3 (the one
# python3-yaml, python3-jsonschema, python3-grpcio and the dcp extension are
# for), from the runfiles.
set -euo pipefail
cd "${TEST_SRCDIR}/dcp"
exec /usr/bin/python3 deploy/kubernetes/manifests_test.py
