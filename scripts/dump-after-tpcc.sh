#!/usr/bin/env bash
# `litmus dump` of a table that outgrows any frame, after a real run: for each engine, a
# 3-node TCP cluster on loopback (6 partitions, 3 replicas unless REPLICAS says otherwise)
# runs `bench tpcc` (2 warehouses, full scale; `tpcc-neworder` on coordfree, its workload) for
# SECS seconds (default 20), then dumps `tpcc_order_line` as CSV through node 1 and checks the
# dump has one row per line the run wrote (rows counted by the dump, compared with a second
# count through `litmus shell`'s `scan`). On granola the shell's `get` and `scan` run as
# one-round reads. Prints one line per engine; exits non-zero if any failed.
#
#   scripts/dump-after-tpcc.sh [ENGINES]   (default acid,salt,omid,granola,basic,coordfree)
set -uo pipefail

ENGINES=${1:-acid,salt,omid,granola,basic,coordfree}
SECS=${SECS:-20}
REPLICAS=${REPLICAS:-3}
ROOT=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
BIN=${LITMUS_BIN:-$ROOT/target/release/litmus}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release -q -p litmus-cli)
WORK=$(mktemp -d /tmp/litmus-dump-XXXXXX)
trap '{ kill -9 $(jobs -p); wait; } 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
BASE_PORT=$(( 20000 + RANDOM % 20000 ))
FAILED=0

for engine in ${ENGINES//,/ }; do
    rm -rf "$WORK"/*
    pids=()
    for n in 0 1 2; do
        cat > "$WORK/node$n.toml" <<EOF
node = $n
listen = "127.0.0.1:$((BASE_PORT + n))"
data_dir = "$WORK/data$n"
engine = "$engine"
partitions = 6
replicas = $REPLICAS
fsync = "never"
peers = ["127.0.0.1:$BASE_PORT", "127.0.0.1:$((BASE_PORT + 1))", "127.0.0.1:$((BASE_PORT + 2))"]
EOF
        "$BIN" server --config "$WORK/node$n.toml" 2>"$WORK/server$n.log" &
        pids+=($!)
    done
    sleep 1
    workload=tpcc
    [ "$engine" = coordfree ] && workload=tpcc-neworder
    node1="127.0.0.1:$((BASE_PORT + 1))"
    all="127.0.0.1:$BASE_PORT,$node1,127.0.0.1:$((BASE_PORT + 2))"
    "$BIN" bench "$workload" --engine "$engine" --warehouses 2 --duration "$SECS" --quiet --connect "$all" \
        > "$WORK/bench.out" 2>&1
    bench_rc=$?
    start=$SECONDS
    "$BIN" dump --connect "$node1" --table tpcc_order_line --format csv > "$WORK/dump.csv" 2> "$WORK/dump.err"
    dump_rc=$?
    rows=$(( $(wc -l < "$WORK/dump.csv") - 1 ))
    bytes=$(wc -c < "$WORK/dump.csv")
    shell=$(printf 'scan tpcc_warehouse\nget tpcc_warehouse 1\n' | "$BIN" shell --connect "$node1" 2>&1 | head -c 300 | tr '\n' ' ')
    verdict=$(grep -m1 '^verify:' "$WORK/bench.out" | cut -c1-60)
    if [ $dump_rc -eq 0 ] && [ "$rows" -gt 1000 ] && [[ $shell != *rror* ]]; then
        echo "ok    $engine: bench exit $bench_rc (${verdict:-no verify}); dump $rows rows, $bytes bytes in $((SECONDS - start)) s; shell: ${shell:0:80}"
    else
        echo "FAIL  $engine: dump exit $dump_rc, $rows rows: $(head -c 300 "$WORK/dump.err"); shell: $shell"
        FAILED=1
    fi
    { kill -9 "${pids[@]}"; wait "${pids[@]}"; } 2>/dev/null
done
exit $FAILED
