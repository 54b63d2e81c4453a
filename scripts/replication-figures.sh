#!/usr/bin/env bash
# What replication costs: throughput and CPU per committed transaction with 1 and 3 replicas
# per partition, each engine in one run (`--sweep replicas=1,3`, so the ratio is of one run),
# written to docs/figures/replication-*.txt (and .json):
#   replication-ycsb-<engine>   embedded, 3 nodes, YCSB (1 key, half reads), 16 clients
#   replication-tpcc-<engine>   embedded, 3 nodes, TPC-C 2 warehouses, scale-div 10, 16 clients
#   replication-sim-tpcc        simulated (`--runtime sim`, dedicated cores: 3 nodes x 4 cores),
#                               TPC-C 3 warehouses, acid and salt, 64 clients
# Usage: scripts/replication-figures.sh   (env: SECS per point, default 5; ENGINES, default
#   acid,salt,omid,granola,basic,coordfree,nocc; NO_BUILD=1 uses the release binary as is)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-5}
ENGINES=${ENGINES:-acid,salt,omid,granola,basic,coordfree,nocc}
[ "${NO_BUILD:-0}" = 1 ] || cargo build --release -q -p litmus-cli
B=${CARGO_TARGET_DIR:-target}/release/litmus
OUT=docs/figures
mkdir -p "$OUT"

run() { # NAME WORKLOAD ARGS...
  local name=$1 workload=$2
  shift 2
  "$B" bench "$workload" --quiet "$@" --json "$OUT/$name.json" | tee "$OUT/$name.txt"
}

for e in ${ENGINES//,/ }; do
  run "replication-ycsb-$e" ycsb --engine "$e" --nodes 3 --clients 16 --sweep replicas=1,3 --duration "$SECS"
  w=tpcc
  [ "$e" = nocc ] && continue             # TPC-C needs isolation nocc does not give
  [ "$e" = coordfree ] && w=tpcc-neworder # coordfree runs TPC-C's New-Order only
  [ "$e" = basic ] && w=basic-ycsb        # basic runs its own workload (formulas, column groups)
  run "replication-tpcc-$e" "$w" --engine "$e" --nodes 3 --clients 16 --sweep replicas=1,3 \
    --warehouses 2 --scale-div 10 --duration "$SECS"
done
run replication-sim-tpcc tpcc --runtime sim --compare acid,salt --nodes 3 --cores-per-node 4 --partitions 3 \
  --warehouses 3 --scale-div 10 --clients 64 --sweep replicas=1,3 --duration "$SECS" --warmup 1
