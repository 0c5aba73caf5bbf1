#!/usr/bin/env bash
# End-to-end throughput: `paraforge run` (coordinator + 1 worker with 2
# threads: read, translate, score, Parquet, commit) against the engine alone
# (`paraforge translate --threads 2`) on the same 4,068 real sentences, same
# model and decoding settings, in the same run. Prints both and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/paraforge
OUT=bench-out/pipeline
rm -rf "$OUT"; mkdir -p "$OUT"
cut -f3 data/sample/czeng16-heldout.cs-en.tsv > "$OUT/cs.txt"
N=$(wc -l < "$OUT/cs.txt")

sed -e 's#^output = .*#output = "'"$OUT"'/out"#' \
    -e 's#^threads = .*#threads = 2#' \
    -e 's#^local = .*#local = 1#' \
    -e '/^\[bins\]/,/^train_sample/d' \
    pipeline-configs/demo.toml > "$OUT/job.toml"

# The engine alone (timing excludes model loading).
$BIN translate --model models/tiny-cs-en --beam 12 --batch-size 16 --max-new-tokens 96 \
  --threads 2 --timing "$OUT/cs.txt" -o /dev/null 2> "$OUT/engine.log"
ENGINE=$(grep '^{' "$OUT/engine.log" | tail -1)

# The whole pipeline, wall clock from start to _SUCCESS (includes model load).
START=$(date +%s.%N)
$BIN run --config "$OUT/job.toml" > "$OUT/run.log" 2>&1
END=$(date +%s.%N)

python3 - "$ENGINE" "$START" "$END" "$N" <<'PY'
import json, sys
e = json.loads(sys.argv[1]); start, end, n = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
engine = e["sentences"] / e["seconds"]
pipe = n / (end - start)
print(f"engine alone:  {engine:8.1f} pairs/s ({e['sentences']} sentences, {e['seconds']:.1f} s)")
print(f"paraforge run: {pipe:8.1f} pairs/s ({n} pairs, {end - start:.1f} s wall, model load included)")
print(f"ratio:         {pipe / engine:.2f}")
PY
