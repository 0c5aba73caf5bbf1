#!/usr/bin/env bash
# Training benchmark: `paraforge train` and a PyTorch implementation of the
# same models (tools/bench/bench_train.py) on the same Parquet pairs, every
# encoder `paraforge train --model` has, 1 and 2 threads, one epoch; prints
# pairs/s, pairs/s per core and the ratio, and writes one JSON object per
# run to bench-out/train/results.jsonl.
# Usage: tools/bench/bench_train.sh [ROWS] [VECTORS]
# Environment: RNN_PAIRS (pairs of a neural run, default 2000), AVG_MODELS
# and NN_MODELS (the encoders run; default all, see below; set empty, none),
# PYTHON; on a GPU, DEVICE (paraforge's neural encoders: `train --device`,
# e.g. wgpu, which needs the wgpu build as PARAFORGE_BIN) and TORCH_DEVICE
# (PyTorch's, e.g. cuda); the averages are paraforge's CPU code whatever
# DEVICE says, and their rows say so.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROWS=${1:-100000}
VECTORS=${2:-data/vectors/glove.6B.50d.top25k.txt.gz}
OUT=bench-out/train
BIN=${PARAFORGE_BIN:-target/release/paraforge}
PY=${PYTHON:-.venv/bin/python}
# The hand-differentiated averages: M = 40, the whole data.
AVG_MODELS=${AVG_MODELS-word trigram word,trigram}
# The neural encoders (burn autodiff; the recurrent ones and the
# word-operator Gaussian, a recurrence too, train hundreds of times
# slower): the first RNN_PAIRS pairs only (both peers), M = 1 as their
# negatives cost a forward pass of every sentence, no scrambling, no dev
# set, file order.
NN_MODELS=${NN_MODELS-lstm lstm-no-o blstm blstm-concat gran rnn irnn dan proj gaussian lstm-gaussian word+trigram+lstm word,trigram,lstm}
RNN_PAIRS=${RNN_PAIRS:-2000}
mkdir -p "$OUT"
if [ ! -f bench-out/bins/pairs.tsv ]; then
  mkdir -p bench-out/bins
  cut -f3 data/sample/czeng16-heldout.cs-en.tsv > bench-out/bins/cs.txt
  $BIN translate --model models/tiny-cs-en --beam 4 --max-new-tokens 64 --scores bench-out/bins/cs.txt -o bench-out/bins/en.tsv
  paste <(cut -f1,3,4 data/sample/czeng16-heldout.cs-en.tsv) <(cut -f2 bench-out/bins/en.tsv) <(cut -f1 bench-out/bins/en.tsv) > bench-out/bins/pairs.tsv
fi
rm -rf "$OUT/data" && mkdir -p "$OUT/data"
${MAKE_ROWS:-target/release/examples/make_rows} bench-out/bins/pairs.tsv "$VECTORS" "$OUT/data" "$ROWS" 4 > /dev/null
: > "$OUT/results.jsonl"

# paraforge train MODEL M THREADS DEVICE OUTPUT [ARGS...]: its result line.
paraforge() {
  local model=$1 m=$2 t=$3 dev=$4 out=$5
  shift 5
  local line on=()
  # The averages take no --device (they are CPU code): only another device is named.
  [ "$dev" = cpu ] || on=(--device "$dev")
  if ! line=$($BIN train --data "$OUT/data" --model "$model" --init-vectors "$VECTORS" --megabatch "$m" \
      --epochs 1 --threads "$t" "${on[@]}" --out "$out" --overwrite "$@" 2>"$OUT/paraforge.err" | grep '^epoch 1'); then
    echo "paraforge train --model $model failed:" >&2
    cat "$OUT/paraforge.err" >&2
    exit 1
  fi
  # "epoch 1: N pairs, mean loss L, R pairs/s"
  local pairs loss rate
  pairs=$(echo "$line" | sed -E 's/^epoch 1: ([0-9]+) pairs.*/\1/')
  loss=$(echo "$line" | sed -E 's/.*mean loss ([0-9.]+),.*/\1/')
  rate=$(echo "$line" | sed -E 's/.* ([0-9]+) pairs\/s.*/\1/')
  echo "{\"peer\": \"paraforge\", \"model\": \"$model\", \"M\": $m, \"threads\": $t, \"device\": \"$dev\", \"pairs\": $pairs, \"pairs_per_second\": $rate, \"mean_loss\": $loss}" >> "$OUT/results.jsonl"
}

for model in $AVG_MODELS; do
  for t in 1 2; do
    paraforge "$model" 40 "$t" cpu "$OUT/m.pfe"
    $PY tools/bench/bench_train.py "$OUT/data" "$VECTORS" "$model" 40 "$t" >> "$OUT/results.jsonl"
  done
done
for model in $NN_MODELS; do
  for t in 1 2; do
    paraforge "$model" 1 "$t" "${DEVICE:-cpu}" "$OUT/m.model" --scramble 0 --no-dev --max-pairs "$RNN_PAIRS" \
      --shuffle-buffer 1
    $PY tools/bench/bench_train.py "$OUT/data" "$VECTORS" "$model" 1 "$t" "$RNN_PAIRS" >> "$OUT/results.jsonl"
  done
done
$PY - "$OUT/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
devices = {(x["peer"], x.get("device", "cpu")) for x in rows}
if any(d != "cpu" for _, d in devices):
    print("devices: " + ", ".join(f"{p} {d}" for p, d in sorted(devices)) + " (per core: per host thread)\n")
print("| model | M | threads | paraforge pairs/s | per core | PyTorch pairs/s | per core | ratio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for m in dict.fromkeys(x["model"] for x in rows):
    for t in (1, 2):
        r = {x["peer"]: x for x in rows if x["model"] == m and x["threads"] == t}
        p, q = r["paraforge"]["pairs_per_second"], r["pytorch"]["pairs_per_second"]
        print(f"| {m.upper()} | {r['paraforge']['M']} | {t} | {p:,.0f} | {p/t:,.0f} | {q:,.0f} | {q/t:,.0f} | {p/q:.2f}x |")
PY
