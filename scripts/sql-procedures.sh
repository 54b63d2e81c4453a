#!/usr/bin/env bash
# A transfer between two accounts, written three ways, through pgbench against `litmus demo`
# (an embedded cluster: NODES nodes, 4 partitions, in memory, in this one process):
#   txn   BEGIN; UPDATE ... WHERE id = :a; UPDATE ... WHERE id = :b; END;   (interactive)
#   call  CALL transfer(:a, :b, 1)                                         (an ACID procedure)
#   base  CALL transfer_base(:a, :b, 1)       (SET litmus.transaction_class = 'base', a COMMIT
#                                              between debit and credit: Salt's BASE)
# over ACCOUNTS accounts, CLIENTS clients (pgbench -c, -j 2), --max-tries 10. Per run: tps,
# latency average and p99 (pgbench's --log), CPU per transaction (utime+stime of the demo
# process, /proc/PID/stat, before and after), retried and failed transactions; the sum of the
# balances is checked after every engine's runs. On the one-round engines `call` and `base`
# are one one-round transaction each and `txn` an optimistic one (docs/sql.md).
# Usage: scripts/sql-procedures.sh [SECONDS]   (per run, default 20; ENGINES="acid salt omid
#   granola sinfonia"; NODES=2; ACCOUNTS=1000; CLIENTS=8; NO_BUILD=1; PG_BIN=...)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
ENGINES=${ENGINES:-"acid salt omid granola sinfonia"}
NODES=${NODES:-2}
ACCOUNTS=${ACCOUNTS:-1000}
CLIENTS=${CLIENTS:-8}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PGBENCH=${PGBENCH:-$PG_BIN/pgbench}
PSQL=${PSQL:-$PG_BIN/psql}
[ "${NO_BUILD:-0}" = 1 ] || cargo build --release -q -p litmus-cli
LITMUS=$(realpath "${CARGO_TARGET_DIR:-target}/release/litmus")
WORK=$(mktemp -d)
DEMO=""
cleanup() {
  [ -z "$DEMO" ] || { kill "$DEMO" 2>/dev/null || true; wait "$DEMO" 2>/dev/null || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck source=lib/measure.sh
source scripts/lib/measure.sh

sql() { "$PSQL" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U bench -d bench "$@"; }

cat >"$WORK/txn.sql" <<EOF
\set a random(1, $ACCOUNTS)
\set b random(1, $ACCOUNTS)
BEGIN;
UPDATE acct SET bal = bal - 1 WHERE id = :a;
UPDATE acct SET bal = bal + 1 WHERE id = :b;
END;
EOF
for p in transfer transfer_base; do
  printf '\\set a random(1, %s)\n\\set b random(1, %s)\nCALL %s(:a, :b, 1);\n' "$ACCOUNTS" "$ACCOUNTS" "$p" \
    >"$WORK/$p.sql"
done

ROWS=()
bench() { # ENGINE KIND SCRIPT
  local dir="$WORK/log-$1-$2"
  mkdir -p "$dir"
  local before after
  before=$(cpu_ticks "$DEMO")
  (cd "$dir" && "$PGBENCH" -n -h 127.0.0.1 -p "$PORT" -U bench -c "$CLIENTS" -j 2 -T "$SECS" --max-tries 10 \
    --log --log-prefix=txn -f "$3" bench >report.txt 2>&1) || echo "pgbench $1 $2 exited $?" >&2
  after=$(cpu_ticks "$DEMO")
  ROWS+=("$(python3 - "$dir" "$1" "$2" "$((after - before))" "$(getconf CLK_TCK)" <<'EOF'
import glob, re, sys
d, engine, kind, ticks, hz = sys.argv[1:]
report = open(f"{d}/report.txt").read()
def num(pattern, default="0"):
    m = re.search(pattern, report)
    return m.group(1) if m else default
tps = float(num(r"tps = ([\d.]+)"))
txns = int(num(r"number of transactions actually processed: (\d+)"))
retried = int(num(r"number of transactions retried: (\d+)"))
failed = int(num(r"number of failed transactions: (\d+)"))
avg = float(num(r"latency average = ([\d.]+) ms", "nan"))
lat = sorted(int(f[2]) for p in glob.glob(f"{d}/txn.*") for f in (l.split() for l in open(p)) if len(f) > 2 and f[2].isdigit())
p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] / 1000 if lat else float("nan")
cpu = int(ticks) * 1000 / int(hz) / txns if txns else float("nan")
print(f"{engine}|{kind}|{tps:.0f}|{avg:.2f}|{p99:.2f}|{cpu:.3f}|{txns}|{retried}|{failed}")
EOF
)")
  echo "${ROWS[-1]}" >&2
}

for engine in $ENGINES; do
  PORT=$(free_port)
  "$LITMUS" demo --engine "$engine" --nodes "$NODES" --partitions 4 --pg-listen "127.0.0.1:$PORT" \
    >"$WORK/demo-$engine.log" 2>&1 &
  DEMO=$!
  for _ in $(seq 1 100); do sql -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
  sql -c "CREATE TABLE acct (id INT PRIMARY KEY, bal INT NOT NULL)"
  python3 -c "
n = $ACCOUNTS
for lo in range(1, n + 1, 500):
    print('INSERT INTO acct VALUES ' + ', '.join(f'({i}, 1000)' for i in range(lo, min(n, lo + 499) + 1)) + ';')
" | sql
  sql <<'EOF'
CREATE PROCEDURE transfer(src INT, dst INT, amount INT) LANGUAGE sql AS $$
  UPDATE acct SET bal = bal - amount WHERE id = src;
  UPDATE acct SET bal = bal + amount WHERE id = dst;
$$;
CREATE PROCEDURE transfer_base(src INT, dst INT, amount INT) LANGUAGE sql
  SET litmus.transaction_class = 'base' AS $$
  UPDATE acct SET bal = bal - amount WHERE id = src;
  COMMIT;
  UPDATE acct SET bal = bal + amount WHERE id = dst;
$$;
EOF
  bench "$engine" txn "$WORK/txn.sql"
  bench "$engine" call "$WORK/transfer.sql"
  bench "$engine" base "$WORK/transfer_base.sql"
  total=$(sql -A -t -c "SELECT sum(bal) FROM acct")
  [ "$total" = "$((ACCOUNTS * 1000))" ] || echo "$engine: the balances sum to $total, not $((ACCOUNTS * 1000))" >&2
  kill "$DEMO"
  wait "$DEMO" 2>/dev/null || true
  DEMO=""
done

echo "| engine | transaction | tps | latency avg ms | p99 ms | CPU ms / txn | transactions | retried | failed |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for row in "${ROWS[@]}"; do echo "| ${row//|/ | } |"; done
