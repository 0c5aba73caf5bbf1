#!/usr/bin/env bash
# Framework benchmark for the training stage (burn or candle): the same
# LSTM / BLSTM sentence encoder, data and margin loss in candle, burn and
# PyTorch, timed in one run on the same pairs; prints pairs/s per thread
# setting and the ratio to PyTorch. See docs/training-framework.md.
#
# Usage: tools/studies/fwbench/run.sh                 gradient checks, loss check, speed table
#        tools/studies/fwbench/run.sh --build-times   also clean release/debug build times
# Env: STEPS (timed steps per run, default 10), WARMUP (default 2),
#      LOSS_STEPS (loss check, default 200; 0 skips it), THREADS ("1 2"),
#      PYTHON (torch, default .venv/bin/python), ARROW_PYTHON (pyarrow,
#      default .cache/testenv/bin/python), CARGO_TARGET_DIR (/work/fwbench-target).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../../.. && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/fwbench-target}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-2}
LOSS_STEPS=${LOSS_STEPS:-200}
THREADS=${THREADS:-1 2}
PY=${PYTHON:-$ROOT/.venv/bin/python}
ARROW_PY=${ARROW_PYTHON:-$ROOT/.cache/testenv/bin/python}
DATA=$CARGO_TARGET_DIR/pairs.tsv
OUT=$CARGO_TARGET_DIR/results.jsonl
NICE="nice -n 10"
mkdir -p "$CARGO_TARGET_DIR"

if [ "${1:-}" = "--build-times" ]; then
  # Clean builds of each framework's binary (release and debug), each in an
  # empty target directory, with the registry already downloaded.
  for fw in candle burn; do
    for profile in release debug; do
      dir=$CARGO_TARGET_DIR/clean-$fw-$profile
      rm -rf "$dir"
      flag=$([ $profile = release ] && echo --release || true)
      s=$(date +%s.%N)
      CARGO_TARGET_DIR=$dir $NICE cargo build -q $flag --features $fw --bin bench_$fw
      e=$(date +%s.%N)
      crates=$(cargo tree -q --features $fw -e normal,build --prefix none | sed 's/ (\*)//; s/ (proc-macro)//' | grep -v '^fwbench' | sort -u | wc -l)
      echo "build $fw $profile: $(echo "$e - $s" | bc) s, $crates crates in the dependency tree"
      rm -rf "$dir"
    done
  done
fi

$NICE cargo build -q --release --features candle --bin bench_candle
$NICE cargo build -q --release --features burn-ndarray --bin bench_burn
CANDLE=$CARGO_TARGET_DIR/release/bench_candle
BURN=$CARGO_TARGET_DIR/release/bench_burn

if [ ! -s "$DATA" ]; then
  # 20,000 (reference, translation) pairs of the scorer corpus, shuffled once.
  "$ARROW_PY" - "$ROOT/bench-out/scorer/corpus" "$DATA" <<'PY'
import glob, random, sys
import pyarrow.parquet as pq
pairs = []
for f in sorted(glob.glob(sys.argv[1] + "/**/*.parquet", recursive=True)):
    t = pq.read_table(f, columns=["reference", "translation"])
    pairs += zip(t.column("reference").to_pylist(), t.column("translation").to_pylist())
clean = lambda s: " ".join(s.split())
pairs = [(clean(a), clean(b)) for a, b in pairs if a.strip() and b.strip()]
random.Random(1).shuffle(pairs)
with open(sys.argv[2], "w", encoding="utf-8") as o:
    for a, b in pairs[:20000]:
        o.write(a + "\t" + b + "\n")
PY
fi

echo "== gradient checks (fused cell, finite differences vs autodiff)"
for m in lstm blstm; do
  $CANDLE gradcheck "$DATA" $m
  $BURN gradcheck "$DATA" $m fused 0 0 0 0 flex
done

if [ "$LOSS_STEPS" -gt 0 ]; then
  echo "== loss over $LOSS_STEPS steps (B=100, 2 threads, lstm)"
  RAYON_NUM_THREADS=2 $NICE $CANDLE bench "$DATA" lstm fused "$LOSS_STEPS" 0
  RAYON_NUM_THREADS=2 $NICE $BURN bench "$DATA" lstm fused "$LOSS_STEPS" 0 100 300 flex
  $NICE "$PY" bench_torch.py "$DATA" lstm "$LOSS_STEPS" 0 100 300 2
fi

echo "== speed: $STEPS timed steps after $WARMUP, B=100, dim 300"
: > "$OUT"
for m in lstm blstm; do
  for t in $THREADS; do
    export RAYON_NUM_THREADS=$t MATMUL_NUM_THREADS=$t OMP_NUM_THREADS=$t
    $NICE "$PY" bench_torch.py "$DATA" $m "$STEPS" "$WARMUP" 100 300 $t | tee -a "$OUT"
    for impl in fused lib; do
      $NICE $CANDLE bench "$DATA" $m $impl "$STEPS" "$WARMUP" | tee -a "$OUT"
      $NICE $BURN bench "$DATA" $m $impl "$STEPS" "$WARMUP" 100 300 flex | tee -a "$OUT"
    done
    $NICE $BURN bench "$DATA" $m fused "$STEPS" "$WARMUP" 100 300 ndarray | tee -a "$OUT"
  done
done

"$PY" - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch = {(r["model"], r["threads"]): r["pairs_per_second"] for r in rows if r["peer"] == "pytorch"}
print("| model | threads | peer | implementation | pairs/s | ratio to PyTorch |")
print("|---|---:|---|---|---:|---:|")
for r in sorted(rows, key=lambda r: (r["model"] != "lstm", r["threads"], r["peer"] != "pytorch", r["peer"], r["impl"])):
    p = torch.get((r["model"], r["threads"]))
    ratio = f'{r["pairs_per_second"] / p:.2f}x' if p else "-"
    print(f'| {r["model"]} | {r["threads"]} | {r["peer"]} | {r["impl"]} | {r["pairs_per_second"]:.1f} | {ratio} |')
PY
