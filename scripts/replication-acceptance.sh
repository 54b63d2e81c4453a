#!/usr/bin/env bash
# Replicated partitions on real processes: a 3-node TCP cluster on loopback, `replicas = 3`,
# `partitions = 6`, `fsync = "always"`, for each engine and workload below:
#
#   left-down  clients dial nodes 1 and 2; node 0 (where the Omid oracle starts) is killed
#              with `kill -9` KILL_AFTER seconds after the bench starts (default 4: loading or
#              early in the window) and left down
#   coordinator-down
#              clients dial all three nodes; node 0 is killed the same way and left down, so
#              its coordinator dies with transactions in flight and its clients fail over
#   all-down   (salt, tpcc) clients dial all three nodes; all three are killed 6 s in and
#              restarted a second later
#
# Each bench runs DURATION seconds (default 12) and must exit 0 with `verify: ok`. Prints one
# line per run and exits non-zero if any failed. Uses target/release/litmus (built if missing;
# LITMUS_BIN names another binary).
#
#   scripts/replication-acceptance.sh [left-down|coordinator-down|all-down|all]
set -uo pipefail

MODE=${1:-all}
DURATION=${DURATION:-12}
KILL_AFTER=${KILL_AFTER:-4}
ROOT=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
BIN=${LITMUS_BIN:-$ROOT/target/release/litmus}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release -q -p litmus-cli)
WORK=$(mktemp -d /tmp/litmus-repl-XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
BASE_PORT=$(( 20000 + RANDOM % 20000 ))
FAILED=0

config() { # node engine
    local n=$1 engine=$2
    cat > "$WORK/node$n.toml" <<EOF
node = $n
listen = "127.0.0.1:$((BASE_PORT + n))"
data_dir = "$WORK/data$n"
engine = "$engine"
partitions = 6
replicas = 3
fsync = "always"
peers = ["127.0.0.1:$BASE_PORT", "127.0.0.1:$((BASE_PORT + 1))", "127.0.0.1:$((BASE_PORT + 2))"]
EOF
}

declare -a PIDS
start() { # node
    "$BIN" server --config "$WORK/node$1.toml" 2>>"$WORK/server$1.log" &
    PIDS[$1]=$!
}

run() { # mode engine bench-args...
    local mode=$1 engine=$2; shift 2
    rm -rf "$WORK"/data* "$WORK"/*.log
    for n in 0 1 2; do config $n "$engine"; start $n; done
    sleep 1
    local connect="127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2))"
    [ "$mode" != left-down ] && connect="127.0.0.1:$BASE_PORT,$connect"
    local started=$SECONDS
    "$BIN" bench "$@" --engine "$engine" --duration "$DURATION" --quiet --connect "$connect" \
        > "$WORK/bench.out" 2>&1 &
    local bench=$!
    if [ "$mode" != all-down ]; then
        sleep "$KILL_AFTER"; { kill -9 "${PIDS[0]}"; wait "${PIDS[0]}"; } 2>/dev/null
    else
        sleep 6
        { kill -9 "${PIDS[0]}" "${PIDS[1]}" "${PIDS[2]}"; wait "${PIDS[0]}" "${PIDS[1]}" "${PIDS[2]}"; } 2>/dev/null
        sleep 1
        for n in 0 1 2; do start $n; done
    fi
    wait "$bench"; local rc=$?
    local verdict; verdict=$(grep -m1 '^verify:' "$WORK/bench.out" | cut -c1-100)
    local tput; tput=$(grep -m1 '^throughput:' "$WORK/bench.out" | cut -c1-60)
    if [ $rc -eq 0 ] && [[ $verdict == "verify: ok"* ]]; then
        echo "ok    $mode $engine $* | ${tput} | $((SECONDS - started)) s"
    else
        echo "FAIL  $mode $engine $* | exit $rc | ${verdict:-no verify line}"; tail -5 "$WORK/bench.out"
        FAILED=1
    fi
    { for n in 0 1 2; do kill -9 "${PIDS[$n]}"; done; wait; } 2>/dev/null
}

want() { [ "$MODE" = all ] || [ "$MODE" = "$1" ]; }
if want left-down; then
    run left-down omid ycsb-t
    run left-down acid ycsb --txn-size 4
    run left-down salt tpcc --warehouses 2 --scale-div 10
    run left-down granola tpcc --warehouses 2 --scale-div 10
    run left-down basic basic-ycsb
    run left-down coordfree tpcc-neworder --warehouses 2
fi
if want coordinator-down; then
    run coordinator-down acid ycsb --txn-size 4
    run coordinator-down salt tpcc --warehouses 2 --scale-div 10
fi
if want all-down; then
    run all-down salt tpcc --warehouses 2 --scale-div 10
fi
exit $FAILED
