#!/usr/bin/env bash
# The checks that need a GPU host, as one script for the device machine: one
# H200, many cores, nvcc, CMake, ninja and a pip PyTorch with CUDA, but no
# Bazel, no apt and no package registry. What it runs of dcp comes built, in
# the bundle that tools/make_device_bundle.sh makes on a build machine; the
# device tool carries it beside the working tree.
#
#   tools/make_device_bundle.sh                # here: builds device_bundle/
#   tools/device_check.sh [seconds]            # there, from the repo root;
#                                              # default budget: 480 s
#
# Steps, each bounded by a share of the budget and by what is left of it, each
# with its exit status in the summary; a GPU step without a GPU (or without
# torch.cuda) skips and says why:
#   1. the host: nvidia-smi, cores, nvcc/CMake/ninja, python3 and torch, and
#      whether every bundled binary finds its libraries here;
#   2. the CUDA layout kernels: their GPU tests against the CPU references and
#      their bandwidth benchmark (without a GPU the tests list their cases
#      and the benchmark says it has no GPU: they start), and beside it the
#      torch ops dcp.torch uses for the same layout changes
#      (tools/device/layout_torch_benchmark.py, with torch.cuda);
#   3. forward+backward of examples/model.py on the GPU over a grid of
#      (length, recompute), timed into a profile table
#      (tools/device/profile_model.py; on a torch without CUDA a short CPU
#      table instead), then dcp-plan fitted to that table (or to
#      tools/device/profile_sample.csv when there is none);
#   4. a dcp job: the bundle's dcp-scheduler and examples/train.py in dcp
#      mode on one GPU (NCCL, bfloat16, a 1.1B model, sequences to 64K
#      tokens, 40 steps), the scheduler's start-up profile answered by the
#      trainer's own model (--profile_at_start, train.py --profile), the
#      cost model's out-of-sample errors from dcp-ctl's status (without
#      torch.cuda a tiny CPU job instead);
#   5. the plan-delivery benchmark with the host's cores, paced at 10 steps/s
#      and flat out (goal: a step delivered to 1,024 agents within 5 ms at
#      p99, and 10 steps/s).
# Everything it prints is saved in ${OUT:-/tmp}/device_check/: device_check.log
# (all of it), device_check.json (the summary and the steps' JSON in one
# file), summary.txt, profile.csv, dcp-plan's stats (plan_*.json) and
# the job's logs and status (job_*). Knobs: DCP_BUNDLE (default
# device_bundle), PYTHON (python3), DEVICE_CHECK_AGENTS (256,1024),
# DEVICE_CHECK_STEPS (100), DEVICE_CHECK_JOB=cpu (the tiny job even on a
# GPU). Exit status: 1 when a step failed or timed out.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit

budget="${1:-480}"
[[ "${budget}" =~ ^[0-9]+$ ]] || { echo "usage: $0 [seconds]" >&2; exit 2; }
bundle="${DCP_BUNDLE:-device_bundle}"
python="${PYTHON:-python3}"
agents="${DEVICE_CHECK_AGENTS:-256,1024}"
delivery_steps="${DEVICE_CHECK_STEPS:-100}"
out="${OUT:-/tmp}/device_check"
mkdir -p "${out}"
summary="${out}/summary.txt"
: > "${summary}"
exec > >(tee "${out}/device_check.log") 2>&1
tee_pid=$!

start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
step_start=0 step_deadline=0

# begin NAME PERCENT: a step may use PERCENT of the budget, at most what is
# left (less a few seconds for the summary).
begin() {
  step_name="$1"
  local share=$((budget * $2 / 100)) rest=$(($(left) - 5))
  ((share < rest)) || share="${rest}"
  step_start=$(date +%s)
  step_deadline=$((step_start + share))
  echo
  echo "=== ${step_name} (up to ${share} s; $(left) s of ${budget} left)"
}
remaining() { echo $((step_deadline - $(date +%s))); }
# bounded CMD...: runs CMD until the step's deadline; 124 when it hits it.
bounded() {
  local s
  s="$(remaining)"
  ((s > 0)) || return 124
  timeout -k 5 "${s}" "$@"
}
# finish STATUS NOTE: one summary line (ok, skip, FAIL, timeout).
finish() {
  local line
  line="$(printf '%-16s %-7s %4ss  %s' "${step_name}" "$1" \
    $(($(date +%s) - step_start)) "$2")"
  echo "--- ${line}"
  echo "${line}" >> "${summary}"
}
# status_of RC: ok, timeout or FAIL (exit RC).
status_of() {
  case "$1" in
    0) echo ok ;;
    124 | 137) echo timeout ;;
    *) echo "FAIL" ;;
  esac
}
# gtest NAME ARGS...: runs a bundled gtest binary; gtest_counts then holds
# its "N passed, N skipped" and gtest_all_skipped is 1 when no case ran.
gtest_counts="" gtest_all_skipped=0
gtest() {
  local log rc passed skipped
  log="$(mktemp)"
  bounded "${bundle}/run.sh" "$@" 2>&1 | tee "${log}"
  rc="${PIPESTATUS[0]}"
  passed="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "${log}" | tail -1)"
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "${log}" | tail -1)"
  rm -f "${log}"
  gtest_counts="${passed:-0} passed, ${skipped:-0} skipped"
  gtest_all_skipped=0
  [[ "${passed:-0}" == 0 && "${skipped:-0}" != 0 ]] && gtest_all_skipped=1
  return "${rc}"
}
# Binaries of a MANIFEST role.
binaries() { [[ -f "${bundle}/MANIFEST" ]] && awk -v r="$1" '$1 == r { print $2 }' "${bundle}/MANIFEST"; }

# ---- 1. the host ----------------------------------------------------------
begin host 10
have_gpu=0 have_torch=0 torch_cuda=0 have_bundle=0
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); $(uname -srm)"
  grep -h PRETTY_NAME /etc/os-release 2>/dev/null
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
  echo "cores: $(nproc)"
  free -g 2>/dev/null | head -2
}
if command -v nvidia-smi > /dev/null; then
  bounded nvidia-smi
  nvidia-smi -L 2> /dev/null | grep -q '^GPU ' && have_gpu=1
else
  echo "no nvidia-smi"
fi
for tool in nvcc cmake ninja; do
  if command -v "${tool}" > /dev/null; then
    echo "${tool}: $("${tool}" --version 2>&1 | grep -v '^$' | tail -1)"
  else
    echo "${tool}: not found"
  fi
done
if command -v "${python}" > /dev/null; then
  torch_info="$(bounded "${python}" -c '
import sys
print("python", sys.version.split()[0], sys.executable)
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0))
' 2>&1)"
  echo "${torch_info}"
  grep -q '^torch ' <<< "${torch_info}" && have_torch=1
  grep -q 'available True' <<< "${torch_info}" && torch_cuda=1
else
  echo "${python}: not found"
fi
bundle_note="no ${bundle}/ (make it with tools/make_device_bundle.sh and carry it)"
unresolved=""
if [[ -x "${bundle}/run.sh" && -f "${bundle}/MANIFEST" ]]; then
  have_bundle=1
  cat "${bundle}/BUILD_INFO" "${bundle}/MANIFEST"
  while read -r _ name _; do
    missing="$(bounded "${bundle}/run.sh" --check "${name}")"
    [[ -z "${missing}" ]] && continue
    awk -v n="${name}" '{ print n ": " $0 }' <<< "${missing}"
    # The bundle carries every library, glibc and its loader included, but
    # the GPU driver's (run.sh marks those "host: "; absent without a
    # driver): any other one missing here is the bundle's fault.
    grep -qv '^host: ' <<< "${missing}" && unresolved+=" ${name}"
  done < "${bundle}/MANIFEST"
  bundle_note="bundle of $(wc -l < "${bundle}/MANIFEST") binaries"
  [[ -z "${unresolved}" ]] || bundle_note+=", unresolved libraries in:${unresolved}"
fi
gpu_note="GPU: $( ((have_gpu)) && nvidia-smi -L | head -1 | cut -d'(' -f1 || echo none)"
torch_note="torch: $( ((have_torch)) && echo "yes, cuda $( ((torch_cuda)) && echo yes || echo no)" || echo no)"
if [[ -n "${unresolved}" ]]; then
  finish FAIL "${gpu_note}; ${torch_note}; ${bundle_note}"
else
  finish ok "${gpu_note}; ${torch_note}; ${bundle_note}"
fi

# ---- 2. the CUDA layout kernels -------------------------------------------
begin kernels 20
mapfile -t kernel_tests < <(binaries kernel_test)
mapfile -t kernel_benchmarks < <(binaries kernel_benchmark)
if ((!have_bundle)); then
  finish skip "${bundle_note}"
elif ((${#kernel_tests[@]} + ${#kernel_benchmarks[@]} == 0)); then
  finish skip "the bundle has no kernel binaries (none of the KERNEL_TARGETS of tools/make_device_bundle.sh built when it was made)"
else
  # Without a GPU the tests only list their cases and the benchmark says
  # there is no GPU: that shows they start here.
  rc=0 failed="" counts=""
  for name in "${kernel_tests[@]}"; do
    if ((have_gpu)); then
      echo "--- ${name} (failures and the count only)"
      gtest "${name}" --gtest_brief=1 || { rc=$?; failed+=" ${name}"; }
      counts+="; ${name}: ${gtest_counts}"
      # A GPU whose CUDA runtime sees no device skips every case.
      ((!gtest_all_skipped)) || { rc=1; failed+=" ${name}(all cases skipped)"; }
    else
      echo "--- ${name} --gtest_list_tests"
      cases="$(bounded "${bundle}/run.sh" "${name}" --gtest_list_tests)" ||
        { rc=$?; failed+=" ${name}"; }
      echo "$(grep -c '^  ' <<< "${cases}") cases"
    fi
  done
  for name in "${kernel_benchmarks[@]}"; do
    echo "--- ${name}"
    bounded "${bundle}/run.sh" "${name}" || { rc=$?; failed+=" ${name}"; }
  done
  if ((torch_cuda)); then
    # The torch ops dcp.torch runs instead, as fractions of a device copy
    # like the kernels': whether the kernels earn a place on the training
    # path.
    echo "--- dcp.torch's layout ops (tools/device/layout_torch_benchmark.py)"
    bounded "${python}" tools/device/layout_torch_benchmark.py ||
      { rc=$?; failed+=" layout_torch_benchmark"; }
  fi
  note="tests: ${kernel_tests[*]:-none}; benchmarks: ${kernel_benchmarks[*]:-none}${counts}${failed:+; failed:${failed}}"
  if ((!have_gpu && rc == 0)); then
    finish skip "no GPU (nvidia-smi lists none): the binaries start (tests listed, benchmark finds no GPU); ${note}"
  else
    finish "$(status_of "${rc}")" "${note}"
  fi
fi

# ---- 3. the model's profile on the GPU, and dcp-plan fitted to it ---------
begin profile 20
profile="${out}/profile.csv"
rm -f "${profile}"
profile_args=(--out="${profile}")
if ! command -v "${python}" > /dev/null; then
  finish skip "no ${python} (no profile; dcp-plan gets the checked-in sample)"
elif ((!have_torch)); then
  finish skip "${python} has no torch (no profile; dcp-plan gets the checked-in sample)"
elif [[ ! -f examples/model.py ]]; then
  finish skip "no examples/model.py"
else
  if ((torch_cuda)); then
    note="GPU"
    profile_args+=(--device=cuda)
  else
    note="torch sees no GPU: a short CPU table instead"
    profile_args+=(--device=cpu)
  fi
  s=$(($(remaining) - 10))
  ((s > 0)) || s=1
  PYTHONUNBUFFERED=1 bounded "${python}" tools/device/profile_model.py \
    --seconds="${s}" "${profile_args[@]}"
  rc=$?
  cat "${profile}" 2> /dev/null
  rows="$(grep -c '^[0-9]' "${profile}" 2> /dev/null || true)"
  if ((rc == 0 && !torch_cuda)); then
    finish skip "${note}, ${rows:-0} rows"
  else
    finish "$(status_of "${rc}")" "${note}, ${rows:-0} rows"
  fi
fi

begin planner 5
mapfile -t planners < <(binaries planner)
table="${profile}"
grep -q '^[0-9]' "${table}" 2> /dev/null || table=tools/device/profile_sample.csv
if ((!have_bundle || ${#planners[@]} == 0)); then
  finish skip "${bundle_note}; no dcp-plan in it"
else
  spec="$(sed -n 's/^# spec: *//p' "${table}" | head -1)"
  plan_args=(--lengths=data/lengths/wikipedia.txt
    --model_config="${spec:-data/models/cpu-tiny.json}"
    --world_size=8 --window=16384 --tokens_per_step=131072 --steps=5
    --baselines=false)
  echo "--- dcp-plan on the data-sheet cost model"
  bounded "${bundle}/run.sh" "${planners[0]}" "${plan_args[@]}" \
    --stats_json="${out}/plan_datasheet.json" > /dev/null
  rc=$?
  echo "--- dcp-plan --profile=${table}"
  bounded "${bundle}/run.sh" "${planners[0]}" "${plan_args[@]}" \
    --profile="${table}" --stats_json="${out}/plan_profiled.json"
  profiled_rc=$?
  ((rc != 0)) || rc="${profiled_rc}"
  # The planner predicts with the fitted model and the simulator replays on
  # the reference H200 cluster: the prediction error moves with the table.
  for f in datasheet profiled; do
    echo "${f}: $(grep -hE '"(makespan_s|prediction_error)"' "${out}/plan_${f}.json" 2> /dev/null | tr -d ' \n' | sed 's/,$//')"
  done
  finish "$(status_of "${rc}")" "fitted to ${table}"
fi

# ---- 4. a dcp job: the bundle's dcp-scheduler and examples/train.py -------
# The whole job: dcp-scheduler plans for one rank (the H200 reference sheet
# as its prior, refits from the reports) and examples/train.py trains in
# dcp mode through the plain-Python client (client_lib/python/src: grpcio
# and protobuf), on NCCL, in bfloat16 with torch's fused attention, a
# 1.1B-parameter model (tools/device/llama-1b-like.json) over
# longctx_wlb.txt cut to 64K tokens. dcp-ctl's status at the end holds the
# cost model's out-of-sample errors on the GPU's own timings (job_status.json).
# Without torch.cuda (or with DEVICE_CHECK_JOB=cpu) a tiny CPU job runs the
# same parts instead, so that a machine without a GPU proves the step.
begin job 35
mapfile -t schedulers < <(binaries scheduler)
mapfile -t ctls < <(binaries ctl)
job_python_ok=0
"${python}" -c 'import grpc, google.protobuf, torch' 2> /dev/null && job_python_ok=1
if ((!have_bundle || ${#schedulers[@]} == 0 || ${#ctls[@]} == 0)); then
  finish skip "${bundle_note}; no dcp-scheduler and dcp-ctl in it"
elif ((!job_python_ok)); then
  finish skip "no ${python} with grpc, protobuf and torch: no trainer"
else
  if ((torch_cuda)) && [[ "${DEVICE_CHECK_JOB:-}" != cpu ]]; then
    note="GPU" job_steps=40
    job_args=(--model_config=tools/device/llama-1b-like.json --window=65536
      --tokens_per_step=131072)
    train_args=(--device=cuda --dtype=bfloat16)
  else
    note="no GPU: a tiny CPU job" job_steps=6
    job_args=(--model_config=data/models/cpu-tiny.json --window=512
      --tokens_per_step=2048)
    train_args=(--device=cpu --dtype=float32)
  fi
  rm -f "${out}/job.port"
  "${bundle}/run.sh" "${schedulers[0]}" --lengths=data/lengths/longctx_wlb.txt \
    "${job_args[@]}" --world_size=1 --max_steps="${job_steps}" \
    --profile_at_start --profile_timeout=600s \
    --listen=127.0.0.1:0 --port_file="${out}/job.port" --metrics_listen= \
    > "${out}/job_scheduler.log" 2>&1 &
  scheduler_pid=$!
  for _ in $(seq 100); do
    [[ -s "${out}/job.port" ]] && break
    kill -0 "${scheduler_pid}" 2> /dev/null || break
    sleep 0.1  # The scheduler writes its port once it serves.
  done
  if [[ ! -s "${out}/job.port" ]]; then
    tail -n 5 "${out}/job_scheduler.log"
    kill "${scheduler_pid}" 2> /dev/null
    finish FAIL "${note}: the scheduler did not start (job_scheduler.log)"
  else
    address="127.0.0.1:$(cat "${out}/job.port")"
    PYTHONPATH="${PWD}/client_lib/python/src" PYTHONUNBUFFERED=1 \
      bounded "${python}" examples/train.py --mode=dcp \
      --scheduler="${address}" "${job_args[0]}" "${train_args[@]}" \
      --profile --local_world=1 --loss_log="${out}/job_loss.jsonl" \
      > "${out}/job_train.log" 2>&1
    rc=$?
    tail -n 3 "${out}/job_train.log"
    bounded "${bundle}/run.sh" "${ctls[0]}" --scheduler="${address}" --json \
      status > "${out}/job_status.json" 2> /dev/null
    bounded "${bundle}/run.sh" "${ctls[0]}" --scheduler="${address}" stop \
      > /dev/null 2>&1
    wait "${scheduler_pid}" 2> /dev/null
    errors="$(grep -oE '"(step_error|unseen_task_error|refits)": *"?[0-9.e+-]+"?' \
      "${out}/job_status.json" 2> /dev/null | tr -d ' ' | tr '\n' ' ')"
    steps="$(grep -c '"step"' "${out}/job_loss.jsonl" 2> /dev/null || true)"
    if ((rc == 0 && !torch_cuda)); then
      finish skip "${note}: ${steps:-0} steps trained; ${errors:-no status}"
    else
      finish "$(status_of "${rc}")" "${note}: ${steps:-0} steps; ${errors:-no status}"
    fi
  fi
fi

# ---- 5. plan delivery with the host's cores -------------------------------
begin delivery 100
mapfile -t benchmarks < <(binaries delivery_benchmark)
if ((!have_bundle || ${#benchmarks[@]} == 0)); then
  finish skip "${bundle_note}; no plan_delivery_benchmark in it"
else
  rc=0 ran=""
  for pace in 100 0; do
    if (($(remaining) < 30)); then
      echo "no time left for --step_ms=${pace}"
      break
    fi
    echo "--- --agents=${agents} --step_ms=${pace}, $(nproc) cores"
    bounded "${bundle}/run.sh" "${benchmarks[0]}" --agents="${agents}" \
      --steps="${delivery_steps}" --step_ms="${pace}" --client_threads=4 || rc=$?
    ran+=" step_ms=${pace}"
  done
  finish "$(status_of "${rc}")" "$(nproc) cores, agents ${agents}:${ran:- none (no time)}"
fi

echo
echo "=== summary ($(($(date +%s) - start)) s of ${budget}; saved in ${out})"
cat "${summary}"
rc=0
grep -qE '^[^ ]+ +(FAIL|timeout) ' "${summary}" && rc=1

# Everything in one JSON file beside the log: each step's summary line as
# fields, and the JSON the steps wrote (dcp-plan's stats, the job's status).
# awk, not python3: the host may have none.
json_string() { awk '{ gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\t/, " "); printf "\"%s\"", $0 } END { if (NR == 0) printf "\"\"" }'; }
{
  echo "{"
  echo "  \"budget_s\": ${budget}, \"seconds\": $(($(date +%s) - start)), \"exit\": ${rc},"
  echo "  \"steps\": ["
  first=1
  while read -r name status seconds note; do
    ((first)) || echo ","
    first=0
    printf '    {"name": %s, "status": %s, "seconds": %s, "note": %s}' \
      "$(printf '%s' "${name}" | json_string)" \
      "$(printf '%s' "${status}" | json_string)" "${seconds%s}" \
      "$(printf '%s' "${note}" | json_string)"
  done < "${summary}"
  echo
  echo "  ],"
  for part in plan_datasheet plan_profiled job_status; do
    f="${out}/${part}.json"
    if [[ -s "${f}" ]]; then echo "  \"${part}\": $(cat "${f}"),"
    else echo "  \"${part}\": null,"; fi
  done
  echo "  \"log\": \"device_check.log\""
  echo "}"
} > "${out}/device_check.json"
# Let tee write the last lines before the device tool collects $OUT.
exec 1>&- 2>&-
wait "${tee_pid}" 2> /dev/null
exit "${rc}"
