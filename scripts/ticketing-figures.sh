#!/usr/bin/env bash
# Salt §8 Fusion Ticket experiment (the `ticketing` workload): the median salt/acid ratio, and
# the data and SVG of Fig. 10 (throughput vs number of BASE-ified transactions) and of Fig. 8
# (a clients sweep: throughput and latency per engine; the JSON holds p50/p99 per point for a
# latency-vs-throughput plot).
# Usage: scripts/ticketing-figures.sh [RUNS] [SECONDS] [CLIENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECS=${2:-3}
CLIENTS=${3:-32}
cargo build --release -q -p litmus-cli
B=target/release/litmus
OUT=docs/figures
mkdir -p "$OUT"
median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m}'; }
ratios=()
for r in $(seq 1 "$RUNS"); do
  out=$("$B" bench ticketing --compare acid,salt --duration "$SECS" --clients "$CLIENTS" --quiet --seed "$r")
  echo "$out" | grep -E '^(ticketing on|throughput|verify)'
  ratios+=("$(echo "$out" | tail -1 | awk '{print $NF}')")
done
printf 'ticketing salt/acid median %s (runs %s)\n' "$(printf '%s\n' "${ratios[@]}" | median)" "${ratios[*]}"
if [ "${FIGURES:-1}" = 1 ]; then
  # Fig. 10: under acid --base-txns changes nothing (BASE procedures run as ACID): a reference line.
  "$B" bench ticketing --compare acid,salt --sweep base-txns=0,1,2,3 --duration "$SECS" --clients "$CLIENTS" \
    --quiet --json "$OUT/ticketing-fig10.json" | tail -10
  # Fig. 8: throughput and latency as the offered load (closed-loop clients) grows.
  "$B" bench ticketing --compare acid,salt --sweep clients=1,2,4,8,16,32,64 --duration "$SECS" --quiet \
    --json "$OUT/ticketing-fig8.json" | tail -16
fi
