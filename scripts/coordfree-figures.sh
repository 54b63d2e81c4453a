#!/usr/bin/env bash
# Coordination avoidance §6 (Bailis et al., VLDB'15): New-Order on `coordfree` against `acid`
# (2PL), written to docs/figures/coordfree-*.{json,svg} with each run's table in a .txt:
#   coordfree-fig5-embedded     Fig. 5 on the embedded runtime: 8 partitions on 2 nodes, clients
#                               8, 32, 128; last line `ratio of peaks coordfree/acid` (2 cores)
#   coordfree-fig5-sim          Fig. 5 on the simulator: 8 nodes x $PAPER_CORES cores (the
#                               paper's cr1.8xlarge servers have 32 vCPUs), 8 partitions,
#                               clients swept to saturation (256, 1024, 4096), virtual time
#   coordfree-distributed       the distribution sweep (0 -> 100% of New-Orders with a remote
#                               line), 8 nodes, clients routed to their home warehouse's node;
#                               `loss of ENGINE from distributed=0 to distributed=1` per engine
#   coordfree-distributed-sim   the same on the simulator (8 nodes x $PAPER_CORES cores), each
#                               engine at its own peak per point (best of $PEAK_CLIENTS clients)
#   coordfree-fig6              Fig. 6: coordfree per-node throughput, 1 to 200 simulated
#                               nodes, $PER_NODE clients per node (also -per-node.svg)
# Simulated runs use the cost table crates/runtime/costs/coordfree.toml (its `command` field
# says how it was measured).
# Usage: scripts/coordfree-figures.sh [SECONDS]   (embedded seconds per point, default 3;
#   SIM_SECS virtual seconds per simulated point (and of warmup), default 0.03; PAPER_CORES per
#   simulated node for Fig. 5 and the distribution sweep, default 32; PEAK_CLIENTS the client
#   counts each simulated distribution point takes its peak over, default 128,512,2048; CORES per simulated node
#   for Fig. 6, default 2; NODES for Fig. 6, default "1 2 5 10 25 50 100 200"; ONLY=PREFIX runs the
#   figures whose name starts with it; NO_BUILD=1 uses the release binary as it is). The
#   simulator runs ~40k events/s (~200 per New-Order): keep simulated points short.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3}
SIM_SECS=${SIM_SECS:-0.03}
PAPER_CORES=${PAPER_CORES:-32}
CORES=${CORES:-2}
PER_NODE=${PER_NODE:-4}
PEAK_CLIENTS=${PEAK_CLIENTS:-128,512,2048}
NODES=${NODES:-"1 2 5 10 25 50 100 200"}
ONLY=${ONLY:-coordfree-}
COSTS=crates/runtime/costs/coordfree.toml
[ "${NO_BUILD:-0}" = 1 ] || cargo build --release -q -p litmus-cli
B=${CARGO_TARGET_DIR:-target}/release/litmus
OUT=docs/figures
mkdir -p "$OUT"
SIM=(--runtime sim --costs "$COSTS" --warmup "$SIM_SECS" --duration "$SIM_SECS")
PAPER=("${SIM[@]}" --cores-per-node "$PAPER_CORES")
SIM+=(--cores-per-node "$CORES")

run() { # NAME ARGS...: one sweep, its table kept beside its figure
  local name=$1
  shift
  case "$name" in "$ONLY"*) ;; *) return 0 ;; esac
  "$B" bench tpcc-neworder --quiet "$@" --json "$OUT/$name.json" --plot "$OUT/$name.svg" | tee "$OUT/$name.txt"
}

run coordfree-fig5-embedded --partitions 8 --warehouses 8 --compare acid,coordfree \
  --sweep clients=8,32,128 --duration "$SECS"
run coordfree-fig5-sim "${PAPER[@]}" --nodes 8 --partitions 8 --warehouses 8 --home-routing \
  --compare acid,coordfree --sweep clients=32,64,128,256,1024,4096
run coordfree-distributed --nodes 8 --partitions 8 --warehouses 8 --home-routing --clients 32 \
  --compare acid,coordfree --sweep distributed=0,0.25,0.5,0.75,1.0 --duration "$SECS"
run coordfree-distributed-sim "${PAPER[@]}" --nodes 8 --partitions 8 --warehouses 8 --home-routing \
  --peak-clients "$PEAK_CLIENTS" --compare acid,coordfree --sweep distributed=0,0.25,0.5,0.75,1.0
run coordfree-fig6 "${SIM[@]}" --engine coordfree --home-routing --clients-per-node "$PER_NODE" \
  --scale-div 30 --sweep "nodes=$(echo "$NODES" | tr ' ' ',')"
