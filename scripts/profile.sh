#!/usr/bin/env bash
# Where a benchmark's CPU goes, by component: samples the whole process with perf and adds up
# the self time of each sampled function by the crate (or library) it belongs to.
#
#   scripts/profile.sh BENCH_ARGS...
#   scripts/profile.sh tpcc --warehouses 2 --scale-div 10 --engine acid --clients 16 --net-delay-us 0
#
# Prints the bench's own report, then one line per component: its share of the samples and
# that share of the `cpu:` line (µs per committed transaction). Components: each litmus crate
# (coordinator and partition code of an engine are in the engine's crate, the generic
# coordinator in litmus_protocol, the node loop, queues and logs in litmus_runtime and
# litmus_storage, raft in litmus_replication/raft), the allocator, the kernel (system calls,
# page faults, wake-ups) and the rest of the standard library (generic code our crates
# instantiate, iterator folds and `Arc` clones, lands there too). The load and verify phases
# are sampled too: compare shares between runs of one workload, and read the bench's `cpu:`
# line (measured window only) for the absolute cost. Environment: FREQ (Hz, default 999),
# BIN (default target/release/litmus, built first), OUT (keeps perf.data there).
set -euo pipefail
ROOT=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p litmus-cli)
    BIN=$ROOT/target/release/litmus
fi
DATA=${OUT:-$(mktemp -d)/perf.data}
REPORT=$(mktemp)
perf record -q -F "${FREQ:-999}" -o "$DATA" -- "$BIN" bench "$@" | tee "$REPORT"
cpu=$(sed -n 's/^cpu: \([0-9.]*\) µs.*/\1/p' "$REPORT" | head -1)
echo
echo " share  component                        µs/txn (of cpu: ${cpu:-?})"
perf report -q -i "$DATA" --no-children --sort sym --percent-limit 0 2>/dev/null |
    awk -v cpu="${cpu:-0}" '
    /%/ {
        pct = $1; sub(/%/, "", pct)
        line = $0
        if (line ~ /\[k\]/) comp = "kernel"
        else if (line ~ /mi_|mimalloc|_mi_/) comp = "allocator (mimalloc)"
        else if (match(line, /litmus_[a-z_]+/)) comp = substr(line, RSTART, RLENGTH)
        else if (line ~ /raft::|raft_proto|protobuf/) comp = "raft"
        else if (line ~ /hashbrown|core::|alloc::|std::|memcpy|memmove|memset|memcmp|__libc|pthread/) comp = "std and libc (copies, maps)"
        else if (line ~ /postcard|serde/) comp = "serde (encoding)"
        else if (line ~ /crossbeam|parking_lot|tokio/) comp = "channels and locks"
        else comp = "other"
        share[comp] += pct
    }
    END {
        for (c in share) printf "%5.1f%%  %-32s %7.1f\n", share[c], c, share[c] * cpu / 100
    }' | sort -rn
rm -f "$REPORT"
[ -z "${OUT:-}" ] && rm -rf "$(dirname "$DATA")"
exit 0
