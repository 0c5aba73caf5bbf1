#!/usr/bin/env bash
# End-to-end throughput: `paraforge run` (coordinator + 1 worker with 2
# threads: read, translate, score, Parquet, commit) against the engine alone
# (`paraforge translate --threads 2`) on the same 4,068 real sentences, same
# model and decoding settings, in the same run. Prints both and the ratio.
set -euo pipefail
cd "$(dirname "$0")/../.."
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

# The engine alone (timing excludes model loading), on the job's model.
MODEL=$(sed -n 's/^dir = "\([^"]*\)".*/\1/p' "$OUT/job.toml" | head -1)
$BIN translate --model "$MODEL" --beam 12 --batch-size 16 --max-new-tokens 96 \
  --threads 2 --timing "$OUT/cs.txt" -o /dev/null 2> "$OUT/engine.log"
ENGINE=$(grep '^{' "$OUT/engine.log" | tail -1)

# The same job with every [filters] rule on and the perplexity column (a
# 3-gram model of the sample's references): what they cost end to end.
cut -f4 data/sample/czeng16-heldout.cs-en.tsv > "$OUT/refs.txt"
$BIN lm-train --order 3 "$OUT/refs.txt" -o "$OUT/refs.arpa" > "$OUT/lm.log" 2>&1
sed -e 's#^output = .*#output = "'"$OUT"'/out-filters"#' "$OUT/job.toml" \
  | sed -e 's#^\[scoring\]#[filters]\nmin_tokens = 3\nmax_tokens = 80\nmax_length_ratio = 3.0\ndrop_copies = true\nmin_letter_ratio = 0.5\nsource_lang = "ces"\nreference_lang = "eng"\ndedup_sources = true\n\n[scoring]\nlm = "'"$OUT"'/refs.arpa"#' \
  > "$OUT/job-filters.toml"

# The whole pipeline, wall clock from start to _SUCCESS (includes model
# load); plain and with filters alternate, two runs each.
run() {
  local cfg=$1 start end
  rm -rf "$(grep '^output' "$cfg" | cut -d'"' -f2)"
  start=$(date +%s.%N)
  $BIN run --config "$cfg" > "$OUT/run-$(basename "$cfg" .toml).log" 2>&1
  end=$(date +%s.%N)
  python3 -c "print($end - $start)"
}
PLAIN=(); FILTERS=()
for _ in 1 2; do
  PLAIN+=("$(run "$OUT/job.toml")")
  FILTERS+=("$(run "$OUT/job-filters.toml")")
done
grep "rejected by reason" "$OUT/run-job-filters.log" || true

python3 - "$ENGINE" "$N" "${PLAIN[*]}" "${FILTERS[*]}" <<'PY'
import json, sys
e = json.loads(sys.argv[1]); n = int(sys.argv[2])
plain = min(float(x) for x in sys.argv[3].split()); filt = min(float(x) for x in sys.argv[4].split())
engine = e["sentences"] / e["seconds"]
pipe, pipe_f = n / plain, n / filt
print(f"engine alone:  {engine:8.1f} pairs/s ({e['sentences']} sentences, {e['seconds']:.1f} s)")
print(f"paraforge run: {pipe:8.1f} input pairs/s ({n} pairs, {plain:.1f} s wall, model load included; best of {sys.argv[3]})")
print(f"ratio:         {pipe / engine:.2f}")
print(f"with [filters] and translation_perplexity: {pipe_f:8.1f} input pairs/s ({filt:.1f} s; best of {sys.argv[4]}); "
      f"cost {100 * (1 - pipe_f / pipe):.1f}% of end-to-end throughput")
PY
