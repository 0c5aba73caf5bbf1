#!/usr/bin/env bash
# The recursive network over parse trees (Wieting et al., 2015) next to the
# LSTM and the word average, trained alike (docs/replication.md, "The
# recursive network over parse trees"): 20,000 pairs of at most 20 tokens
# from a finished corpus, 50-d GloVe rows, M = 20, the best epoch on STS
# Benchmark dev kept; then eval-sts on STS 2012-2016, STS Benchmark and
# SICK-R. Also the untrained tree network, and one trained with MAX
# negatives (which collapses, hence tree-rnn's MIX default).
#
#   tools/studies/tree_rnn_study.sh CORPUS [OUT]
#
# CORPUS: a finished output (the lexicon study's, tools/studies/replicate.sh step 1).
# Needs Link Grammar (`make link-grammar`) and the release binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
CORPUS=${1:?usage: tools/studies/tree_rnn_study.sh CORPUS [OUT]}
OUT=${2:-bench-out/tree}
EPOCHS=${EPOCHS:-6}
BIN=${PARAFORGE:-target/release/paraforge}
VECTORS=${VECTORS:-data/vectors/glove.6B.50d.top25k.txt.gz}
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$PWD/.cache/ort/onnxruntime-1.31.1/libonnxruntime.so.1.31.1}
mkdir -p "$OUT"
[ -f "$OUT/short/_SUCCESS" ] ||
  "$BIN" filter --data "$CORPUS" --out "$OUT/short" --max-tokens 20 --max candidate_rank=1

run() { # out model [options]
  local out=$1 model=$2 t0=$SECONDS
  shift 2
  [ -e "$OUT/$out" ] && return 0
  echo "== $(date +%T) $out: $model $*"
  "$BIN" train --data "$OUT/short" --model "$model" --seed 1 --megabatch 20 --max-pairs 20000 \
    --init-vectors "$VECTORS" --min-word-count 2 --out "$OUT/$out" "$@" > "$OUT/${out%.pfe}.log" 2>&1
  grep -E "^epoch|kept" "$OUT/${out%.pfe}.log"
  echo "   $((SECONDS - t0)) s"
}
run tree-rnn-e0 tree-rnn --epochs 0
run tree-rnn-max tree-rnn --epochs 3 --negatives max --lr 0.001 --lambda-c 0 --lambda-w 0
run final-tree-rnn tree-rnn --epochs "$EPOCHS"
run final-lstm lstm --epochs "$EPOCHS"
run final-word.pfe word --epochs "$EPOCHS"
"$BIN" eval-sts --vectors "$VECTORS" --model "$OUT/tree-rnn-e0" --model "$OUT/tree-rnn-max" \
  --model "$OUT/final-tree-rnn" --model "$OUT/final-lstm" --model "$OUT/final-word.pfe" \
  --json "$OUT/sts.json" > "$OUT/sts.md"
cat "$OUT/sts.md"
