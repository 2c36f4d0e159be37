#!/usr/bin/env bash
# The checks that need the device machine (a GPU host with many cores), as
# one script that fits its 15 minutes: what the 2-core CPU machines cannot
# show.
#
#   tools/device_check.sh [seconds]     # default budget: 540 s
#
# 1. nvidia-smi, nvcc and the NCCL headers, as found.
# 2. The NCCL communicator's GPU test, built with --config=cuda
#    (comm/nccl_communicator_gpu_test.cc: one rank on GPU 0, more
#    ranks when there are more GPUs).
# 3. The plan-delivery benchmark at 256 and 1,024 agents with the host's
#    cores (the fan-out pool on: --fanout_threads=-1 picks it on 8+ cores),
#    paced at 10 steps/s and flat out: the issue's goal is a step delivered
#    to all 1,024 agents within 5 ms at p99, and 10 steps/s.
# Everything it prints is also saved under $OUT (or /tmp) for the notes.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

budget="${1:-540}"
out="${OUT:-/tmp}/device_check"
mkdir -p "${out}"
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
log() { echo "== $* ($(left) s left)" | tee -a "${out}/summary.txt"; }

log "1. the device"
{ nvidia-smi || echo "no nvidia-smi"; nproc; nvcc --version || echo "no nvcc";
  ls /usr/include/nccl.h /usr/local/cuda/include/nccl.h 2>/dev/null; } \
  2>&1 | tee "${out}/device.txt"

log "2. setup and the CUDA build"
tools/setup.sh > "${out}/setup.txt" 2>&1 || log "setup failed (see setup.txt)"
jobs="$(nproc)"
timeout "$(left)" bazel test --config=cuda --jobs="${jobs}" -c opt \
  --test_output=all //comm:nccl_communicator_gpu_test \
  > "${out}/nccl_gpu_test.txt" 2>&1
log "nccl_communicator_gpu_test exit $?"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|PASSED|FAILED" "${out}/nccl_gpu_test.txt" |
  tee -a "${out}/summary.txt"

log "3. plan delivery with $(nproc) cores"
timeout "$(left)" bazel build -c opt --jobs="${jobs}" \
  //scheduler/server:plan_delivery_benchmark > "${out}/bench_build.txt" 2>&1
bench=bazel-out/k8-opt/bin/scheduler/server/plan_delivery_benchmark
for pace in 100 0; do
  (($(left) > 60)) || { log "no time left for --step_ms=${pace}"; break; }
  timeout "$(($(left) - 10))" "${bench}" --agents=256,1024 --steps=100 \
    --step_ms="${pace}" --client_threads=4 2>&1 |
    tee "${out}/plan_delivery_step_ms_${pace}.txt"
done
log "done"
