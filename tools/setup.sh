#!/usr/bin/env bash
# Installs the Debian 12 packages dcp needs; installs nothing that is already
# there, so it is cheap to run before every build.
#
#   tools/setup.sh              # what `bazel build/test //...` and
#                               # tools/fuzz.sh need (every group but
#                               # screenshot)
#   tools/setup.sh build [...]  # the same, by group name
#
# Runs as root, or through sudo otherwise. Prints nothing when everything is
# already installed, and the packages it installs when not.
set -euo pipefail

# Every package dcp needs, by group. Add a group (or packages to one) here and
# nowhere else.
declare -A PACKAGE_GROUPS=(
  # Bazel from Debian with the rule sets WORKSPACE points at, the C++
  # toolchain, and the system libraries of third_party/system_library.bzl
  # (libssl-dev: the TLS of /metrics). prometheus (promtool and the server)
  # is what the metrics tests validate against; run_demo.sh reads /metrics
  # with curl. The security and metrics TLS tests make their certificates
  # with the openssl CLI.
  [build]="bazel-bootstrap bazel-rules-java bazel-platforms bazel-skylib
           g++ pkg-config
           libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
           libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
           nlohmann-json3-dev libgloo-dev
           libssl-dev prometheus curl
           git ca-certificates openssl"
  # libtorch (CPU, with c10d's Gloo process group) for the training path:
  # the model, sequence parallelism and the trainer under train/; gnuplot
  # (without X) for tools/plot_loss.sh, which draws dcp-train's loss logs.
  # libtorch links the BLAS alternative, which is Debian's reference BLAS
  # (~15x slower here) unless an optimised one is installed. BLIS (serial)
  # takes its place: it is reentrant, where Debian's serial OpenBLAS gives
  # wrong sgemm results when several threads of a process call it at once
  # (ranks as threads in the tests).
  [train]="libtorch-dev libblis4-serial gnuplot-nox"
  # The Python package dcp (client_lib/python, plain Python) and its tests:
  # grpcio and protobuf for the client, numpy for the corpus's draws, pip
  # and setuptools for its `pip install` test, and python3-torch (the same
  # libtorch 1.13, for torch.distributed and the Python model of examples/).
  [python]="python3-grpcio python3-protobuf python3-numpy python3-pip
            python3-setuptools python3-torch"
  # tools/fuzz.sh: clang and libFuzzer for the fuzz targets of fuzz/, built
  # outside Bazel with make, and the sanitizers' headers and runtimes
  # (libclang-rt-14-dev: only a recommendation of clang's, which
  # --no-install-recommends leaves out); python3 reads what `bazel query`
  # says about the system libraries.
  [fuzz]="clang-14 libfuzzer-14-dev libclang-rt-14-dev make python3"
  # What the checks of deploy/ run: a real Slurm for tests/slurm_e2e_test
  # (the daemons, and sbatch, srun and scontrol; it pulls in munge, which
  # the test does not start), systemd-analyze for the unit files of
  # deploy/systemd (no running systemd needed), and buildah, which builds
  # deploy/container/Containerfile where a base image is at hand. The
  # Kubernetes manifests' test (deploy/kubernetes) parses them with
  # python3-yaml (deploy/grafana's dashboard test parses the alert rules
  # with it too), validates them against the vendored OpenAPI schemas with
  # python3-jsonschema and sends the kubelet's health probes with
  # python3-grpcio.
  [deploy]="slurmctld slurmd slurm-client systemd buildah
            python3-yaml python3-jsonschema python3-grpcio"
  # tools/dashboard_screenshot.sh: headless Chromium shoots the page that
  # draws the Grafana dashboard's queries (docs/dashboard.png). Not in the
  # default groups: //deploy/grafana:dashboard_test draws that page with it
  # where it is installed and skips only that check where it is not.
  [screenshot]="chromium"
)

usage() {
  echo "usage: $0 [group...]   (groups: ${!PACKAGE_GROUPS[*]}; default: all but screenshot)" >&2
  exit 2
}

installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == \
    "install ok installed" ]]
}

main() {
  local groups=("$@")
  ((${#groups[@]})) || groups=(build train python fuzz deploy)

  local group pkg missing=()
  for group in "${groups[@]}"; do
    [[ "${group}" != -* && -v "PACKAGE_GROUPS[${group}]" ]] || usage
    for pkg in ${PACKAGE_GROUPS[${group}]}; do
      installed "${pkg}" || missing+=("${pkg}")
    done
  done
  ((${#missing[@]})) || return 0

  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || {
      echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
      exit 1
    }
    sudo=(sudo)
  fi

  echo "setup: installing ${missing[*]}"
  local log
  log="$(mktemp)"
  if ! "${sudo[@]}" apt-get update -q >"${log}" 2>&1 ||
    ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "${missing[@]}" \
      >>"${log}" 2>&1; then
    cat "${log}" >&2
    rm -f "${log}"
    echo "setup: apt-get failed (output above)" >&2
    exit 1
  fi
  rm -f "${log}"
}

main "$@"
