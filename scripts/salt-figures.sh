#!/usr/bin/env bash
# Salt §8.3 microbenchmarks: medians of salt/acid and salt-local/acid at high contention, and the
# three figures (Figs. 11–13) as SVG. Usage: scripts/salt-figures.sh [RUNS] [SECONDS] [CLIENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECS=${2:-5}
CLIENTS=${3:-32}
cargo build --release -q -p litmus-cli
B=target/release/litmus
OUT=bench-results
mkdir -p "$OUT"
median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m}'; }
for spec in "salt-contention --rows 10" "salt-position --after 9" "salt-rw --read-fraction 0.5"; do
  salt=(); local_=()
  for r in $(seq 1 "$RUNS"); do
    # shellcheck disable=SC2086
    out=$("$B" bench $spec --compare acid,salt,salt-local --duration "$SECS" --clients "$CLIENTS" --quiet --seed "$r")
    salt+=("$(echo "$out" | grep '^ratio salt/acid' | awk '{print $NF}')")
    local_+=("$(echo "$out" | grep '^ratio salt-local/acid' | awk '{print $NF}')")
  done
  printf '%-32s salt/acid median %s (runs %s)   salt-local/acid median %s (runs %s)\n' "$spec" \
    "$(printf '%s\n' "${salt[@]}" | median)" "${salt[*]}" "$(printf '%s\n' "${local_[@]}" | median)" "${local_[*]}"
done
if [ "${FIGURES:-1}" = 1 ]; then
  "$B" bench salt-contention --compare acid,salt,salt-local --sweep rows=10,100,1000,10000 --duration "$SECS" --clients "$CLIENTS" --quiet --json "$OUT/fig11.json" | tail -14
  "$B" bench salt-position --compare acid,salt,salt-local --sweep after=0,3,6,9 --duration "$SECS" --clients "$CLIENTS" --quiet --json "$OUT/fig12.json" | tail -14
  "$B" bench salt-rw --compare acid,salt,salt-local --sweep read-fraction=0,0.5,0.95 --duration "$SECS" --clients "$CLIENTS" --quiet --json "$OUT/fig13.json" | tail -11
fi
