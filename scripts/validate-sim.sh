#!/usr/bin/env bash
# The simulator against reality. For ycsb on nocc, tpcc on acid and tpcc on salt at
# the embedded default (2 nodes, 4 partitions, LAN delay 100-250 µs, 8 and 32 clients), runs the
# embedded cluster and the simulator with the same settings and prints their throughput side by
# side, with what each spent per committed transaction (the embedded process's CPU, cluster and
# client threads together; the simulated cores) and the median latency.
#
# The embedded runtime drives all machines on 2 worker threads (--workers 2), so the simulated
# cluster has 2 nodes x 1 core. Target: simulated within ±25% of real.
# Usage: scripts/validate-sim.sh [SECONDS]
#   COSTS=path.toml   the cost table (default: the committed one)
#   SCALE_DIV=N       shrink TPC-C's items and customers (default 1: full scale)
#   LITMUS=path       the binary (default: build target/release/litmus)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
SCALE=${SCALE_DIV:-1}
if [ -z "${LITMUS:-}" ]; then
  cargo build --release -q -p litmus-cli
  LITMUS=${CARGO_TARGET_DIR:-target}/release/litmus
fi
SIM=(--runtime sim --cores-per-node 1)
if [ -n "${COSTS:-}" ]; then SIM+=(--costs "$COSTS"); fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { jq -r "$1" "$2"; }
printf '%-5s %-5s %7s | %10s %10s %7s %6s | %9s %9s %10s | %7s %7s\n' \
  workload engine clients real_txn/s sim_txn/s sim/real ±25% real_cpu sim_cpu real_cores real_p50 sim_p50
for case in ycsb:nocc tpcc:acid tpcc:salt; do
  w=${case%%:*}
  e=${case##*:}
  extra=()
  if [ "$w" = tpcc ]; then extra=(--scale-div "$SCALE"); fi
  for c in 8 32; do
    common=(bench "$w" --engine "$e" --nodes 2 --partitions 4 --clients "$c" --duration "$SECS" --quiet "${extra[@]}")
    "$LITMUS" "${common[@]}" --json "$tmp/real.json" > "$tmp/real.txt"
    "$LITMUS" "${common[@]}" "${SIM[@]}" --json "$tmp/sim.json" > "$tmp/sim.txt"
    real=$(field .throughput "$tmp/real.json")
    sim=$(field .throughput "$tmp/sim.json")
    ratio=$(awk -v a="$real" -v b="$sim" 'BEGIN { printf "%.2f", (a > 0) ? b / a : 0 }')
    ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.75 && r <= 1.25) ? "yes" : "NO" }')
    real_cpu=$(field '.cpu_us_per_txn // 0' "$tmp/real.json")
    cores=$(awk -v t="$real" -v c="$real_cpu" 'BEGIN { printf "%.2f", t * c / 1e6 }')
    printf '%-5s %-5s %7s | %10.1f %10.1f %7s %6s | %9.0f %9.0f %10s | %7s %7s\n' "$w" "$e" "$c" "$real" "$sim" \
      "$ratio" "$ok" "$real_cpu" "$(field '.cpu_us_per_txn // 0' "$tmp/sim.json")" "$cores" \
      "$(field .latency_all.p50_us "$tmp/real.json")" "$(field .latency_all.p50_us "$tmp/sim.json")"
  done
done
echo "cpu: µs per committed txn (real: the whole process, cluster and clients; sim: the simulated cores);"
echo "real_cores: cores the real process used (txn/s x cpu), of the machine's $(nproc); p50 in µs"
