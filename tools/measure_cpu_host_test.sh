#!/usr/bin/env bash
# tools/measure_cpu_host.py writes a cluster config the planner loads: a
# quick run on two ranks, then dcp-plan plans a CPU-sized job on it (the
# config's every field present and in range, or dcp-plan names the field).
set -euo pipefail
out="${TEST_TMPDIR}/cpu-host.json"
/usr/bin/python3 tools/measure_cpu_host.py --quick --ranks=2 \
  --memory_cap_bytes=1e9 --out="${out}"
/usr/bin/python3 - "${out}" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
assert spec["gpus_per_node"] == 2, spec
assert spec["hbm_bytes"] == 1e9 and spec["usable_fraction"] == 1.0, spec
for key in ("peak_flops", "intra_node_bw", "grad_sync_bw"):
    assert spec[key] > 0, (key, spec)
assert spec["ring_overlaps_attention"] is False, spec
PY
scheduler/eval/dcp-plan --cluster_config="${out}" \
  --model_config=data/models/cpu-tiny.json \
  --lengths=data/lengths/wikipedia.txt --world_size=2 --window=4096 \
  --tokens_per_step=8192 --steps=2 --baselines=false >"${TEST_TMPDIR}/plan.txt"
grep -q "\"makespan_s\"" "${TEST_TMPDIR}/plan.txt"
echo "measure_cpu_host_test: ok"
