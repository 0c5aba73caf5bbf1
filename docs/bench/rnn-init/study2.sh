#!/usr/bin/env bash
set -euo pipefail
cd /work/main
OUT=bench-out/rnn-study
BIN=target/release/paraforge
VECTORS=data/vectors/glove.6B.50d.top25k.txt.gz
run() { local out=$1; shift; local envs=(); while [[ "${1:-}" == *=* ]]; do envs+=("$1"); shift; done
  [ -e "$OUT/$out" ] && return 0; local t0=$SECONDS
  echo "== $(date +%T) $out: ${envs[*]} $*"
  env X=1 "${envs[@]}" $BIN train --data "$OUT/short" --model rnn --seed 1 --megabatch 20 --max-pairs 20000 \
    --init-vectors "$VECTORS" --min-word-count 2 --epochs 3 --out "$OUT/$out" "$@" > "$OUT/$out.log" 2>&1
  grep -E "^epoch|kept" "$OUT/$out.log"; echo "   $((SECONDS - t0)) s"
  $BIN eval-sts --vectors "$VECTORS" --model $OUT/$out --json $OUT/sts-$out.json > $OUT/sts-$out.md; }
run h300 --hidden 300
run wh-identity PFSTUDY_RNN_INIT=wh-identity
run identities PFSTUDY_RNN_INIT=identities
python3 /tmp/summ.py $OUT/sts-*.json
