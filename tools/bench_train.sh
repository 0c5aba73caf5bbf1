#!/usr/bin/env bash
# Training benchmark: `paraforge train` and a PyTorch implementation of the
# same models (tools/bench_train.py) on the same Parquet pairs, M = 40, one
# epoch, 1 and 2 threads; prints pairs/s, pairs/s per core and the ratio.
# Usage: tools/bench_train.sh [ROWS] [VECTORS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-100000}
VECTORS=${2:-data/vectors/glove.6B.50d.top25k.txt.gz}
OUT=bench-out/train
BIN=target/release/paraforge
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
if [ ! -f bench-out/bins/pairs.tsv ]; then
  mkdir -p bench-out/bins
  cut -f3 data/sample/czeng16-heldout.cs-en.tsv > bench-out/bins/cs.txt
  $BIN translate --model models/tiny-cs-en --beam 4 --max-new-tokens 64 --scores bench-out/bins/cs.txt -o bench-out/bins/en.tsv
  paste <(cut -f1,3,4 data/sample/czeng16-heldout.cs-en.tsv) <(cut -f2 bench-out/bins/en.tsv) <(cut -f1 bench-out/bins/en.tsv) > bench-out/bins/pairs.tsv
fi
rm -rf "$OUT/data" && mkdir -p "$OUT/data"
target/release/examples/make_rows bench-out/bins/pairs.tsv "$VECTORS" "$OUT/data" "$ROWS" 4 > /dev/null
: > "$OUT/results.jsonl"
for model in word word,trigram; do
  for t in 1 2; do
    line=$($BIN train --data "$OUT/data" --model "$model" --init-vectors "$VECTORS" --megabatch 40 \
      --epochs 1 --threads "$t" --out "$OUT/m.pfe" 2>/dev/null | grep '^epoch 1')
    rate=$(echo "$line" | sed -E 's/.* ([0-9]+) pairs\/s.*/\1/')
    echo "{\"peer\": \"paraforge\", \"model\": \"$model\", \"M\": 40, \"threads\": $t, \"pairs_per_second\": $rate}" >> "$OUT/results.jsonl"
    $PY tools/bench_train.py "$OUT/data" "$VECTORS" "$model" 40 "$t" >> "$OUT/results.jsonl"
  done
done
# The recurrent encoders (and the word-operator Gaussian, a recurrence
# too) train hundreds of times slower: the first
# RNN_PAIRS pairs only (both peers), M = 1 as their negatives cost a
# forward pass of every sentence.
RNN_PAIRS=${RNN_PAIRS:-2000}
for model in lstm blstm gaussian; do
  for t in 1 2; do
    line=$($BIN train --data "$OUT/data" --model "$model" --init-vectors "$VECTORS" --megabatch 1 \
      --scramble 0 --no-dev --epochs 1 --max-pairs "$RNN_PAIRS" --shuffle-buffer 1 --threads "$t" \
      --out "$OUT/m.model" 2>/dev/null | grep '^epoch 1')
    rate=$(echo "$line" | sed -E 's/.* ([0-9]+) pairs\/s.*/\1/')
    echo "{\"peer\": \"paraforge\", \"model\": \"$model\", \"M\": 1, \"threads\": $t, \"pairs_per_second\": $rate}" >> "$OUT/results.jsonl"
    $PY tools/bench_train.py "$OUT/data" "$VECTORS" "$model" 1 "$t" "$RNN_PAIRS" >> "$OUT/results.jsonl"
  done
done
$PY - "$OUT/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | threads | paraforge pairs/s | per core | PyTorch pairs/s | per core | ratio |")
print("|---|---:|---:|---:|---:|---:|---:|")
for m in ("word", "word,trigram", "lstm", "blstm", "gaussian"):
    for t in (1, 2):
        r = {x["peer"]: x["pairs_per_second"] for x in rows if x["model"] == m and x["threads"] == t}
        p, q = r["paraforge"], r["pytorch"]
        print(f"| {m.upper()} | {t} | {p:,.0f} | {p/t:,.0f} | {q:,.0f} | {q/t:,.0f} | {p/q:.2f}x |")
PY
