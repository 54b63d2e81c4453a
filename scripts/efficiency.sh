#!/usr/bin/env bash
# CPU cost per committed transaction: an older commit against this working tree.
#
#   scripts/efficiency.sh [OLD_COMMIT] [RUNS]
#
# Builds OLD_COMMIT (default 6ef6ad0, a baseline without the hot-path work) in a git worktree under
# /tmp and this working tree, then runs both binaries on the same workloads, alternating old
# and new so that a change in the machine's load hits both alike:
#
#   tpcc-acid   litmus bench tpcc --warehouses 2 --scale-div 10 --engine acid --clients 16 --net-delay-us 0
#   tpcc-salt   the same with --engine salt
#   ycsb-nocc   litmus bench ycsb --engine nocc --net-delay-us 0
#
# RUNS (default 3) runs each, and prints the medians of the `cpu:` line (process user+sys CPU
# per committed transaction over the measured window) and of throughput, old vs new, in one
# table. CPU per transaction is the figure to compare: it changes little with other load on
# the machine, throughput changes a lot. Environment: DURATION (s, default 10 for TPC-C, half
# of it for YCSB), KEEP=1 keeps the old worktree.
set -euo pipefail

OLD=${1:-6ef6ad0}
RUNS=${2:-3}
DURATION=${DURATION:-10}
YCSB_DURATION=$(( DURATION / 2 > 0 ? DURATION / 2 : 1 ))
ROOT=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
OLD_SHA=$(git -C "$ROOT" rev-parse --short "$OLD")
OLD_TREE=/tmp/litmus-eff-old-$OLD_SHA
OLD_TARGET=/tmp/litmus-eff-old-target
NEW_TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

echo "== building old ($OLD_SHA) in $OLD_TREE" >&2
if [ ! -d "$OLD_TREE" ]; then
    git -C "$ROOT" worktree add --detach "$OLD_TREE" "$OLD_SHA" >&2
fi
(cd "$OLD_TREE" && CARGO_TARGET_DIR=$OLD_TARGET cargo build --release -q -p litmus-cli) >&2
echo "== building new ($(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo '+dirty'))" >&2
(cd "$ROOT" && CARGO_TARGET_DIR=$NEW_TARGET cargo build --release -q -p litmus-cli) >&2
OLD_BIN=$OLD_TARGET/release/litmus
NEW_BIN=$NEW_TARGET/release/litmus

cleanup() {
    if [ "${KEEP:-0}" != 1 ]; then
        git -C "$ROOT" worktree remove --force "$OLD_TREE" >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

workload_args() {
    case $1 in
        tpcc-acid) echo "tpcc --warehouses 2 --scale-div 10 --engine acid --clients 16 --net-delay-us 0 --duration $DURATION" ;;
        tpcc-salt) echo "tpcc --warehouses 2 --scale-div 10 --engine salt --clients 16 --net-delay-us 0 --duration $DURATION" ;;
        ycsb-nocc) echo "ycsb --engine nocc --net-delay-us 0 --duration $YCSB_DURATION" ;;
    esac
}

# One run: prints "cpu_us txn_per_s" (cpu "nan" when the binary prints no cpu: line).
one_run() {
    local bin=$1 w=$2 out
    # shellcheck disable=SC2046
    out=$("$bin" bench $(workload_args "$w") 2>&1) || { echo "run failed: $bin bench $(workload_args "$w")" >&2; echo "$out" | tail -5 >&2; echo "nan nan"; return; }
    if ! echo "$out" | grep -q '^verify: ok'; then
        echo "verification failed: $bin bench $(workload_args "$w")" >&2
        echo "$out" | grep '^verify' >&2
    fi
    local cpu tput
    cpu=$(echo "$out" | sed -n 's/^cpu: \([0-9.]*\) µs.*/\1/p' | head -1)
    tput=$(echo "$out" | sed -n 's/^throughput: \([0-9.]*\) txn\/s.*/\1/p' | head -1)
    echo "${cpu:-nan} ${tput:-nan}"
}

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

WORKLOADS="tpcc-acid tpcc-salt ycsb-nocc"
RESULTS=$(mktemp)
for w in $WORKLOADS; do
    for i in $(seq 1 "$RUNS"); do
        for side in old new; do
            bin=$OLD_BIN
            [ $side = new ] && bin=$NEW_BIN
            r=$(one_run "$bin" "$w")
            echo "$w $side $r" >>"$RESULTS"
            echo "  $w $side run $i: cpu ${r% *} µs/txn, ${r#* } txn/s" >&2
        done
    done
done

printf '\n%-10s %14s %14s %8s %12s %12s %8s\n' workload "old cpu µs/txn" "new cpu µs/txn" "cpu x" "old txn/s" "new txn/s" "tput x"
for w in $WORKLOADS; do
    oc=$(awk -v w="$w" '$1==w && $2=="old" {print $3}' "$RESULTS" | median)
    nc=$(awk -v w="$w" '$1==w && $2=="new" {print $3}' "$RESULTS" | median)
    ot=$(awk -v w="$w" '$1==w && $2=="old" {print $4}' "$RESULTS" | median)
    nt=$(awk -v w="$w" '$1==w && $2=="new" {print $4}' "$RESULTS" | median)
    cx=$(awk -v a="$oc" -v b="$nc" 'BEGIN {if (b+0 > 0) printf "%.2f", a/b; else print "n/a"}')
    tx=$(awk -v a="$ot" -v b="$nt" 'BEGIN {if (a+0 > 0) printf "%.2f", b/a; else print "n/a"}')
    printf '%-10s %14.0f %14.0f %8s %12.0f %12.0f %8s\n' "$w" "$oc" "$nc" "$cx" "$ot" "$nt" "$tx"
done
echo "(medians of $RUNS runs; old = $OLD_SHA, new = $(git -C "$ROOT" rev-parse --short HEAD); cpu x = old/new, tput x = new/old)"
rm -f "$RESULTS"
