#!/usr/bin/env bash
# The alert rules of alerts.yml checked by Debian's promtool: their syntax
# and templates (`promtool check rules`), then the unit tests of
# alerts_test.yml (`promtool test rules`), which give every alert input
# series that must make it fire and series that must not.
set -euo pipefail
cd "${TEST_SRCDIR}/dcp/deploy/prometheus"
promtool="$(command -v promtool || true)"
if [[ -z "${promtool}" ]]; then
  echo "alerts_test: promtool is not on PATH; tools/setup.sh installs it" \
    "(Debian package prometheus)" >&2
  exit 1
fi
"${promtool}" check rules alerts.yml
"${promtool}" test rules alerts_test.yml
