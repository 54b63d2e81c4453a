#!/usr/bin/env bash
# BASIC §V (Wu, Yuan, You): Fig. 2 (a–d) and Table V on `litmus bench basic-ycsb`, written to
# docs/figures/basic-*:
#   basic-fig2ab.{json,svg}   read-heavy (90/10): throughput of base and basic vs partitions
#                             (the JSON also holds each point's latency percentiles: Fig. 2b)
#   basic-fig2cd.{json,svg}   write-heavy (50/50): the same (Figs. 2c, 2d)
#   basic-table5.txt          Table V: base's inconsistency ratio at 1, 2, 4, 8, 12 partitions
#                             (and basic's, which must be 0)
# Usage: scripts/basic-figures.sh [SECONDS]   (per point, default 10; PARTS="1 2 4 8 12";
#   NO_BUILD=1 uses the release binary as it is)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
PARTS=${PARTS:-"1 2 4 8 12"}
[ "${NO_BUILD:-0}" = 1 ] || cargo build --release -q -p litmus-cli
B=${CARGO_TARGET_DIR:-target}/release/litmus
OUT=docs/figures
mkdir -p "$OUT"
sweep=$(echo "$PARTS" | tr ' ' ',')
for mix in read-heavy write-heavy; do
  name=$([ "$mix" = read-heavy ] && echo fig2ab || echo fig2cd)
  "$B" bench basic-ycsb --quiet --compare base,basic --mix "$mix" --duration "$SECS" \
    --sweep "partitions=$sweep" --json "$OUT/basic-$name.json" --plot "$OUT/basic-$name.svg"
done
{
  echo "Table V: inconsistency ratio (inconsistent reads / reads), write-heavy, ${SECS}s per point"
  printf '%-10s %-14s %-14s\n' partitions base basic
  for p in $PARTS; do
    row=()
    for e in base basic; do
      r=$("$B" bench basic-ycsb --quiet --engine "$e" --mix write-heavy --partitions "$p" \
        --duration "$SECS" | awk '/^inconsistency:/ {print $2}')
      row+=("$r")
    done
    printf '%-10s %-14s %-14s\n' "$p" "${row[0]}" "${row[1]}"
  done
} | tee "$OUT/basic-table5.txt"
