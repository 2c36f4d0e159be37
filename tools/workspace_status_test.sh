#!/bin/bash
# tools/workspace_status.sh, Bazel's stamp of the commit: in a git checkout
# it prints the checkout's HEAD (the commit built), outside one "unknown".
set -euo pipefail
script="$(pwd)/tools/workspace_status.sh"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

fail() { echo "FAIL: $*" >&2; exit 1; }

# Outside any git checkout (GIT_CEILING_DIRECTORIES stops git looking above).
mkdir -p "$tmp/plain"
got=$(cd "$tmp/plain" && GIT_CEILING_DIRECTORIES="$tmp" "$script")
[ "$got" = "STABLE_DCP_GIT_COMMIT unknown" ] || fail "outside git: '$got'"

# A checkout with two commits: HEAD is the second.
if ! command -v git >/dev/null; then
  echo "SKIP the git half: git is not installed" >&2
  exit 0
fi
repo="$tmp/repo"
mkdir -p "$repo"
(
  cd "$repo"
  export GIT_CEILING_DIRECTORIES="$tmp"
  git init -q .
  git -c user.name=t -c user.email=t@t commit -q --allow-empty -m one
  git -c user.name=t -c user.email=t@t commit -q --allow-empty -m two
)
want=$(cd "$repo" && git rev-parse HEAD)
got=$(cd "$repo" && GIT_CEILING_DIRECTORIES="$tmp" "$script")
[ "$got" = "STABLE_DCP_GIT_COMMIT $want" ] || fail "in git: '$got', want $want"
[ "${#want}" -ge 40 ] || fail "'$want' is not a commit id"
echo "PASS"
