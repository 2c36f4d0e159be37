#!/usr/bin/env bash
# Builds the fuzz targets of //fuzz with clang-14 and libFuzzer (Debian's
# clang-14 and libfuzzer-14-dev, with AddressSanitizer and
# UndefinedBehaviorSanitizer) and runs each for SECONDS seconds, seeded with
# its corpus in fuzz/corpus/<target>/; prints per target what libFuzzer
# counted (executions, executions a second, coverage, new inputs) and any
# crash, hang or sanitizer report with the input that caused it.
#
#   tools/fuzz.sh                        # every target, 60 s each
#   tools/fuzz.sh 10                     # 10 s each (what .ci/run does)
#   tools/fuzz.sh 300 plan_file_fuzzer   # some targets, 5 minutes each
#   tools/fuzz.sh --build-only           # build them, run nothing
#
# Bazel builds the same targets with the default toolchain (gcc) as cc_tests
# that run every file of their corpus once (fuzz/defs.bzl); libFuzzer needs
# clang's -fsanitize=fuzzer, so this script compiles outside Bazel, against
# the same system libraries: it asks `bazel query` for each target's
# sources and the link options and defines of the system libraries it uses
# (third_party/system_library.bzl), generates the .pb.cc files with the
# system protoc, and builds them with make, one object per source shared by
# every target, rebuilt when a source or a header it includes changes.
#
# Targets run DCP_JOBS at a time (default: one per core). Each keeps the
# inputs it found in $DCP_FUZZ_OUT/run/<target>/corpus (default
# ~/.cache/dcp-fuzz), so later runs go on from there; the seed corpus in the
# repository is only read. A crash leaves its input as
# $DCP_FUZZ_OUT/run/<target>/crash-<sha1> (or timeout-, oom-, leak-);
# `bazel run //fuzz:<target> -- <file>` replays it under the regular build,
# and a fixed one belongs in fuzz/corpus/<target>/. Extra libFuzzer flags
# for a target go in fuzz/<target>.options (one a line), a dictionary in
# fuzz/<target>.dict. DCP_FUZZ_TIMEOUT is the seconds one input may take
# before it counts as a hang (default 10).
#
# Exits 0 when no target crashed, 1 when one did, 2 when they did not build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: $0 [--build-only] [SECONDS] [TARGET...]" >&2
  exit 2
}

build_only=0
seconds=60
targets=()
for arg in "$@"; do
  case "${arg}" in
    --build-only) build_only=1 ;;
    -*) usage ;;
    *)
      if [[ "${arg}" =~ ^[0-9]+$ && ${#targets[@]} -eq 0 ]]; then
        seconds="${arg}"
      else
        targets+=("${arg#//fuzz:}")
      fi
      ;;
  esac
done

tools/setup.sh build fuzz

jobs="${DCP_JOBS:-$(nproc)}"
out="${DCP_FUZZ_OUT:-${HOME}/.cache/dcp-fuzz}"
timeout="${DCP_FUZZ_TIMEOUT:-10}"
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"

# One query for everything the targets are built from; fuzz_makefile.py
# turns it into the Makefile and names the targets.
makefile="${out}/Makefile"
query_log="${out}/query.log"
if ! bazel query --noshow_progress --noshow_loading_progress --output=xml \
  'deps(tests(//fuzz/...))' 2>"${query_log}" |
  tools/fuzz_makefile.py --out="${out}" --only "${targets[@]}" \
    >"${makefile}" 2>"${out}/targets"; then
  cat "${query_log}" "${out}/targets" >&2
  exit 2
fi
read -r -a targets < <(sed -n 's/^targets: //p' "${out}/targets")

echo "fuzz: building ${#targets[@]} targets with clang++-14 and libFuzzer in ${out}"
if ! make -s -j"${jobs}" -f "${makefile}" all >"${out}/build.log" 2>&1; then
  cat "${out}/build.log" >&2
  echo "fuzz: the build failed (output above)" >&2
  exit 2
fi
((build_only == 0)) || exit 0

# --- running ----------------------------------------------------------------

run_one() {
  local t="$1" dir="${out}/run/$1" flags=()
  mkdir -p "${dir}/corpus"
  rm -f "${dir}/log"
  [[ -f "fuzz/${t}.options" ]] && mapfile -t flags < <(grep -v '^\s*\(#\|$\)' "fuzz/${t}.options")
  [[ -f "fuzz/${t}.dict" ]] && flags+=("-dict=fuzz/${t}.dict")
  local rc=0
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
    "${out}/bin/${t}" -max_total_time="${seconds}" -print_final_stats=1 \
    -timeout="${timeout}" -rss_limit_mb=2048 -artifact_prefix="${dir}/" \
    "${flags[@]}" "${dir}/corpus" "fuzz/corpus/${t}" >"${dir}/log" 2>&1 ||
    rc=$?
  echo "${rc}" >"${dir}/rc"
}

echo "fuzz: running ${#targets[@]} targets for ${seconds} s each, ${jobs} at a time"
running=0
for t in "${targets[@]}"; do
  run_one "${t}" &
  if ((++running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

fuzz_stat() { sed -n "s/^stat::$2: *//p" "$1" | tail -1; }
crashed=0
printf '\n%-26s %12s %9s %6s %7s  %s\n' target executions exec/s cov corpus result
for t in "${targets[@]}"; do
  dir="${out}/run/${t}"
  log="${dir}/log"
  execs="$(fuzz_stat "${log}" number_of_executed_units)"
  rate="$(fuzz_stat "${log}" average_exec_per_sec)"
  # The last status line: "#123 DONE cov: 456 ft: 789 corp: 12/3Kb ...".
  last="$(grep -E '^#[0-9]+' "${log}" | tail -1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"${last}")"
  corp="$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"${last}")"
  result=ok
  if [[ "$(cat "${dir}/rc")" != 0 ]]; then
    crashed=1
    artifact="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "${log}" | tail -1)"
    reason="$(grep -m1 -E '==dcp-fuzz==|ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:|SUMMARY:' "${log}" |
      sed 's/^==[0-9]*==//' | cut -c1-160 || true)"
    result="FAILED: ${reason:-exit $(cat "${dir}/rc")} -> ${artifact:-no input saved} (log: ${log})"
  fi
  printf '%-26s %12s %9s %6s %7s  %s\n' "${t}" "${execs:-?}" "${rate:-?}" \
    "${cov:-?}" "${corp:-?}" "${result}"
done
exit "${crashed}"
