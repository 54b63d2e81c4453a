#!/usr/bin/env bash
# Omid §V (ICDE '14): medians of the status oracle's commit rate (2- and 8-row write sets, many
# outstanding transactions, TCP loopback), of the replication-on/off ratio and of the recovery
# time; the overhead of omid over nocc per mix; and the paper's figures, written to
# docs/figures/omid-*.{json,svg} (Table I to omid-table1.{json,txt}, the medians to
# omid-medians.txt):
#   omid-fig7-8.svg            commits/s vs clients (1..1024, 50 ms think), replication off/on
#   omid-fig7-8-latency.svg    Fig. 7: commit latency vs throughput as the clients grow
#   omid-fig7-8-piggyback.svg  Fig. 8: ΔSO bytes per timestamp reply vs clients
#   omid-fig9.svg, -latency    Fig. 9: throughput and latency as outstanding transactions grow
#   omid-fig10.svg, -latency   Fig. 10: saturation commits/s vs write-set size 2..512
#   omid-fig11-<mix>.svg, -latency   Fig. 11: omid against nocc as clients grow, per mix
# The overhead runs and Fig. 11 compare against nocc, which gives no isolation: ycsb-t refuses it
# (its check is snapshot isolation), so they run `bench ycsb` with 8-row transactions at each
# mix's read share instead (read-only 1.0, write-only 0.0, complex 0.5, mixed 0.75: half
# read-only, half complex), the paper's comparison of Omid against HBase without transactions.
#   omid-fig12-recovery.svg    Fig. 12: recovery time vs log size
# Usage: scripts/omid-figures.sh [RUNS] [SECONDS]
#   RUNS × SECONDS for the medians (default 3 × 10); POINT_SECS (default 3) per figure point;
#   REPEAT (default 3) runs per point of Figs. 9 and 10, the median drawn; MEDIANS=0 or
#   FIGURES=0 skips a part.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECS=${2:-10}
PT=${POINT_SECS:-3}
REPEAT=${REPEAT:-3}
cargo build --release -q -p litmus-cli
B=target/release/litmus
OUT=docs/figures
mkdir -p "$OUT"
median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f", m}'; }
O=(bench omid-oracle --quiet)
# The read share of an Omid §V mix (see the header).
read_share() {
  case $1 in
    read-only) echo 1.0 ;;
    write-only) echo 0.0 ;;
    complex) echo 0.5 ;;
    mixed) echo 0.75 ;;
  esac
}

if [ "${MEDIANS:-1}" = 1 ]; then
  {
    for ws in 2 8; do
      rate=(); p50=(); p99=(); rec=()
      for _ in $(seq 1 "$RUNS"); do
        out=$("$B" "${O[@]}" --write-set "$ws" --duration "$SECS" 2>/dev/null)
        rate+=("$(echo "$out" | awk '/^commits\/s:/ {print $2}')")
        p50+=("$(echo "$out" | awk '/^commit latency us:/ {print $5}')")
        p99+=("$(echo "$out" | awk '/^commit latency us:/ {print $9}')")
        rec+=("$(echo "$out" | awk '/^recovery:/ {print $2}')")
      done
      printf 'omid-oracle write-set=%s (8 clients x 64 outstanding, %s s): commits/s median %s (runs %s); commit p50 us median %s (%s); p99 us median %s (%s); recovery ms median %s (%s)\n' \
        "$ws" "$SECS" "$(printf '%s\n' "${rate[@]}" | median)" "${rate[*]}" "$(printf '%s\n' "${p50[@]}" | median)" "${p50[*]}" \
        "$(printf '%s\n' "${p99[@]}" | median)" "${p99[*]}" "$(printf '%s\n' "${rec[@]}" | median)" "${rec[*]}"
    done
    ratios=()
    for _ in $(seq 1 "$RUNS"); do
      out=$("$B" "${O[@]}" --compare replication-off,replication-on --duration "$SECS" 2>/dev/null)
      ratios+=("$(echo "$out" | tail -1 | awk '{print $NF}')")
    done
    printf 'omid-oracle --compare replication-off,replication-on (%s s): on/off median %s (runs %s)\n' \
      "$SECS" "$(printf '%s\n' "${ratios[@]}" | median)" "${ratios[*]}"
    for mix in read-only write-only complex mixed; do
      ratios=()
      for r in $(seq 1 "$RUNS"); do
        out=$("$B" bench ycsb --txn-size 8 --read-ratio "$(read_share "$mix")" --compare nocc,omid \
          --duration "$PT" --quiet --seed "$r" 2>/dev/null)
        ratios+=("$(echo "$out" | tail -1 | awk '{print $NF}')")
      done
      printf 'ycsb --txn-size 8, %-10s mix, --compare nocc,omid (%s s): omid/nocc median %s (runs %s)\n' \
        "$mix" "$PT" "$(printf '%s\n' "${ratios[@]}" | median)" "${ratios[*]}"
    done
  } | tee "$OUT/omid-medians.txt"
fi

if [ "${FIGURES:-1}" = 1 ]; then
  CMP=(--compare replication-off,replication-on)
  # Figs. 7-8: the paper's clients run one transaction at a time and "execute" it for 50 ms.
  "$B" "${O[@]}" "${CMP[@]}" --outstanding 1 --think-ms 50 --sweep clients=1,4,16,64,256,1024 \
    --duration "$PT" --json "$OUT/omid-fig7-8.json" 2>/dev/null
  # Fig. 9: the pipe kept full, the load rising (8 clients × outstanding).
  "$B" "${O[@]}" "${CMP[@]}" --clients 8 --sweep outstanding=1,2,4,8,16,32,64,128 --repeat "$REPEAT" \
    --duration "$PT" --json "$OUT/omid-fig9.json" 2>/dev/null
  # Fig. 10: saturation throughput per write-set size.
  "$B" "${O[@]}" --clients 8 --outstanding 64 --sweep write-set=2,4,8,16,32,128,512 --repeat "$REPEAT" \
    --duration "$PT" --json "$OUT/omid-fig10.json" 2>/dev/null
  # Table I: 1024 clients, 50 ms think; 10% slow (x100) and glacial (x1000) clients.
  "$B" "${O[@]}" --clients 1024 --outstanding 1 --think-ms 50 --table slow-clients \
    --duration "$((2 * PT))" --json "$OUT/omid-table1.json" 2>/dev/null | tee "$OUT/omid-table1.txt"
  # Fig. 11: 8-row transactions on nocc and omid, per mix's read share.
  for mix in read-only write-only complex mixed; do
    "$B" bench ycsb --txn-size 8 --read-ratio "$(read_share "$mix")" --compare nocc,omid \
      --sweep clients=1,4,16,64 --duration "$PT" --quiet --json "$OUT/omid-fig11-$mix.json" 2>/dev/null
  done
  # Fig. 12: recovery time after runs of growing length (growing logs).
  "$B" "${O[@]}" --clients 8 --sweep duration=1,2,5,10,20 --json "$OUT/omid-fig12.json" 2>/dev/null
fi
