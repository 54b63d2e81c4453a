#!/usr/bin/env bash
# Scale-out figures in virtual time (`litmus bench --runtime sim`, the real engine state
# machines on the deterministic simulator, each step charged its cost from a committed cost
# table), written to docs/figures/scaleout-*.{json,svg} with each run's table in a .txt:
#   scaleout-ycsb-nodes   YCSB throughput against node count (1 -> 64 nodes) for every engine:
#                         uniform keys, 4 keys per transaction (most span partitions), half
#                         read-only, $PER_NODE clients per node, $CORES cores per node, one
#                         partition per node (at least 4): the scaling curve each design allows.
#                         Costs: crates/runtime/costs/ycsb-4keys.toml, measured by `litmus
#                         calibrate` on this very workload (its `command` field says how)
#   scaleout-salt-fig7    Salt Fig. 7 at the paper's size: TPC-C, 10 warehouses on 10 nodes of
#                         4 cores (one partition per node), ACID against Salt (new-order and
#                         payment BASE), clients 50..400; last line `ratio of peaks salt/acid`.
#                         Without replication (the paper's partitions are three-way replicated;
#                         replica groups are not implemented). Costs: the default table
# Usage: scripts/scaleout-figures.sh   (env: YCSB_SECS virtual seconds per YCSB point, default
#   0.2, after as much warmup/4; TPCC_SECS per TPC-C point, default 5, after 1 s of warmup;
#   SCALE_DIV for TPC-C, default 1 (full scale); NODES default "1,2,4,8,16,32,64"; PER_NODE
#   default 64; CORES default 2; ENGINES default every registered engine; ONLY=PREFIX runs the
#   figures whose name starts with it; NO_BUILD=1 uses the release binary as it is). Simulated
#   figures are deterministic: the same flags and seed give the same numbers on any machine;
#   only the wall time depends on it.
set -euo pipefail
cd "$(dirname "$0")/.."
YCSB_SECS=${YCSB_SECS:-0.2}
TPCC_SECS=${TPCC_SECS:-5}
SCALE_DIV=${SCALE_DIV:-1}
NODES=${NODES:-1,2,4,8,16,32,64}
PER_NODE=${PER_NODE:-64}
CORES=${CORES:-2}
ENGINES=${ENGINES:-nocc,acid,salt,salt-local,omid,granola,granola-locking,sinfonia,basic,base,coordfree}
ONLY=${ONLY:-scaleout-}
[ "${NO_BUILD:-0}" = 1 ] || cargo build --release -q -p litmus-cli
B=${CARGO_TARGET_DIR:-target}/release/litmus
OUT=docs/figures
mkdir -p "$OUT"

run() { # NAME WORKLOAD ARGS...: one simulated sweep, its table kept beside its figure
  local name=$1 workload=$2
  shift 2
  case "$name" in "$ONLY"*) ;; *) return 0 ;; esac
  "$B" bench "$workload" --runtime sim --quiet "$@" --json "$OUT/$name.json" --plot "$OUT/$name.svg" \
    | tee "$OUT/$name.txt"
}

run scaleout-ycsb-nodes ycsb --costs crates/runtime/costs/ycsb-4keys.toml --compare "$ENGINES" --sweep "nodes=$NODES" --clients-per-node "$PER_NODE" \
  --cores-per-node "$CORES" --distribution uniform --txn-size 4 --read-ratio 0.5 --records 100000 \
  --duration "$YCSB_SECS" --warmup "$(awk "BEGIN { print $YCSB_SECS / 4 }")"
run scaleout-salt-fig7 tpcc --compare acid,salt --sweep clients=50,100,200,400 --nodes 10 \
  --cores-per-node 4 --warehouses 10 --scale-div "$SCALE_DIV" --duration "$TPCC_SECS" --warmup 1
