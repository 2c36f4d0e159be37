#!/usr/bin/env bash
# Installs what is missing (tools/setup.sh), then runs dcp-bench on every
# bundled trace (data/lengths/): the planner against the baselines, judged on
# the reference cluster model of docs/COST_MODEL.md. Extra arguments go to
# dcp-bench.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/setup.sh
exec bazel run -c opt //scheduler:dcp-bench -- --scenarios=all "$@"
