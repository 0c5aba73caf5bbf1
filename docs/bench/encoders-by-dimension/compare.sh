#!/usr/bin/env bash
# The combinations weighted by dimension against the same encoders with
# equal unit parts and TRIGRAM alone (docs/replication.md, "Combinations
# weighted by dimension"): one eval-sts run over all of them, one table.
# Run from the repository root after
#   OUT=bench-out/encoders-bydim TRAIN_ONLY=1 ENCODERS="word,trigram word,trigram,lstm" tools/studies/replicate_encoders.sh
# with the 2026-11-28 table's models in bench-out/encoders-2026-11-28.
set -euo pipefail
BIN=${PARAFORGE_BIN:-target/release/paraforge}
NEW=bench-out/encoders-bydim OLD=bench-out/encoders-2026-11-28
C=$NEW/compare D=docs/bench/encoders-by-dimension
rm -rf "$C"; mkdir -p "$C"
: > "$C/models.tsv"
link() { # from name label spec table
  local from=$1 name=$2 label=$3 spec=$4 tsv=$5 ext=""
  case $from in *.pfe) ext=.pfe ;; esac
  ln -s "$PWD/$from" "$C/$name$ext"
  printf '%s\t%s\t%s\t%s\n' "$name" "$label" "${name##*-s}" \
    "$(awk -F'\t' -v n="$(basename "${from%.pfe}")" '$1 == n {print $4}' "$tsv")" >> "$C/models.tsv"
}
for s in 1 2 3; do
  link "$OLD/models/trigram-s$s.pfe" "trigram-s$s" "trigram" trigram "$OLD/models.tsv"
  link "$OLD/models/word_cat_trigram-s$s.pfe" "word_cat_trigram-unit-s$s" "word,trigram (equal unit parts)" x "$OLD/models.tsv"
  link "$NEW/models/word_cat_trigram-s$s.pfe" "word_cat_trigram-bydim-s$s" "word,trigram (by dimension)" x "$NEW/models.tsv"
  link "$OLD/models/word_cat_trigram_cat_lstm-s$s" "word_cat_trigram_cat_lstm-unit-s$s" "word,trigram,lstm (equal unit parts)" x "$OLD/models.tsv"
  link "$NEW/models/word_cat_trigram_cat_lstm-s$s" "word_cat_trigram_cat_lstm-bydim-s$s" "word,trigram,lstm (by dimension)" x "$NEW/models.tsv"
done
models=()
for m in "$C"/*; do case $m in *.tsv) ;; *) models+=(--model "$m") ;; esac; done
"$BIN" eval-sts "${models[@]}" --json "$C/sts.json" > "$C/sts.md"
python3 tools/studies/encoders_report.py --sts "$C/sts.json" --runs "$C/models.tsv" \
  --papers docs/bench/encoders/paper_figures.json --epochs 5 > "$C/table.md"
mkdir -p "$D/logs"
cp "$C/sts.json" "$C/sts.md" "$C/table.md" "$C/models.tsv" "$D/"
cp "$NEW/models.tsv" "$D/runs.tsv"; cp "$NEW/run.log" "$D/run.log"
cp "$NEW"/logs/*.log "$D/logs/"
