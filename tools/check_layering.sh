#!/usr/bin/env bash
# Checks the dependency rules of README.md's Layout section that BUILD
# visibility alone cannot state (visibility cannot tell a test from a
# library): prints each broken rule with a path that breaks it, and exits 1
# when there is one. tools/test.sh runs it before the tests.
#
#   tools/check_layering.sh           # check the rules
#   tools/check_layering.sh --graph   # print what each package uses
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

query() { bazel query --noshow_progress --noshow_loading_progress "$@" 2>/dev/null; }

# "from" "to" "why": no dependency path may lead from the first set of
# targets to the second.
# Libraries and binaries of a set of packages, tests and test helpers left out.
delivered() {
  echo "kind('cc_library|cc_binary', $1) except attr(testonly, 1, $1)"
}

# Their libraries only: what other packages can link.
libraries() {
  echo "kind('cc_library', $1) except attr(testonly, 1, $1)"
}

# The flag blocks several mains share: the only libraries that may define
# flags (checked below, by their sources).
flag_blocks="attr(name, '_flags\$', kind('cc_library', //...))"

rules=(
  "$(delivered '//scheduler/server/... + //scheduler/control/...')"
  "//scheduler/eval/..."
  "the daemon and the control plane link no evaluation code (simulator, baselines)"

  "$(delivered '//worker_agent/... + //client_lib/... + //comm/... + //train/...')"
  "//scheduler/..."
  "the agent, the client, the trainer and their process groups speak the wire schema, never the scheduler's code"

  "$(libraries '//scheduler/planner/... + //scheduler/lengths/...')"
  "//scheduler/control/... + //scheduler/server/... + //scheduler/eval/... + @grpc//..."
  "the planner and the length readers are plain C++: no control plane, no evaluation, no gRPC (planner_benchmark, a binary, replays its plans on the simulator)"

  "$(delivered '//...')"
  "//tests/..."
  "nothing but tests depends on tests/"

  "$(delivered '//... except //scheduler/delivery/...')"
  "//scheduler/delivery/..."
  "nothing delivered depends on the plan-delivery benchmark (scheduler/delivery): it may use the control plane and the server, not the other way round"

  "$(libraries '//...') except ${flag_blocks}"
  "${flag_blocks}"
  "command-line flags are defined in mains: a flag block (a *_flags library, the flags several mains share) is linked by binaries and tests only, never by a library"
)

# Every package with C++ code, and the other packages its libraries and
# binaries use (tests and test helpers left out; proto and common omitted,
# since every package may use them).
print_graph() {
  local pkg uses
  for pkg in $(query 'kind("cc_library|cc_binary", //...)' --output=package | sort); do
    uses="$(query "let t = $(delivered "//${pkg}:all") in deps(\$t, 1) except \$t" |
      sed -n 's#^//\([^:]*\):.*#\1#p' | sort -u |
      { grep -vxE "${pkg}|proto|common|data" || true; } | paste -sd, - | sed 's/,/, /g')"
    printf '%-18s -> %s\n' "${pkg}" "${uses:-(nothing else)}"
  done
}

if [[ "${1:-}" == "--graph" ]]; then
  print_graph
  exit 0
fi

broken=0
# Outside mains, only a flag block's source defines flags.
for file in $(git grep -l 'ABSL_FLAG(' -- '*.cc' | grep -v '_flags\.cc$' || true); do
  if ! grep -q '^int main(' "${file}"; then
    echo "layering broken: ${file} defines flags, but it is neither a main nor a flag block (*_flags.cc)"
    broken=1
  fi
done
for ((i = 0; i < ${#rules[@]}; i += 3)); do
  from="${rules[i]}" to="${rules[i + 1]}" why="${rules[i + 2]}"
  path="$(query "somepath(${from}, ${to})")" || {
    echo "check_layering: bazel query failed for: somepath(${from}, ${to})" >&2
    exit 2
  }
  if [[ -n "${path}" ]]; then
    echo "layering broken: ${why}; a path:"
    echo "${path}" | sed 's/^/  /'
    broken=1
  fi
done
((broken == 0)) && echo "layering: all $((${#rules[@]} / 3 + 1)) rules hold"
exit "${broken}"
