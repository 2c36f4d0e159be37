#!/usr/bin/env bash
# Builds what tools/device_check.sh runs on the GPU host (which has no Bazel,
# no apt and no package registry) and puts it in one folder that the device
# tool can carry there: the binaries, stripped, and every shared library they
# load that a base system may lack.
#
#   tools/make_device_bundle.sh [OUT_DIR]    # default: device_bundle/
#
# Run it here, on the build machine (Bazel, CUDA toolkit). The bundle:
#   bin/NAME     the binaries of TARGETS and KERNEL_TARGETS below
#   lib/         their shared libraries (found with ldd), glibc included
#                (the loader ld-linux-x86-64.so.2, libc, libm, ...) and
#                libstdc++ and libgcc_s: the host's distribution is not known,
#                and its glibc may be older than the build machine's
#   run.sh NAME [ARGS...]   runs bin/NAME through lib/'s loader, on lib/;
#                `run.sh --check NAME` lists libraries left unresolved
#   MANIFEST     one line per binary: role, name, Bazel label
#   BUILD_INFO   commit, date, toolkit, the glibc brought, sizes
# Left out: what must come from the host, the kernel's linux-vdso and the
# GPU driver's libcuda and libnvidia-* (they match the host's kernel module).
# So the bundle starts on any x86-64 Linux whose kernel the bundled glibc
# supports (tools/device/chroot_check.sh proves it in a bare Debian 11). The
# bundle and the working tree travel together, under the device tool's
# 64 MiB: this script fails when they would not fit, or when the bundle alone
# is over DCP_BUNDLE_MAX_MIB (default 60).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit

# The CUDA layout kernels' GPU test (`*_test`: compared with the CPU
# references) and bandwidth benchmark. Absent ones are reported and left out.
KERNEL_TARGETS=(
  //kernels:ulysses_layout_cuda_gpu_test
  //kernels:ulysses_layout_benchmark
)

# role label: the roles tools/device_check.sh looks for in MANIFEST.
TARGETS=(
  "planner //scheduler/eval:dcp-plan"
  "delivery_benchmark //scheduler/delivery:plan_delivery_benchmark"
  "scheduler //scheduler/server:dcp-scheduler"
  "ctl //scheduler/server:dcp-ctl"
)

# Sonames only the host can provide: the kernel's vDSO and the GPU driver's
# libraries, which must match its kernel module. Never bundled.
HOST_LIBS_RE='^(linux-vdso\.so|libcuda\.so|libnvidia-)'
# The loader run.sh starts binaries with (the build machine's glibc's).
LOADER=ld-linux-x86-64.so.2

out="${1:-device_bundle}"
max_mib="${DCP_BUNDLE_MAX_MIB:-60}"
carry_limit_mib=64

die() { echo "make_device_bundle: $*" >&2; exit 1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
bytes_of() { du -sb "$1" | cut -f1; }

# BUILD.bazel of //pkg:name declares name = "name".
declared() {
  local label="$1" pkg name
  pkg="${label#//}"; pkg="${pkg%%:*}"; name="${label##*:}"
  [[ -f "${pkg}/BUILD.bazel" ]] &&
    grep -Eq "name *= *\"${name}\"" "${pkg}/BUILD.bazel"
}

roles=() labels=()
for entry in "${TARGETS[@]}"; do
  roles+=("${entry%% *}"); labels+=("${entry#* }")
done
for label in "${KERNEL_TARGETS[@]}"; do
  if declared "${label}"; then
    if [[ "${label}" == *_test ]]; then roles+=(kernel_test)
    else roles+=(kernel_benchmark); fi
    labels+=("${label}")
  else
    echo "make_device_bundle: ${label} is not declared (yet): left out;" \
      "the device check will say it has no kernel binaries" >&2
    if [[ -f kernels/BUILD.bazel ]]; then
      echo "  kernels/BUILD.bazel declares: $(grep -Eo 'name *= *"[^"]*(_test|_benchmark)"' \
        kernels/BUILD.bazel | sed -E 's/.*"(.*)"/\1/' | tr '\n' ' ')" >&2
    fi
  fi
done

core_labels=() kernel_labels=()
for i in "${!labels[@]}"; do
  if [[ "${roles[$i]}" == kernel_* ]]; then kernel_labels+=("${labels[$i]}")
  else core_labels+=("${labels[$i]}"); fi
done
bazel_build() { bazel build --jobs=2 -c opt --config=cuda "$@"; }
echo "== bazel build -c opt --config=cuda ${core_labels[*]}"
bazel_build "${core_labels[@]}" || die "the build failed"
# A kernel target that does not build (its package may be mid-edit) is left
# out; a failed build leaves no fresh binary, so each is built on its own.
declare -A built=()
for label in "${core_labels[@]}"; do built["${label}"]=1; done
if ((${#kernel_labels[@]})); then
  echo "== bazel build -c opt --config=cuda ${kernel_labels[*]}"
  if bazel_build "${kernel_labels[@]}"; then
    for label in "${kernel_labels[@]}"; do built["${label}"]=1; done
  else
    for label in "${kernel_labels[@]}"; do
      if bazel_build "${label}"; then built["${label}"]=1
      else echo "make_device_bundle: ${label} does not build: left out" >&2; fi
    done
  fi
fi
bin_root="$(bazel info -c opt bazel-bin)" || die "bazel info failed"

rm -rf "${out}"
mkdir -p "${out}/bin" "${out}/lib"
: > "${out}/MANIFEST"
sources=()
for i in "${!labels[@]}"; do
  label="${labels[$i]}"
  [[ -v "built[${label}]" ]] || continue
  pkg="${label#//}"; pkg="${pkg%%:*}"; name="${label##*:}"
  src="${bin_root}/${pkg}/${name}"
  [[ -x "${src}" ]] || die "${label} built, but ${src} is not there"
  cp -L "${src}" "${out}/bin/${name}"
  chmod u+w "${out}/bin/${name}"
  strip --strip-unneeded "${out}/bin/${name}"
  echo "${roles[$i]} ${name} ${label}" >> "${out}/MANIFEST"
  sources+=("${src}")
done
# A --config=cuda build links the kernels' GPU test against the toolkit's
# shared libcudart (//third_party/cuda:cuda_runtime passes -lcudart; the
# test's linkstatic covers only dcp's own libraries): one without it is not
# that build, so refuse it. When the test was left out above (undeclared, or
# it did not build) the bundle has no CUDA binary, and bazel-bin may hold a
# stale one: nothing to check.
cuda_test=//kernels:ulysses_layout_cuda_gpu_test
if [[ -v "built[${cuda_test}]" ]]; then
  # (Not `ldd | grep -q`: under pipefail, grep's early exit can fail ldd.)
  [[ "$(ldd "${bin_root}/kernels/ulysses_layout_cuda_gpu_test")" == *libcudart* ]] ||
    die "${cuda_test} links no libcudart: not a --config=cuda build"
fi

# Shared libraries, resolved from the build tree (its RUNPATHs point at
# Bazel's _solib folders and at the CUDA toolkit), glibc's among them. ldd
# lists the loader by its path alone ("/lib64/ld-linux-x86-64.so.2 (0x...)").
declare -A lib_path=()
for src in "${sources[@]}"; do
  while read -r soname arrow path _; do
    if [[ "${arrow}" != "=>" ]]; then
      [[ "${soname}" == */"${LOADER}" ]] || continue
      path="${soname}"; soname="${LOADER}"
    fi
    [[ "${soname}" =~ ${HOST_LIBS_RE} ]] && continue
    [[ "${path}" == /* ]] || die "${src}: ${soname} is not found here"
    lib_path["${soname}"]="${path}"
  done < <(ldd "${src}")
done
[[ -v "lib_path[${LOADER}]" && -v "lib_path[libc.so.6]" ]] ||
  die "ldd names no ${LOADER} or libc.so.6: not a glibc build?"

for soname in "${!lib_path[@]}"; do
  cp -L "${lib_path[${soname}]}" "${out}/lib/${soname}"
  chmod u+w "${out}/lib/${soname}"
  strip --strip-unneeded "${out}/lib/${soname}" 2>/dev/null || true
done
chmod +x "${out}/lib/${LOADER}"

cat > "${out}/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs a bundled binary with the bundle's libraries (written by
# tools/make_device_bundle.sh; see there).
#   run.sh NAME [ARGS...] | run.sh --check NAME
# The binaries run through the bundle's own loader, lib/ld-linux-x86-64.so.2,
# with lib/ first on its path: they get the bundle's glibc, never the host's
# (which may be older), and only the kernel and the GPU driver come from the
# host. The host's LD_LIBRARY_PATH comes after lib/: it may be where the
# driver's libcuda is. The binaries are not patched, so a child process a
# binary starts by path would get the host's loader (the bundled ones start
# none).
# Started so, a binary's /proc/self/exe is the loader (lib/), not bin/NAME: of
# the bundled ones only dcp-plan and the delivery benchmark read it, to look
# for data/ files after the working directory, which device_check.sh sets to
# the repository root; lib/'s parents lead there too.
#
# --check NAME prints the libraries the bundled loader leaves unresolved, one
# per line, and exits 1 when one of them is the bundle's; the GPU driver's
# (libcuda, libnvidia-*: absent on a host without one) are printed as
# "host: SONAME (the host's GPU driver) not found" and are not the bundle's
# fault: tools/device_check.sh counts only the other lines.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
loader="${here}/lib/ld-linux-x86-64.so.2"

library_path() { echo "${here}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"; }

case "${1:-}" in
  "") echo "usage: $0 NAME [ARGS...] | --check NAME" >&2; exit 2 ;;
  --check)
    name="${2:?NAME}"
    [[ -x "${here}/bin/${name}" ]] || { echo "bin/${name}: not in the bundle"; exit 1; }
    # What ldd does, with the bundle's loader: LD_TRACE_LOADED_OBJECTS lists
    # every library, "not found" for a missing one (`ld.so --list` stops at
    # the first). The loader cannot start (wrong architecture, a kernel too
    # old): it says why and exits nonzero.
    listing="$(LD_TRACE_LOADED_OBJECTS=1 "${loader}" --library-path "$(library_path)" \
      "${here}/bin/${name}" 2>&1)" ||
      { echo "${listing:-${loader} cannot list bin/${name}}"; exit 1; }
    # Each library that needs a missing one lists it again: once is enough.
    rc=0
    while read -r line; do
      [[ -n "${line}" ]] || continue
      if [[ "${line}" =~ ^(libcuda\.so|libnvidia-)[^[:space:]]*\ =\>\ not\ found ]]; then
        echo "host: ${line%% *} (the host's GPU driver) not found"
      else
        echo "${line}"; rc=1
      fi
    done <<< "$(grep -E 'not found|no version' <<< "${listing}" | sed 's/^[[:space:]]*//' | awk '!seen[$0]++')"
    exit "${rc}" ;;
  *)
    name="$1"; shift
    [[ -x "${here}/bin/${name}" ]] || { echo "$0: no bin/${name} in the bundle" >&2; exit 127; }
    exec "${loader}" --library-path "$(library_path)" --argv0 "${name}" \
      "${here}/bin/${name}" "$@" ;;
esac
RUN
chmod +x "${out}/run.sh"

# The glibc brought, and the oldest kernel it was configured for (its
# --version says "Minimum supported kernel: X"; `file` says "for GNU/Linux
# X"): all the host must have, besides an x86-64 CPU and the GPU driver.
glibc_version="$("${out}/lib/libc.so.6" --version 2>/dev/null |
  sed -n '1s/.*release version \([0-9][0-9.]*[0-9]\).*/\1/p')"
kernel_min="$("${out}/lib/libc.so.6" --version 2>/dev/null |
  sed -n 's/^Minimum supported kernel: *\([0-9.]*\).*/\1/p')"
[[ -n "${kernel_min}" ]] ||
  kernel_min="$(file -L "${out}/lib/libc.so.6" 2>/dev/null | sed -n 's/.*for GNU\/Linux \([0-9.]*\).*/\1/p')"
if [[ -n "${kernel_min}" ]]; then kernel_note="Linux ${kernel_min} or newer"
else kernel_note="a kernel at least as new as the build machine's glibc supports"; fi
tree_bytes="$(git ls-files -z -co --exclude-standard |
  xargs -0 stat -L -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')"
bundle_bytes="$(bytes_of "${out}")"
{
  echo "commit: $(git rev-parse HEAD) ($(git status --porcelain | wc -l) paths changed)"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "toolkit: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo unknown)"
  echo "brings: glibc ${glibc_version:-unknown} (its loader runs the binaries), libstdc++, the CUDA runtime"
  echo "needs: an x86-64 ${kernel_note}; a GPU driver (libcuda) for the CUDA runtime"
  echo "bundle: $(mib "${bundle_bytes}") MiB; working tree: $(mib "${tree_bytes}") MiB"
} > "${out}/BUILD_INFO"

echo "== ${out}"
cat "${out}/MANIFEST"
echo "libraries: $(find "${out}/lib" -type f | wc -l)"
cat "${out}/BUILD_INFO"
((bundle_bytes <= max_mib * 1048576)) ||
  die "the bundle is $(mib "${bundle_bytes}") MiB, over ${max_mib} MiB"
((bundle_bytes + tree_bytes <= carry_limit_mib * 1048576)) ||
  die "bundle and working tree come to $(mib $((bundle_bytes + tree_bytes))) MiB," \
    "over the device tool's ${carry_limit_mib} MiB"
echo "carry: ${out}"
