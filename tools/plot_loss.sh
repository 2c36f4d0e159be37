#!/usr/bin/env bash
# Draws two dcp-train loss logs (--loss_log: one JSON object a line,
# {"step":S,"loss":L,...}) as two curves in one PNG, with gnuplot
# (gnuplot-nox, which tools/setup.sh installs).
#
#   tools/plot_loss.sh SINGLE.jsonl DCP.jsonl RANKS OUT.png
#
# SINGLE.jsonl is labelled "single process", DCP.jsonl "dcp, RANKS ranks".
# The single-process curve is a wide line and the dcp one points on top of
# it, so that both show where they agree. Also prints the largest relative
# difference of the two losses at a step, |dcp - single| / |single|, over
# the steps both logs have.
set -euo pipefail

usage() {
  echo "usage: $0 SINGLE.jsonl DCP.jsonl RANKS OUT.png" >&2
  exit 2
}

(($# == 4)) || usage
single="$1" dcp="$2" ranks="$3" out="$4"
[[ "${ranks}" =~ ^[1-9][0-9]*$ ]] || usage
for log in "${single}" "${dcp}"; do
  [[ -s "${log}" ]] || {
    echo "plot_loss: ${log}: no such log, or empty" >&2
    exit 1
  }
done
command -v gnuplot >/dev/null || {
  echo "plot_loss: gnuplot is missing (tools/setup.sh installs gnuplot-nox)" >&2
  exit 1
}

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
# "step loss" columns from the JSON lines dcp-train writes (its keys never
# nest, and it prints numbers as JSON numbers).
columns() {
  sed -nE 's/.*"step":([0-9]+).*"loss":([-+0-9.eE]+).*/\1 \2/p' "$1"
}
columns "${single}" >"${tmp}/single.dat"
columns "${dcp}" >"${tmp}/dcp.dat"
for f in single dcp; do
  [[ -s "${tmp}/${f}.dat" ]] || {
    echo "plot_loss: no {\"step\",\"loss\"} lines in the ${f} log" >&2
    exit 1
  }
done

if [[ "$(wc -l <"${tmp}/single.dat")" != "$(wc -l <"${tmp}/dcp.dat")" ]]; then
  echo "plot_loss: warning: the logs have different numbers of steps" >&2
fi
paste -d ' ' "${tmp}/single.dat" "${tmp}/dcp.dat" | awk '
  NF < 4 { next }  # Past the end of the shorter log.
  $1 != $3 {
    printf "plot_loss: line %d: step %s vs %s\n", NR, $1, $3 > "/dev/stderr"
    bad = 1
    exit 1
  }
  {
    d = ($4 - $2) / $2
    if (d < 0) d = -d
    if (n++ == 0 || d > worst) { worst = d; at = $1 }
  }
  END {
    if (bad) exit 1
    printf "plot_loss: %d steps; max relative loss difference %.3g (step %d)\n", n, worst, at
  }'

gnuplot <<GNUPLOT
set terminal pngcairo size 960,540 font "sans,11"
set output "${out}"
set title "dcp-train: loss at each step"
set xlabel "step"
set ylabel "loss (mean over the step's tokens, nats)"
set key top right
set grid
plot "${tmp}/single.dat" using 1:2 with lines lw 4 lc rgb "#9ecae1" \
       title "single process", \
     "${tmp}/dcp.dat" using 1:2 with points pt 7 ps 0.7 lc rgb "#d62728" \
       title "dcp, ${ranks} ranks"
GNUPLOT
echo "plot_loss: wrote ${out}"
