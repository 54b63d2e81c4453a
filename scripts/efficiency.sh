#!/usr/bin/env bash
# Efficiency goals, an older commit against this working tree, in one run.
#
#   scripts/efficiency.sh [OLD_COMMIT] [RUNS]      # ROWS="..." narrows, KEEP=1 keeps the old worktree
#
# Builds OLD_COMMIT (default 103af40) in a git worktree under /tmp and this working tree, then
# runs both binaries on every row, alternating old and new so that a change in the machine's
# load hits both alike, RUNS times (default 3), and prints the medians, old against new, with
# each row's goal:
#
#   tpcc-acid          cpu µs/txn   bench tpcc --warehouses 2 --scale-div 10 --engine acid --clients 16 --net-delay-us 0
#   ycsb-acid          cpu µs/txn   bench ycsb --engine acid --net-delay-us 0
#   tpcc-salt-acid     ratio        bench tpcc --warehouses 2 --scale-div 10 --compare acid,salt --sweep clients=8,16,32,64,128 --duration 5
#   ticketing-salt-acid ratio       bench ticketing --compare acid,salt --sweep clients=8,16,32,64,128 --duration 5
#   tpcc-paper-sim     ratio        bench tpcc --runtime sim --nodes 10 --cores-per-node 4 --partitions 10 --warehouses 10
#                                     --scale-div 10 --sync-latency-us 300 --compare acid,salt --sweep clients=64,256,1024 --duration 5
#   neworder-coordfree ratio        bench tpcc-neworder --partitions 8 --warehouses 8 --compare acid,coordfree --sweep clients=8,32,128 --duration 5
#   tpcc-granola       ratio        bench tpcc --warehouses 4 --partitions 4 --compare granola-locking,granola --sweep clients=8,32,128 --duration 5
#   ycsb-omid          ratio        bench ycsb --compare nocc,omid
#   ycsb8-omid         ratio        bench ycsb --txn-size 8 --compare nocc,omid
#   oracle-200         commits/s    bench omid-oracle --clients 4 --outstanding 200 --write-set 2
#   oracle-1           commits/s    bench omid-oracle --clients 4 --outstanding 1 --write-set 2
#
# Also by name (not in the default set): tpcc-salt (cpu, the first row with --engine salt) and
# ycsb-nocc (cpu, bench ycsb --engine nocc --net-delay-us 0). A ratio is the command's last
# `ratio` line (of peaks, for a sweep); cpu is the `cpu:` line (process user+sys CPU per
# committed transaction over the measured window), which changes little with other load on
# the machine, where throughput changes a lot. DURATION (s) sets the cpu rows' runs (default
# 10 for TPC-C, half of it for YCSB); the other rows keep their commands' durations.
set -euo pipefail

OLD=${1:-103af40}
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

DEFAULT_ROWS="tpcc-acid ycsb-acid tpcc-salt-acid ticketing-salt-acid tpcc-paper-sim neworder-coordfree tpcc-granola ycsb-omid ycsb8-omid oracle-200 oracle-1"
ROWS=${ROWS:-$DEFAULT_ROWS}

# "KIND GOAL ARGS...": KIND is what the row reads (cpu, ratio, commits).
row_spec() {
    case $1 in
        tpcc-acid) echo "cpu <=60 tpcc --warehouses 2 --scale-div 10 --engine acid --clients 16 --net-delay-us 0 --duration $DURATION" ;;
        tpcc-salt) echo "cpu - tpcc --warehouses 2 --scale-div 10 --engine salt --clients 16 --net-delay-us 0 --duration $DURATION" ;;
        ycsb-acid) echo "cpu <=20 ycsb --engine acid --net-delay-us 0 --duration $YCSB_DURATION" ;;
        ycsb-nocc) echo "cpu - ycsb --engine nocc --net-delay-us 0 --duration $YCSB_DURATION" ;;
        tpcc-salt-acid) echo "ratio >=2.5 tpcc --warehouses 2 --scale-div 10 --compare acid,salt --sweep clients=8,16,32,64,128 --duration 5" ;;
        ticketing-salt-acid) echo "ratio >=3 ticketing --compare acid,salt --sweep clients=8,16,32,64,128 --duration 5" ;;
        tpcc-paper-sim) echo "ratio >=3 tpcc --runtime sim --nodes 10 --cores-per-node 4 --partitions 10 --warehouses 10 --scale-div 10 --sync-latency-us 300 --compare acid,salt --sweep clients=64,256,1024 --duration 5" ;;
        neworder-coordfree) echo "ratio >=4 tpcc-neworder --partitions 8 --warehouses 8 --compare acid,coordfree --sweep clients=8,32,128 --duration 5" ;;
        tpcc-granola) echo "ratio >=2 tpcc --warehouses 4 --partitions 4 --compare granola-locking,granola --sweep clients=8,32,128 --duration 5" ;;
        ycsb-omid) echo "ratio >=0.8 ycsb --compare nocc,omid" ;;
        ycsb8-omid) echo "ratio >=0.8 ycsb --txn-size 8 --compare nocc,omid" ;;
        oracle-200) echo "commits >=200000 omid-oracle --clients 4 --outstanding 200 --write-set 2" ;;
        oracle-1) echo "commits >=30000 omid-oracle --clients 4 --outstanding 1 --write-set 2" ;;
        *) echo "unknown row: $1" >&2; exit 2 ;;
    esac
}

# One run of one row: prints its value ("nan" when the run failed or printed none).
one_run() {
    local bin=$1 kind=$2 out value
    shift 2
    out=$("$bin" bench "$@" 2>&1) || { echo "run failed: $bin bench $*" >&2; echo "$out" | tail -5 >&2; echo nan; return; }
    if echo "$out" | grep -q '^verify:' && echo "$out" | grep '^verify:' | grep -vq 'ok'; then
        echo "verification failed: $bin bench $*" >&2
        echo "$out" | grep '^verify' >&2
    fi
    case $kind in
        cpu) value=$(echo "$out" | sed -n 's/^cpu: \([0-9.]*\) µs.*/\1/p' | head -1) ;;
        ratio) value=$(echo "$out" | sed -n 's/^ratio [^=]*= \([0-9.]*\).*/\1/p' | tail -1) ;;
        commits) value=$(echo "$out" | sed -n 's/^commits\/s: \([0-9.]*\).*/\1/p' | tail -1) ;;
    esac
    echo "${value:-nan}"
}

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

RESULTS=$(mktemp)
for r in $ROWS; do
    read -r kind goal args <<<"$(row_spec "$r")"
    for i in $(seq 1 "$RUNS"); do
        for side in old new; do
            bin=$OLD_BIN
            [ $side = new ] && bin=$NEW_BIN
            # shellcheck disable=SC2086
            v=$(one_run "$bin" "$kind" $args)
            echo "$r $side $v" >>"$RESULTS"
            echo "  $r $side run $i: $kind $v" >&2
        done
    done
done

printf '\n%-20s %-10s %12s %12s %8s %10s  %s\n' row measure old new "new/old" goal runs
for r in $ROWS; do
    read -r kind goal _ <<<"$(row_spec "$r")"
    o=$(awk -v r="$r" '$1==r && $2=="old" {print $3}' "$RESULTS" | median)
    n=$(awk -v r="$r" '$1==r && $2=="new" {print $3}' "$RESULTS" | median)
    runs=$(awk -v r="$r" '$1==r {printf "%s%s", sep, $3; sep=" "}' "$RESULTS")
    x=$(awk -v a="$o" -v b="$n" 'BEGIN {if (a+0 > 0) printf "%.2f", b/a; else print "n/a"}')
    unit=$kind
    [ "$kind" = cpu ] && unit="cpu µs/txn"
    printf '%-20s %-10s %12s %12s %8s %10s  %s\n' "$r" "$unit" "$o" "$n" "$x" "$goal" "(old new alternated: $runs)"
done
echo "(medians of $RUNS runs; old = $OLD_SHA, new = $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo '+dirty'); machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB)"
rm -f "$RESULTS"
