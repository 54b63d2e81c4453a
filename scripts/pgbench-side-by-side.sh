#!/usr/bin/env bash
# The same pgbench runs against a scratch PostgreSQL 15 and against LitmusDB (`acid`, `salt`,
# `omid`; 1 node, and 3 nodes with every partition on all three, `replicas = 3`), written as a
# markdown table:
#   pgbench -i -s 1
#   pgbench -c 8 -j 2 -T $SECS --max-tries 10 [-M prepared]   (simple, then prepared)
# Per run: tps, latency average and p50/p99 (from pgbench's per-transaction log, `--log`), CPU
# per transaction (utime+stime of the server processes from /proc/PID/stat before and after
# the run, PostgreSQL's exited backends counted through the postmaster's cutime+cstime, divided
# by the transactions), retried transactions, total retries and failed transactions.
# Durability is the same on both sides: PostgreSQL with fsync = on and synchronous_commit = on
# (its defaults), LitmusDB with fsync = "always" (fdatasync every group commit).
# Every process runs on this machine: the 3-node clusters share its cores.
# Usage: scripts/pgbench-side-by-side.sh [SECONDS]   (per run, default 30; OUT=FILE for the
#   table, default stdout; ENGINES="acid salt omid"; NODES="1 3"; NO_BUILD=1 uses the release
#   binary as it is; PG_BIN=/usr/lib/postgresql/15/bin)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
ENGINES=${ENGINES:-"acid salt omid"}
NODES=${NODES:-"1 3"}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PGBENCH=${PGBENCH:-$PG_BIN/pgbench}
PSQL=${PSQL:-$PG_BIN/psql}
[ "${NO_BUILD:-0}" = 1 ] || cargo build --release -q -p litmus-cli
LITMUS=$(realpath "${CARGO_TARGET_DIR:-target}/release/litmus")
WORK=$(mktemp -d)
chmod 755 "$WORK"
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=lib/measure.sh
source scripts/lib/measure.sh

# PostgreSQL refuses to run as root: as the postgres user then.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

wait_sql() { # PORT
  for _ in $(seq 1 300); do
    "$PSQL" -X -h 127.0.0.1 -p "$1" -U bench -d bench -c 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "no SQL on port $1" >&2
  return 1
}

ROWS=()
# One pgbench run: SYSTEM NODES MODE PORT PIDS...
bench() {
  local system=$1 nodes=$2 mode=$3 port=$4
  shift 4
  local dir="$WORK/log-$system-$nodes-$mode"
  mkdir -p "$dir"
  local before after
  before=$(cpu_ticks "$@")
  (cd "$dir" && "$PGBENCH" -h 127.0.0.1 -p "$port" -U bench -c 8 -j 2 -T "$SECS" -M "$mode" --max-tries 10 \
    --log --log-prefix=txn bench >report.txt 2>&1) || echo "pgbench $system $nodes $mode exited $?" >&2
  sleep 1 # backends exit after their clients
  after=$(cpu_ticks "$@")
  ROWS+=("$(python3 - "$dir" "$system" "$nodes" "$mode" "$((after - before))" "$(getconf CLK_TCK)" <<'EOF'
import glob, re, sys
d, system, nodes, mode, ticks, hz = sys.argv[1:]
report = open(f"{d}/report.txt").read()
def num(pattern, default="0"):
    m = re.search(pattern, report)
    return m.group(1) if m else default
tps = float(num(r"tps = ([\d.]+)"))
txns = int(num(r"number of transactions actually processed: (\d+)"))
retried = int(num(r"number of transactions retried: (\d+)"))
retries = int(num(r"total number of retries: (\d+)"))
failed = int(num(r"number of failed transactions: (\d+)"))
avg = float(num(r"latency average = ([\d.]+) ms", "nan"))
lat = []
for path in glob.glob(f"{d}/txn.*"):
    for line in open(path):
        f = line.split()
        if len(f) >= 3 and f[2].isdigit():
            lat.append(int(f[2]))
lat.sort()
pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000 if lat else float("nan")
cpu_ms = int(ticks) * 1000 / int(hz) / txns if txns else float("nan")
print(f"{system}|{nodes}|{mode}|{tps:.1f}|{avg:.2f}|{pct(0.50):.2f}|{pct(0.99):.2f}|{cpu_ms:.3f}|{txns}|{retried}|{retries}|{failed}")
EOF
)")
  echo "${ROWS[-1]}" >&2
}

init() { # PORT
  "$PGBENCH" -h 127.0.0.1 -p "$1" -U bench -i -s 1 bench >"$WORK/init-$1.txt" 2>&1 || {
    cat "$WORK/init-$1.txt" >&2
    return 1
  }
}

# PostgreSQL 15, scratch cluster.
pg_port=$(free_port)
mkdir -p "$WORK/pg"
chown postgres "$WORK/pg" 2>/dev/null || true
as_pg "$PG_BIN/initdb" -D "$WORK/pg/data" -U bench --auth=trust >/dev/null
as_pg "$PG_BIN/postgres" -D "$WORK/pg/data" -p "$pg_port" -k "$WORK/pg" -c listen_addresses=127.0.0.1 \
  -c fsync=on -c synchronous_commit=on >"$WORK/pg/log.txt" 2>&1 &
PIDS+=($!)
wait_sql_pg() {
  for _ in $(seq 1 300); do
    "$PSQL" -X -h 127.0.0.1 -p "$pg_port" -U bench -d postgres -c 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}
wait_sql_pg
"$PSQL" -X -q -h 127.0.0.1 -p "$pg_port" -U bench -d postgres -c 'CREATE DATABASE bench'
postmaster=$(head -1 "$WORK/pg/data/postmaster.pid")
init "$pg_port"
for mode in simple prepared; do bench postgresql 1 "$mode" "$pg_port" "$postmaster"; done
kill "$postmaster"
wait "${PIDS[0]}" 2>/dev/null || true
PIDS=()

# LitmusDB.
for engine in $ENGINES; do
  for n in $NODES; do
    dir="$WORK/litmus-$engine-$n"
    mkdir -p "$dir"
    peers=()
    pgs=()
    for i in $(seq 0 $((n - 1))); do
      peers+=("\"127.0.0.1:$(free_port)\"")
      pgs+=("$(free_port)")
    done
    peer_list=$(IFS=,; echo "${peers[*]}")
    replicas=$([ "$n" -ge 3 ] && echo 3 || echo 1)
    server_pids=()
    for i in $(seq 0 $((n - 1))); do
      cat >"$dir/node$i.toml" <<EOF
node = $i
listen = ${peers[$i]}
data_dir = "$dir/data$i"
engine = "$engine"
partitions = 6
replicas = $replicas
fsync = "always"
peers = [$peer_list]
pg_listen = "127.0.0.1:${pgs[$i]}"
max_frame_bytes = 16777216
EOF
      "$LITMUS" server --config "$dir/node$i.toml" >"$dir/node$i.log" 2>&1 &
      PIDS+=($!)
      server_pids+=($!)
    done
    if wait_sql "${pgs[0]}" && init "${pgs[0]}"; then
      for mode in simple prepared; do bench "litmus $engine" "$n" "$mode" "${pgs[0]}" "${server_pids[@]}"; done
    else
      # Reported, not fatal: the other configurations still run.
      why=$(grep -h -m1 -E "error|ERROR" "$WORK/init-${pgs[0]}.txt" 2>/dev/null | tr '|' '/' || true)
      ROWS+=("litmus $engine|$n|pgbench -i failed: ${why:-no SQL port}||||||||||")
    fi
    for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${server_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
  done
done

table() {
  echo "| system | nodes | mode | tps | vs PostgreSQL | latency avg ms | p50 ms | p99 ms | CPU ms / txn | transactions | retried | retries | failed |"
  echo "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  declare -A pg_tps
  for row in "${ROWS[@]}"; do
    IFS='|' read -r system nodes mode tps _ <<<"$row"
    [ "$system" = postgresql ] && pg_tps[$mode]=$tps
  done
  for row in "${ROWS[@]}"; do
    IFS='|' read -r system nodes mode tps avg p50 p99 cpu txns retried retries failed <<<"$row"
    ratio=""
    if [ -n "$tps" ] && [ -n "${pg_tps[$mode]:-}" ]; then
      ratio=$(python3 -c "print(f'{$tps / ${pg_tps[$mode]}:.2f}')")
    fi
    echo "| $system | $nodes | $mode | $tps | $ratio | $avg | $p50 | $p99 | $cpu | $txns | $retried | $retries | $failed |"
  done
}
if [ -n "${OUT:-}" ]; then table >"$OUT"; else table; fi
