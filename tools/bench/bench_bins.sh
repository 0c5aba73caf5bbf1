#!/usr/bin/env bash
# Binning benchmark: `paraforge bin` on 10M rows of real scored pairs
# (the bundled sample's back-translations, repeated with distinct ids), with
# peak memory from /usr/bin/time. Usage: tools/bench/bench_bins.sh [ROWS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROWS=${1:-10000000}
OUT=bench-out/bins
BIN=target/release/paraforge
mkdir -p "$OUT"
if [ ! -f "$OUT/pairs.tsv" ]; then
  cut -f3 data/sample/czeng16-heldout.cs-en.tsv > "$OUT/cs.txt"
  $BIN translate --model models/tiny-cs-en --beam 4 --max-new-tokens 64 --scores "$OUT/cs.txt" -o "$OUT/en.tsv"
  paste <(cut -f1,3,4 data/sample/czeng16-heldout.cs-en.tsv) <(cut -f2 "$OUT/en.tsv") <(cut -f1 "$OUT/en.tsv") > "$OUT/pairs.tsv"
fi
rm -rf "$OUT/data" "$OUT/binned"
mkdir -p "$OUT/data"
target/release/examples/make_rows "$OUT/pairs.tsv" data/vectors/glove.6B.50d.top25k.txt.gz "$OUT/data" "$ROWS" 10
du -sh "$OUT/data"
/usr/bin/time -v $BIN bin --data "$OUT/data" --out "$OUT/binned" \
  --deciles para_score,trigram_overlap,translation_score --train-sample 1000000 2> "$OUT/time.txt"
grep -E "Maximum resident set size|Elapsed \(wall clock\)" "$OUT/time.txt"
