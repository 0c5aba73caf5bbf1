#!/usr/bin/env bash
set -euo pipefail
cd /work/main
CORPUS=bench-out/replication/corpus
OUT=bench-out/rnn-study
BIN=target/release/paraforge
VECTORS=data/vectors/glove.6B.50d.top25k.txt.gz
mkdir -p $OUT
[ -f "$OUT/short/_SUCCESS" ] || $BIN filter --data "$CORPUS" --out "$OUT/short" --max-tokens 20 --max candidate_rank=1
run() { local out=$1; shift; [ -e "$OUT/$out" ] && return 0; local t0=$SECONDS
  echo "== $(date +%T) $out: $*"
  env "$@" $BIN train --data "$OUT/short" --model rnn --seed 1 --megabatch 20 --max-pairs 20000 \
    --init-vectors "$VECTORS" --min-word-count 2 --epochs 3 --out "$OUT/$out" > "$OUT/$out.log" 2>&1
  grep -E "^epoch|kept" "$OUT/$out.log"; echo "   $((SECONDS - t0)) s"; }
run base X=1
run lasagne PFSTUDY_RNN_INIT=lasagne
run relu PFSTUDY_RNN_ACT=relu
run clip1 PFSTUDY_CLIP=1
run lasagne-relu PFSTUDY_RNN_INIT=lasagne PFSTUDY_RNN_ACT=relu
for m in base lasagne clip1; do $BIN eval-sts --vectors "$VECTORS" --model $OUT/$m --json $OUT/sts-$m.json > $OUT/sts-$m.md; cat $OUT/sts-$m.md; done
for m in relu lasagne-relu; do PFSTUDY_RNN_ACT=relu $BIN eval-sts --vectors "$VECTORS" --model $OUT/$m --json $OUT/sts-$m.json > $OUT/sts-$m.md; cat $OUT/sts-$m.md; done
