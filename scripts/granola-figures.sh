#!/usr/bin/env bash
# Granola §6 (Cowling & Liskov, ATC'12): Figs. 8–13 on `litmus bench`, written to
# docs/figures/granola-*.{json,svg}:
#   granola-fig8    granola-counters, 10% distributed: throughput vs partitions (2, 4, 8)
#   granola-fig9    granola-counters, independent: throughput vs distributed fraction, granola vs
#                   nocc (Fig. 9's "no consistency" variant: the timestamp-order cost)
#   granola-fig10   granola-counters, 100% distributed on 2 partitions, --exec-cost-us 100:
#                   throughput vs --lock-cost-us (a lock per read and per write: 2 per fragment)
#   granola-fig11   granola-counters, 100% coordinated on 2 partitions: throughput vs conflict rate
#   granola-fig12   tpcc (one-round form): throughput vs warehouses (1, 2, 4) on 4 partitions, a
#                   warehouse per partition (partitions without one hold only ITEM)
#   granola-fig13   tpcc-neworder, 2 warehouses on 2 partitions: throughput vs remote fraction
#   granola-tpcc-durable  tpcc, 4 warehouses on 4 partitions, logs fsynced at every group
#                   commit (the paper's stable log writes): granola-locking vs granola vs clients
# and in virtual time (`--runtime sim`: deterministic, the same numbers on any machine; 1 s
# points after 0.5 s of warmup, whatever SECONDS is), TPC-C on 4 warehouses, 4 partitions:
#   granola-tpcc-sim        4 nodes x 4 cores (a repository per node, as in the paper), free logs
#   granola-tpcc-sim-sync   the same, each log sync costing 300 µs (a replication round: the
#                           paper's repositories log stably to their replicas before replying)
#   granola-tpcc-sim-2core  the embedded runs' shape, 2 nodes x 1 core: checks the simulator
#                           against the real runs on this machine's 2 cores
# The machine has 2 cores shared with builds: points are short and noisy (see README, Granola).
# Usage: scripts/granola-figures.sh [SECONDS]   (per point, default 3; NO_BUILD=1 uses the
#   release binary as it is)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3}
[ "${NO_BUILD:-0}" = 1 ] || cargo build --release -q -p litmus-cli
B=${CARGO_TARGET_DIR:-target}/release/litmus
OUT=docs/figures
mkdir -p "$OUT"
G=granola-locking,granola,sinfonia
fig() { local name=$1; shift; "$B" bench "$@" --quiet --duration "$SECS" \
  --json "$OUT/granola-$name.json" --plot "$OUT/granola-$name.svg"; }
fig fig8 granola-counters --engine granola --distributed 0.1 --sweep partitions=2,4,8
fig fig9 granola-counters --compare nocc,granola --partitions 2 --sweep distributed=0,0.25,0.5,0.75,1
fig fig10 granola-counters --compare "$G" --partitions 2 --distributed 1 --exec-cost-us 100 \
  --sweep lock-cost-us=0,10,20,35,50
fig fig11 granola-counters --compare "$G" --partitions 2 --distributed 1 --coordinated \
  --sweep conflict=0.001,0.01,0.1,0.5,1
fig fig12 tpcc --compare "$G" --partitions 4 --sweep warehouses=1,2,4
fig fig13 tpcc-neworder --compare "$G" --warehouses 2 --partitions 2 --sweep distributed=0,0.25,0.5,0.75,1
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
fig tpcc-durable tpcc --compare granola-locking,granola --warehouses 4 --partitions 4 \
  --fsync always --data-dir "$DATA" --sweep clients=64,128,256,512,1024
simfig() { local name=$1; shift; "$B" bench tpcc --runtime sim --quiet --warehouses 4 --partitions 4 \
  --compare granola-locking,granola --duration 1 --warmup 0.5 "$@" \
  --json "$OUT/granola-$name.json" --plot "$OUT/granola-$name.svg" | tee "$OUT/granola-$name.txt"; }
simfig tpcc-sim --nodes 4 --cores-per-node 4 --sweep clients=64,256,1024
simfig tpcc-sim-sync --nodes 4 --cores-per-node 4 --sync-latency-us 300 --sweep clients=64,256,1024
simfig tpcc-sim-2core --nodes 2 --cores-per-node 1 --sweep clients=16,64,256
