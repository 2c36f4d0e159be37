#!/usr/bin/env bash
# Proves tools/device_check.sh on a bare, older machine: runs it to the end
# in a copy of a minbase Debian 11 (bullseye, glibc 2.31, older than the
# build machine's) chroot with nothing installed (no Bazel, no compiler, no
# CUDA, no python3), over what the device tool would carry, the working tree
# and the bundle, and checks that every step ran and none failed (the GPU
# steps skip; the bundle's binaries must start there, on the glibc they bring).
#
#   tools/make_device_bundle.sh && tools/device/chroot_check.sh [seconds]
#
# Needs root (debootstrap, chroot, mounts). DCP_CHROOT_SUITE picks another
# Debian release (e.g. bookworm). The base chroot is DCP_CHROOT_BASE (default
# ~/.cache/dcp-chroot/SUITE; not fresh_machine.sh's bookworm one, which has git
# installed), made once with `debootstrap --variant=minbase` from this
# machine's apt mirror (DCP_CHROOT_MIRROR overrides it), never changed: each
# run copies it to DEVCHECK_ROOT (default ~/.cache/dcp-chroot/devcheck) and
# removes the copy afterwards. The device check's files come back to
# ${OUT:-/tmp}/device_check_chroot/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit

budget="${1:-300}"
suite="${DCP_CHROOT_SUITE:-bullseye}"
base="${DCP_CHROOT_BASE:-${HOME}/.cache/dcp-chroot/${suite}}"
root="${DEVCHECK_ROOT:-${HOME}/.cache/dcp-chroot/devcheck}"
bundle="${DCP_BUNDLE:-device_bundle}"
results="${OUT:-/tmp}/device_check_chroot"

die() { echo "chroot_check: $*" >&2; exit 1; }
((EUID == 0)) || die "needs root (chroot and mounts)"
[[ -x "${bundle}/run.sh" ]] || die "no ${bundle}/: run tools/make_device_bundle.sh first"
[[ "${root}" != "${base}" && "${root}" != / ]] || die "DEVCHECK_ROOT must be a scratch folder"

# The base: what minbase brings and nothing else (the GPU host's own tools are
# not assumed). Made in a scratch folder and renamed, so that an interrupted
# debootstrap leaves no half base behind.
if [[ ! -x "${base}/bin/bash" ]]; then
  mirror="${DCP_CHROOT_MIRROR:-$(grep -h '^URIs' /etc/apt/sources.list.d/*.sources 2> /dev/null |
    head -1 | awk '{ print $2 }')}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  command -v debootstrap > /dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap > /dev/null ||
    die "no debootstrap, and apt-get cannot install it"
  echo "=== debootstrap --variant=minbase ${suite} ${base} ${mirror}"
  rm -rf "${base}.partial"
  mkdir -p "$(dirname "${base}")"
  debootstrap --variant=minbase "${suite}" "${base}.partial" "${mirror}" > "${base}.log" 2>&1 ||
    die "debootstrap failed (see ${base}.log)"
  mv "${base}.partial" "${base}"
fi

mounted() { grep -q " ${root}/" /proc/mounts; }
cleanup() {
  for m in sys proc dev; do
    umount -R "${root}/${m}" 2> /dev/null || umount -lR "${root}/${m}" 2> /dev/null || true
  done
  # --one-file-system: never into a mount that failed to go.
  if mounted; then
    echo "chroot_check: mounts remain under ${root}; left in place" >&2
  else
    rm -rf --one-file-system "${root}"
  fi
}
trap cleanup EXIT
[[ -e "${root}" ]] && cleanup

cp -a "${base}" "${root}" || die "cannot copy ${base}"
mount -t proc proc "${root}/proc"
mount --rbind /dev "${root}/dev" && mount --make-rslave "${root}/dev"
mount -t sysfs sys "${root}/sys"

# What the device tool sends: tracked and untracked-not-ignored files, then
# the carried bundle.
mkdir -p "${root}/src/main"
git ls-files -z -co --exclude-standard |
  tar --null -T - --ignore-failed-read -cf - 2> /dev/null | tar -xf - -C "${root}/src/main"
cp -a "${bundle}" "${root}/src/main/${bundle}"

# The release and glibc the bundle must start on (its own glibc is newer).
echo "=== the chroot: Debian $(cat "${root}/etc/debian_version") (${suite});" \
  "$(chroot "${root}" /lib/x86_64-linux-gnu/libc.so.6 | head -1)"
echo "=== the chroot has none of the build tools:"
for tool in bazel g++ gcc nvcc python3 pkg-config nvidia-smi; do
  chroot "${root}" /bin/bash -c "command -v ${tool}" > /dev/null &&
    die "${tool} is in the chroot: it is not bare"
  echo "  ${tool}: absent"
done

echo "=== tools/device_check.sh ${budget} in ${root}"
chroot "${root}" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root OUT=/out DEVICE_CHECK_AGENTS=16,64 DEVICE_CHECK_STEPS=20 \
  /bin/bash -c "cd /src/main && tools/device_check.sh ${budget}"
rc=$?

rm -rf "${results}"
mkdir -p "${results}"
cp -a "${root}/out/device_check/." "${results}/"
summary="${results}/summary.txt"
steps="$(wc -l < "${summary}" 2> /dev/null || echo 0)"
# One summary line per step of device_check.sh: host, kernels, profile,
# planner, job, delivery.
expected=6
echo "=== device_check exit ${rc}; ${steps} of ${expected} steps in ${summary}"
((steps == expected)) || die "device_check did not run to the end"
((rc == 0)) || die "a step failed (see ${results}/device_check.log)"
echo "chroot_check: passed"
