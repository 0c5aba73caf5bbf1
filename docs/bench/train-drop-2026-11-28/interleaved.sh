#!/usr/bin/env bash
# LSTM training speed of three binaries on the same data, interleaved.
# OLD_FAST and OLD_SLOW: release builds of 3f5c463 and 899da0e (README.md).
cd "$(dirname "$0")/../../.."
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$PWD/.cache/ort/onnxruntime-1.31.1/libonnxruntime.so.1.31.1}
OLD_FAST=${OLD_FAST:-/work/paraforge-3f5c463}
OLD_SLOW=${OLD_SLOW:-/work/paraforge-899da0e}
V=data/vectors/glove.6B.50d.top25k.txt.gz
D=bench-out/train/data
for rep in 1 2 3; do
 for b in "$OLD_FAST" "$OLD_SLOW" target/release/paraforge; do
  for model in lstm blstm; do
   for t in 1 2; do
    rm -rf /tmp/dropm
    line=$($b train --data $D --model $model --init-vectors $V --megabatch 1 --scramble 0 --no-dev --epochs 1 --max-pairs 2000 --shuffle-buffer 1 --threads $t --out /tmp/dropm 2>/tmp/drop.err | grep '^epoch 1')
    echo "$rep $(basename $b) $model t$t $line"
   done
  done
 done
done
