#!/usr/bin/env bash
# The coordinator at a real job's shape, with faults: `paraforge
# coordinator` and WORKERS `paraforge worker` processes on PAIRS (an input
# of pairs translated already, e.g. bench-scale's at 51.4M lines, KEEP=1),
# in shards of SHARD pairs. A worker is SIGKILLed every KILL_EVERY seconds
# (and started again), and the coordinator is SIGKILLed once half the
# shards are committed and started again on the same state. /status and
# /metrics are fetched every half second throughout with a one-second
# limit, each /status answer's phase noted. At the end: the coordinator's exit code, how many probes went
# unanswered or took over a second (apart from the seconds it was down),
# and, read back with DuckDB, that every input line is one output row or
# one reject, no id twice.
#
#   tools/bench/coordinator_shape.sh PAIRS LINES SHARD [WORK]
set -euo pipefail
PAIRS=$1 LINES=$2 SHARD=$3
WORK=${4:-.cache/shape-$SHARD}
BIN=${PARAFORGE:-target/release/paraforge}
PY=${PYTHON:-.cache/testenv/bin/python}
WORKERS=${WORKERS:-2}
KILL_EVERY=${KILL_EVERY:-45}
GRPC=127.0.0.1:50151 HTTP=127.0.0.1:9564
rm -rf "$WORK"; mkdir -p "$WORK"
cat > "$WORK/job.toml" <<EOF
[job]
name = "shape-$SHARD"
output = "$WORK/out"
shard_pairs = $SHARD
lease_seconds = 30

[input]
paths = ["$PAIRS"]
format = "pairs"
id_column = 0
reference_column = 1
translation_column = 2
translation_score_column = 3

[coordinator]
listen = "$GRPC"
metrics = "$HTTP"
EOF
echo "coordinator shape: $LINES lines, shards of $SHARD, $WORKERS workers, a worker killed every ${KILL_EVERY}s, the coordinator killed at half; $(date -u +%H:%M:%SZ)"

start_coordinator() {
    "$BIN" coordinator --config "$WORK/job.toml" >> "$WORK/coordinator.log" 2>&1 &
    COORD=$!
    echo "$COORD" > "$WORK/coord.pid"
}
# The job is over for the prober once the restarted coordinator is gone.
ended() { [[ -e $WORK/restarted ]] && ! kill -0 "$(cat "$WORK/coord.pid")" 2>/dev/null; }
start_worker() { # $1 = slot
    "$BIN" worker --coordinator "http://$GRPC" --name "w$1" --connect-attempts 60 \
        >> "$WORK/worker-$1.log" 2>&1 &
    WPID[$1]=$!
}
started=$(date +%s.%N)
start_coordinator
for _ in $(seq 1 600); do curl -s -m 1 -o /dev/null "http://$HTTP/status" && break; sleep 0.05; done
echo "   pages answering $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}') s after the coordinator started"
declare -a WPID
for i in $(seq 1 "$WORKERS"); do start_worker "$i"; done

# Probes: one line per fetch, `epoch what http_code seconds phase` (the
# phase /status names: planning, resuming, serving, finalizing,
# reading_back; "-" for /metrics and for no answer).
(
    until ended || [[ -e $WORK/done ]]; do
        for what in status metrics; do
            r=$(curl -s -m 1 -w '\n%{http_code} %{time_total}' "http://$HTTP/$what" || true)
            t=$(tail -n 1 <<< "$r")
            [[ $t == 000* ]] && ended && break 2
            phase=$(sed -n 's/.*"phase":"\([a-z_]*\)".*/\1/p' <<< "$r" | head -n 1)
            [[ $t =~ ^[0-9]+\ [0-9.]+$ ]] || t="000 1.0"
            echo "$(date +%s.%N) $what $t ${phase:--}"
        done
        sleep 0.5
        [[ -e $WORK/done ]] && break
    done
) > "$WORK/probes.txt" &
PROBER=$!

killed=0 restarted=0 down_from="" down_to=""
last_kill=$(date +%s)
while true; do
    sleep 2
    if ! kill -0 "$COORD" 2>/dev/null; then
        wait "$COORD" && rc=0 || rc=$?
        if (( restarted == 1 )) || [[ $rc == 0 ]]; then break; fi
        echo "coordinator ended with $rc before the restart"; exit 1
    fi
    s=$(curl -s -m 1 "http://$HTTP/status" || true)
    committed=$(echo "$s" | sed -n 's/.*"committed":\([0-9]*\).*/\1/p')
    total=$(echo "$s" | sed -n 's/.*"total":\([0-9]*\).*/\1/p')
    if (( restarted == 0 )) && [[ -n $committed && -n $total ]] && (( total > 0 && committed * 2 >= total )); then
        echo "$(date -u +%H:%M:%S) $committed of $total shards committed: SIGKILL to the coordinator"
        down_from=$(date +%s.%N)
        kill -9 "$COORD"; wait "$COORD" 2>/dev/null || true
        start_coordinator
        for _ in $(seq 1 3000); do curl -s -m 1 -o /dev/null "http://$HTTP/status" && break; sleep 0.1; done
        down_to=$(date +%s.%N)
        for _ in $(seq 1 6000); do curl -s -m 1 "http://$HTTP/status" | grep -q '"phase":"serving"' && break; sleep 0.1; done
        serving=$(date +%s.%N)
        restarted=1; touch "$WORK/restarted"
        echo "   pages answering again after $(awk -v a="$down_from" -v b="$down_to" 'BEGIN {printf "%.1f", b - a}') s, serving workers after $(awk -v a="$down_from" -v b="$serving" 'BEGIN {printf "%.1f", b - a}') s"
    fi
    now=$(date +%s)
    if (( now - last_kill >= KILL_EVERY )); then
        i=$(( RANDOM % WORKERS + 1 ))
        if kill -9 "${WPID[$i]}" 2>/dev/null; then killed=$((killed + 1)); fi
        wait "${WPID[$i]}" 2>/dev/null || true
        start_worker "$i"
        last_kill=$now
    fi
    for i in $(seq 1 "$WORKERS"); do
        kill -0 "${WPID[$i]}" 2>/dev/null || { wait "${WPID[$i]}" 2>/dev/null || true; kill -0 "$COORD" 2>/dev/null && start_worker "$i" || true; }
    done
done
touch "$WORK/done"; wait "$PROBER" || true
for i in $(seq 1 "$WORKERS"); do kill "${WPID[$i]}" 2>/dev/null || true; done
echo "coordinator exit code: $rc; $killed workers SIGKILLed; $(date -u +%H:%M:%SZ)"
awk -v a="${down_from:-0}" -v b="${down_to:-0}" '
    { if ($1 >= a - 1 && $1 <= b + 1) { during++; next }
      n++; if ($3 != 200) bad++; else if ($4 > 1.0) slow++; if ($4 > max) max = $4
      if ($2 == "status" && $3 == 200) { ph[$5]++; if ($4 > phmax[$5]) phmax[$5] = $4 } }
    END { printf "probes: %d outside the restart (%d unanswered, %d over 1 s, slowest %.3f s), %d during it\n", n, bad, slow, max, during
          for (p in ph) printf "   /status in phase %s: %d answers, slowest %.3f s\n", p, ph[p], phmax[p] }' "$WORK/probes.txt"
"$PY" - "$WORK/out" "$LINES" <<'EOF'
import json, sys, duckdb
out, lines = sys.argv[1], int(sys.argv[2])
m = json.load(open(f"{out}/_manifest.json"))
rows, ids = duckdb.sql(f"select count(*), count(distinct id) from read_parquet('{out}/shard=*/*.parquet')").fetchall()[0]
print(f"rows {rows}, distinct ids {ids}, manifest pairs {m['pairs']}, rejects {m['rejects']}, lines {lines}")
ok = rows == ids == m["pairs"] and rows + m["rejects"] == lines
print("ok: every line once" if ok else "FAILED: lines lost or written twice")
sys.exit(0 if ok else 1)
EOF
