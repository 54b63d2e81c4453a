#!/usr/bin/env bash
# What replicating coordinators and engine roles costs per committed transaction: two builds
# (BEFORE: partitions replicated, coordinators and roles alone on their nodes; AFTER: all
# replicated), the same embedded cluster (3 nodes, `--replicas 3`, 16 clients, LAN delay, logs
# in a data directory without fsync so that log bytes are counted), RUNS runs each (default
# 3), medians of throughput, CPU, messages and log bytes per committed transaction. Prints a
# markdown table.
#
#   scripts/replicated-roles-cost.sh BEFORE_BIN AFTER_BIN     (env: SECS per run, default 5)
set -euo pipefail
BEFORE=$1 AFTER=$2
SECS=${SECS:-5}
RUNS=${RUNS:-3}
WORK=$(mktemp -d /tmp/litmus-cost-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

measure() { # BIN ENGINE WORKLOAD ARGS... -> "txn/s cpu msgs bytes" medians
    local bin=$1 engine=$2 workload=$3; shift 3
    for i in $(seq "$RUNS"); do
        rm -rf "$WORK/data"
        "$bin" bench "$workload" --engine "$engine" --nodes 3 --replicas 3 --clients 16 --duration "$SECS" \
            --data-dir "$WORK/data" --fsync never --quiet --json "$WORK/r$i.json" "$@" > /dev/null
    done
    for f in throughput cpu_us_per_txn msgs_per_txn log_bytes_per_txn; do
        for i in $(seq "$RUNS"); do jq ".$f" "$WORK/r$i.json"; done | median
    done | paste -sd' '
}

echo "| engine | workload | txn/s before | txn/s after | CPU µs/txn before | after | msgs/txn before | after | log B/txn before | after |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
row() { # ENGINE WORKLOAD ARGS...
    local engine=$1 workload=$2; shift 2
    read -r t0 c0 m0 b0 <<< "$(measure "$BEFORE" "$engine" "$workload" "$@")"
    read -r t1 c1 m1 b1 <<< "$(measure "$AFTER" "$engine" "$workload" "$@")"
    printf "| %s | %s %s | %.0f | %.0f | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f |\n" \
        "$engine" "$workload" "$*" "$t0" "$t1" "$c0" "$c1" "$m0" "$m1" "$b0" "$b1"
}
row acid ycsb --txn-size 4
row salt tpcc --warehouses 2 --scale-div 10
row omid ycsb
row granola tpcc --warehouses 2 --scale-div 10
row sinfonia tpcc --warehouses 2 --scale-div 10
row basic basic-ycsb
row coordfree tpcc-neworder --warehouses 2
