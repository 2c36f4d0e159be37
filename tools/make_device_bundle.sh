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
#   lib/         their shared libraries (found with ldd), libstdc++ and
#                libgcc_s included: the host's distribution is not known
#   run.sh NAME [ARGS...]   runs bin/NAME with lib/ on LD_LIBRARY_PATH;
#                `run.sh --check NAME` lists libraries left unresolved
#   MANIFEST     one line per binary: role, name, Bazel label
#   BUILD_INFO   commit, date, toolkit, sizes
# Left out: glibc (libc, libm, libdl, libpthread, librt, the loader), whose
# symbol versions the host must provide, and the driver's libcuda. The bundle
# and the working tree travel together, under the device tool's 64 MiB: this
# script fails when they would not fit, or when the bundle alone is over
# DCP_BUNDLE_MAX_MIB (default 60).
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
)

# Sonames a base system (or the GPU driver) provides: never bundled.
BASE_LIBS_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libutil\.so|libresolv\.so|libcuda\.so|libnvidia-)'

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
  ldd "${bin_root}/kernels/ulysses_layout_cuda_gpu_test" | grep -q libcudart ||
    die "${cuda_test} links no libcudart: not a --config=cuda build"
fi

# Shared libraries, resolved from the build tree (its RUNPATHs point at
# Bazel's _solib folders and at the CUDA toolkit).
declare -A lib_path=()
for src in "${sources[@]}"; do
  while read -r soname _ path _; do
    [[ "${soname}" =~ ${BASE_LIBS_RE} ]] && continue
    [[ "${path}" == /* ]] || die "${src}: ${soname} is not found here"
    lib_path["${soname}"]="${path}"
  done < <(ldd "${src}" | grep '=>')
done

for soname in "${!lib_path[@]}"; do
  cp -L "${lib_path[${soname}]}" "${out}/lib/${soname}"
  chmod u+w "${out}/lib/${soname}"
  strip --strip-unneeded "${out}/lib/${soname}" 2>/dev/null || true
done

cat > "${out}/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs a bundled binary with the bundle's libraries (written by
# tools/make_device_bundle.sh; see there).
#   run.sh NAME [ARGS...] | run.sh --check NAME
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

library_path() { echo "${here}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"; }

case "${1:-}" in
  "") echo "usage: $0 NAME [ARGS...] | --check NAME" >&2; exit 2 ;;
  --check)
    LD_LIBRARY_PATH="$(library_path)" ldd "${here}/bin/${2:?NAME}" |
      grep -E 'not found|no version' ;
    exit 0 ;;
  *)
    name="$1"; shift
    [[ -x "${here}/bin/${name}" ]] || { echo "$0: no bin/${name} in the bundle" >&2; exit 127; }
    LD_LIBRARY_PATH="$(library_path)" exec "${here}/bin/${name}" "$@" ;;
esac
RUN
chmod +x "${out}/run.sh"

# The newest glibc symbol version the bundle needs: the host must have it.
glibc_needed="$(for f in "${out}"/bin/* "${out}"/lib/*; do objdump -T "${f}"; done 2>/dev/null |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
tree_bytes="$(git ls-files -z -co --exclude-standard |
  xargs -0 stat -L -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')"
bundle_bytes="$(bytes_of "${out}")"
{
  echo "commit: $(git rev-parse HEAD) ($(git status --porcelain | wc -l) paths changed)"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "toolkit: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo unknown)"
  echo "needs: ${glibc_needed:-no versioned glibc}, a GPU driver for the CUDA runtime bundled"
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
