#!/usr/bin/env bash
# Table 8 of Wieting and Gimpel (2018) at this scale (docs/replication.md, "Every encoder"):
# every encoder `paraforge train` has, trained on the same pipeline output
# with the same budget, then `paraforge eval-sts` on STS 2012-2016, the STS
# Benchmark and SICK-R, next to the papers' figures
# (docs/bench/encoders/paper_figures.json) by tools/studies/encoders_report.py.
#
#   1. the corpus: `tools/studies/replicate.sh` step 1 (back-translate the bitext
#      with the demo model, beam 4), unless CORPUS names an existing output;
#   2. every encoder: word vocabulary from the corpus (words seen twice,
#      rows from the 50-d GloVe where known), mega-batches of M = 20,
#      EPOCHS epochs, the best epoch on STS Benchmark dev kept; SEEDS seeds
#      for the encoders in MULTI_SEED (all by default), the first for the rest;
#   3. eval-sts of every model next to GloVe averaging; the table.
# Every model already trained is skipped, so an interrupted run resumes.
#
# usage: tools/studies/replicate_encoders.sh BITEXT.tsv [BITEXT.tsv ...]
#   env: OUT (bench-out/encoders), CORPUS ($OUT/../replication/corpus),
#        EPOCHS (5), SEEDS ("1 2 3"), ENCODERS (all), MULTI_SEED (ENCODERS),
#        VECTORS (the bundled
#        GloVe), PYTHON (python3; the report needs no packages),
#        TRAIN_ONLY (set: train what is missing, skip the evaluation, so
#        that a queue of single runs evaluates once at its end)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-bench-out/encoders}
CORPUS=${CORPUS:-bench-out/replication/corpus}
EPOCHS=${EPOCHS:-5}
SEEDS=${SEEDS:-1 2 3}
VECTORS=${VECTORS:-data/vectors/glove.6B.50d.top25k.txt.gz}
BIN=${PARAFORGE_BIN:-target/release/paraforge}
PY=${PYTHON:-python3}
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$PWD/.cache/ort/onnxruntime-1.31.1/libonnxruntime.so.1.31.1}
ALL="word trigram word+trigram word,trigram lstm lstm-no-o blstm blstm-concat blstm-max gran rnn irnn tree-rnn dan proj gaussian lstm-gaussian word+trigram+lstm word,trigram,lstm"
ENCODERS=${ENCODERS:-$ALL}
# Encoders trained with every seed of SEEDS (the rest with the first):
# all by default.
MULTI_SEED=" ${MULTI_SEED:-$ENCODERS} "
mkdir -p "$OUT/models" "$OUT/logs"
log() { echo "== $(date +%H:%M:%S) $*"; }

if [ ! -f "$CORPUS/_SUCCESS" ]; then
  [ $# -ge 1 ] || { echo "usage: $0 BITEXT.tsv [...] (no corpus at $CORPUS yet)" >&2; exit 2; }
  log "translating into $CORPUS"
  OUT=$(dirname "$CORPUS") TRANSLATE_ONLY=1 tools/studies/replicate.sh "$@"
fi

slug() { echo "$1" | sed 's/,/_cat_/g; s/+/_add_/g'; }

# One model: the averages are .pfe files, the neural encoders directories.
train() { # spec seed
  local spec=$1 seed=$2 name out extra=()
  name="$(slug "$spec")-s$seed"
  case $spec in
    word|trigram|word,trigram) out=$OUT/models/$name.pfe ;;
    *) out=$OUT/models/$name ;;
  esac
  if [ -e "$out" ]; then return 0; fi
  # Trigram tables are 300-d where they stand alone or are concatenated
  # (as in the paper); a sum needs every part at the words' 50.
  case $spec in
    trigram|word,trigram|word,trigram,lstm) extra=(--trigram-dim 300) ;;
    # At the default rate the iRNN's weights blew up within its first
    # epoch (its recurrence starts at the identity, with ReLU).
    irnn) extra=(--lr "${IRNN_LR:-0.0002}") ;;
    # Parsing is most of the tree network's first epoch: its seeds share
    # one file of trees.
    tree-rnn) extra=(--parse-cache "$OUT/tree-rnn-parses.jsonl") ;;
  esac
  # Trigram alone has no word table (its flags would be refused).
  [ "$spec" = trigram ] || extra+=(--min-word-count 2)
  log "train $spec seed $seed"
  local t0=$SECONDS
  $BIN train --data "$CORPUS" --model "$spec" --seed "$seed" --epochs "$EPOCHS" \
    --megabatch 20 --init-vectors "$VECTORS" "${extra[@]}" \
    --checkpoint "$OUT/ckpt/$name" --out "$out" > "$OUT/logs/$name.log" 2>&1
  printf '%s\t%s\t%s\t%s\n' "$name" "$spec" "$seed" "$((SECONDS - t0))" >> "$OUT/models.tsv"
  tail -n 2 "$OUT/logs/$name.log"
}

for spec in $ENCODERS; do
  for seed in $SEEDS; do
    train "$spec" "$seed"
    case $MULTI_SEED in *" $spec "*) ;; *) break ;; esac
  done
done

if [ -n "${TRAIN_ONLY:-}" ]; then exit 0; fi
log "evaluating"
models=()
# The models: .pfe files and neural directories (not the cards beside them).
for m in "$OUT"/models/*; do
  case $m in *.pfe | */) ;; *) [ -d "$m" ] || continue ;; esac
  models+=(--model "$m")
done
$BIN eval-sts --vectors "$VECTORS" "${models[@]}" --json "$OUT/sts.json" > "$OUT/sts.md"
$PY tools/studies/encoders_report.py --sts "$OUT/sts.json" --runs "$OUT/models.tsv" \
  --papers docs/bench/encoders/paper_figures.json --epochs "$EPOCHS" > "$OUT/table.md"
log "done: $OUT/table.md"
