#!/usr/bin/env bash
# Runs README.md's quick start as it is written there: a dcp-scheduler on
# 127.0.0.1:50051 (metrics on 127.0.0.1:9464), four ranks of
# examples/train.py in dcp mode, the plain loop, the metrics and dcp-ctl
# lines. //docs:docs_test checks that every command of the README's shell
# blocks appears in this file (or in tools/run_demo.sh, tools/test.sh,
# .ci/run), so the commands below are the README's, line for line.
#
# It runs in a directory of its own where bazel-bin, data and examples are
# this test's runfiles, so the README's relative paths work. The README's
# `bazel build` line is the only one not run as it is: Bazel built its
# targets as this test's data, and `bazel` below checks that each one it
# names is there. The quick start's ports are fixed, so the test is tagged
# block-network (a network namespace of its own under Bazel's sandbox) and
# fails, saying so, when they are taken.
set -euo pipefail

runfiles="${TEST_SRCDIR}/dcp"
work="${TEST_TMPDIR}/quickstart"
mkdir -p "${work}"
cd "${work}"
ln -sfn "${runfiles}" bazel-bin
ln -sfn "${runfiles}/data" data
ln -sfn "${runfiles}/examples" examples

fail() {
  echo "quickstart_test: $*" >&2
  for log in scheduler.log train.log plain.log; do
    [[ -f "${log}" ]] && { echo "--- ${log}" >&2; tail -n 20 "${log}" >&2; }
  done
  exit 1
}

# `bazel build T...`: each target must be in this test's runfiles.
bazel() {
  [[ "${1:-}" == build ]] || fail "only 'bazel build' is stood in for, not: bazel $*"
  shift
  local target path
  for target in "$@"; do
    path="${target#//}"
    path="${path/://}"
    [[ -e "bazel-bin/${path}" ]] || fail "${target} is not in this test's data"
  done
}

for port in 50051 9464; do
  if (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then
    fail "127.0.0.1:${port} is taken; the quick start needs it"
  fi
done

scheduler_pid=""
cleanup() {
  if [[ -n "${scheduler_pid}" ]]; then kill "${scheduler_pid}" 2>/dev/null || true; fi
}
trap cleanup EXIT

# The README's quick start, from here on as written there.
bazel build //client_lib/python:dcp //scheduler/server:dcp-scheduler //scheduler/server:dcp-ctl
export PYTHONPATH=$PWD/bazel-bin/client_lib/python
{
bazel-bin/scheduler/server/dcp-scheduler --lengths=data/lengths/wikipedia.txt \
    --model_config=data/models/llama3-8b-4-heads.json --world_size=4 \
    --window=128 --tokens_per_step=512 --max_steps=20 \
    --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464 &
} 2>scheduler.log
scheduler_pid=$!
{ /usr/bin/python3 examples/train.py --mode=dcp --local_world=4 --scheduler=127.0.0.1:50051; } 2>train.log ||
  fail "the dcp loop failed"
grep -q "dcp mode, 4 ranks trained 20 steps" train.log || fail "the dcp loop did not train 20 steps"

{ /usr/bin/python3 examples/train.py --mode=plain --local_world=4 --steps=20; } 2>plain.log ||
  fail "the plain loop failed"
grep -q "plain mode, 4 ranks trained 20 steps" plain.log || fail "the plain loop did not train 20 steps"

{ curl -s http://127.0.0.1:9464/metrics | grep -E '^dcp_scheduler_(steps_completed_total|trained_tokens_total|tokens_per_second|task_group_size_count|refits_total|cost_model_step_error_ratio) '; } >metrics.txt ||
  fail "no metrics on 127.0.0.1:9464"
cat metrics.txt
grep -qx "dcp_scheduler_steps_completed_total 20" metrics.txt || fail "the metrics do not show 20 completed steps"
[[ "$(grep -c '^dcp_scheduler_' metrics.txt)" -eq 6 ]] || fail "the metrics line of the README does not print its 6 families"

{ bazel-bin/scheduler/server/dcp-ctl --scheduler=127.0.0.1:50051 status; } >status.txt || fail "dcp-ctl status failed"
grep -q "planned 20   completed 20" status.txt || fail "dcp-ctl status does not show 20 completed steps"
{ bazel-bin/scheduler/server/dcp-ctl --scheduler=127.0.0.1:50051 stop; } >/dev/null || fail "dcp-ctl stop failed"
wait "${scheduler_pid}" || fail "the scheduler exited with an error"
scheduler_pid=""
grep -q "exiting; 20 steps planned, 20 completed" scheduler.log || fail "the scheduler did not complete 20 steps"
echo "quickstart_test: the README's quick start ran"
