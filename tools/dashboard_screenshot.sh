#!/usr/bin/env bash
# Screenshot of the Grafana dashboard (deploy/grafana/dcp.json) over real
# data, without Grafana (none is packaged for Debian 12):
#
#   1. builds dcp-scheduler, dcp-agent and dcp-ctl;
#   2. deploy/grafana/live_job.py runs a short live job on 127.0.0.1: the
#      scheduler and DCP_SCREENSHOT_WORLD (default 4) execute-mode agents
#      training a tiny model on the CPU over data/lengths/longctx_wlb.txt
#      (its long samples make the planner split some over several ranks),
#      scraped every second by Debian's Prometheus with
#      deploy/prometheus/alerts.yml loaded, for DCP_SCREENSHOT_STEPS
#      (default 300) completed steps;
#   3. serves deploy/grafana/dashboard.html, which runs the dashboard's own
#      queries on that Prometheus and draws them, and shoots it with
#      headless Chromium (Debian's `chromium`, tools/setup.sh screenshot);
#   4. writes the PNG to $1 (default docs/dashboard.png), then drains the
#      job and stops everything.
#
# About two minutes on two cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/setup.sh build screenshot
out="$(realpath -m "${1:-docs/dashboard.png}")"
world="${DCP_SCREENSHOT_WORLD:-4}"
steps="${DCP_SCREENSHOT_STEPS:-300}"

bazel build --curses=no --color=no \
  //scheduler/server:dcp-scheduler //worker_agent:dcp-agent //scheduler/server:dcp-ctl
bin="$(bazel info bazel-bin 2>/dev/null)"

profile="$(mktemp -d /tmp/dcp-chromium.XXXXXX)"
trap 'rm -rf "${profile}"' EXIT

# Run by live_job.py with the page's URL in DASHBOARD_URL. The virtual time
# budget lets the page's queries and drawing finish before the shot.
# shellcheck disable=SC2016  # Expanded by that bash, not this one.
shoot='exec chromium --headless --no-sandbox --disable-gpu \
  --disable-background-networking --disable-component-update --disable-sync \
  --no-first-run --hide-scrollbars --user-data-dir="$0" \
  --virtual-time-budget=30000 --window-size=1600,1520 \
  --screenshot="$1" "${DASHBOARD_URL}"'

/usr/bin/python3 deploy/grafana/live_job.py --bin="${bin}" --world="${world}" \
  --steps="${steps}" --trace=data/lengths/longctx_wlb.txt \
  --window=32768 --tokens_per_step=65536 \
  -- bash -c "${shoot}" "${profile}" "${out}"
echo "dashboard_screenshot: wrote ${out} ($(stat -c %s "${out}") bytes)"
