#!/usr/bin/env bash
# Measures the core's headline figures: embedded YCSB throughput at no
# delay and at LAN delay, the cost of the WAL fsync policy, and a 3-process TCP cluster.
# Each configuration runs RUNS times; the medians are printed. Usage: scripts/core-figures.sh [RUNS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECS=${2:-5}
cargo build --release -q -p litmus-cli
B=target/release/litmus
OUT=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.0f", m}'; }
tput_of() { grep -o '"throughput": *[0-9.]*' "$1" | head -1 | grep -o '[0-9.]*$'; }

# Configurations run interleaved (one round = each configuration once), so drift on a shared
# machine hits them all alike; medians over RUNS rounds.
names=(); args=()
add() { names+=("$1"); shift; args+=("$*"); }
add "embedded, no delay"              --net-delay-us 0
add "embedded, LAN 100-250us"
add "embedded, LAN, WAL fsync=never"  --data-dir "$OUT/data" --fsync never
add "embedded, LAN, WAL fsync=always" --data-dir "$OUT/data" --fsync always
add "tcp, 3 processes on loopback"    --connect 127.0.0.1:17100,127.0.0.1:17101,127.0.0.1:17102

ports=(17100 17101 17102)
peers="\"127.0.0.1:17100\", \"127.0.0.1:17101\", \"127.0.0.1:17102\""
for n in 0 1 2; do
  printf 'node = %d\nlisten = "127.0.0.1:%d"\ndata_dir = "%s/tcp%d"\nengine = "nocc"\npartitions = 4\nfsync = "never"\npeers = [%s]\n' \
    "$n" "${ports[$n]}" "$OUT" "$n" "$peers" > "$OUT/node$n.toml"
  "$B" server --config "$OUT/node$n.toml" 2>/dev/null &
done
sleep 1

declare -A vals
for r in $(seq 1 "$RUNS"); do
  for i in "${!names[@]}"; do
    rm -rf "$OUT/data"
    # shellcheck disable=SC2086
    "$B" bench ycsb --quiet --duration "$SECS" --json "$OUT/r.json" ${args[$i]} >/dev/null
    vals[$i]+="$(tput_of "$OUT/r.json") "
  done
done
for i in "${!names[@]}"; do
  printf '%-34s median %8s txn/s   runs: %s\n' "${names[$i]}" "$(printf '%s\n' ${vals[$i]} | median)" "${vals[$i]}"
done
