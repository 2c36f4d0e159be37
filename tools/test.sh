#!/usr/bin/env bash
# Installs what is missing (tools/setup.sh), checks the layering rules
# (tools/check_layering.sh), then builds and runs every test.
#
#   tools/test.sh                      # bazel test //...
#   tools/test.sh //scheduler/...       # other targets (or extra bazel flags)
#
# Ends with a line "N passed, N failed, N skipped" counted from Bazel's per-test lines,
# and exits with Bazel's exit code. DCP_JOBS caps parallel actions (default:
# one per core); CI on small machines sets it (.ci/run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/setup.sh
tools/check_layering.sh

jobs="${DCP_JOBS:-$(nproc)}"
flags=(
  --jobs="${jobs}"
  --local_cpu_resources="${jobs}"
  --keep_going              # run every test that builds; count the others
  --test_output=errors
  --curses=no --color=no    # plain lines, for logs and for the count below
)
args=("$@")
((${#args[@]})) || args=(//...)

log="$(mktemp)"
trap 'rm -f "${log}"' EXIT

status=0
bazel test "${flags[@]}" "${args[@]}" 2>&1 | tee "${log}" ||
  status="${PIPESTATUS[0]}"

# Bazel prints one line per test target: "//pkg:name  [(cached)] STATUS in Xs".
count() { grep -cE "^//[^ ]+ +(\(cached\) )?($1)([ ,]|$)" "${log}" || true; }
passed="$(count 'PASSED|FLAKY')"
failed="$(count 'FAILED|TIMEOUT|NO STATUS|INCOMPLETE|REMOTE FAILURE|FAILED TO BUILD')"
skipped="$(count 'SKIPPED')"  # e.g. GPU-only tests on a machine without CUDA
echo
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit "${status}"
