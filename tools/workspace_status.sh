#!/bin/sh
# Bazel's --workspace_status_command (.bazelrc): the commit the binaries are
# built from, stamped into dcp_scheduler_build_info / dcp_agent_build_info
# (common:build_info). Bazel runs it in the workspace root at every build; it
# must be quick and work offline. Outside a git checkout (a source tarball, a
# container build without .git) the commit is "unknown".
#
# A STABLE_ key: only the stamped targets rebuild, and only when the commit
# changes (Bazel compares stable-status.txt, not the volatile file).
commit=$(git rev-parse HEAD 2>/dev/null)
case "$commit" in
  *[!0-9a-f]* | "") commit=unknown ;;
esac
echo "STABLE_DCP_GIT_COMMIT $commit"
