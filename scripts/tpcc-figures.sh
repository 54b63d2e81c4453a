#!/usr/bin/env bash
# TPC-C (Salt §8.1-8.2): medians of salt/acid, Salt Fig. 7 (latency against throughput as the
# clients grow, acid and salt) and Fig. 9 (incremental BASE-ification, base-txns 0..5 on salt),
# written to docs/figures/tpcc-*.{json,svg}.
# Usage: scripts/tpcc-figures.sh [RUNS] [SECONDS] [WAREHOUSES]
# SCALE_DIV (default 10) shrinks items and customers to keep the per-run load short; contention
# is on the warehouse and district rows, which the scale does not change.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECS=${2:-3}
W=${3:-2}
SCALE=${SCALE_DIV:-10}
CLIENTS=${CLIENTS:-32}
cargo build --release -q -p litmus-cli
B=target/release/litmus
OUT=docs/figures
mkdir -p "$OUT"
median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m}'; }
COMMON=(--warehouses "$W" --scale-div "$SCALE" --duration "$SECS" --quiet)
ratios=()
for r in $(seq 1 "$RUNS"); do
  out=$("$B" bench tpcc "${COMMON[@]}" --compare acid,salt --clients "$CLIENTS" --seed "$r")
  ratios+=("$(echo "$out" | tail -1 | awk '{print $NF}')")
done
printf 'tpcc warehouses=%s scale-div=%s clients=%s: salt/acid median %s (runs %s)\n' "$W" "$SCALE" "$CLIENTS" \
  "$(printf '%s\n' "${ratios[@]}" | median)" "${ratios[*]}"
if [ "${FIGURES:-1}" = 1 ]; then
  # A failed verification is printed in the table (and fails the command) but the figure is
  # still written; keep going to the next figure.
  "$B" bench tpcc "${COMMON[@]}" --compare acid,salt --sweep clients=1,2,4,8,16,32,64 --json "$OUT/tpcc-fig7.json" | tail -18 || true
  "$B" bench tpcc "${COMMON[@]}" --engine salt --clients "$CLIENTS" --sweep base-txns=0,1,2,3,4,5 --json "$OUT/tpcc-fig9.json" | tail -9 || true
fi
