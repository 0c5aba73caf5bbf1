#!/usr/bin/env bash
# perf profiles of the LSTM epoch (1 thread, 2,000 pairs) of each binary.
# OLD_FAST and OLD_SLOW: release builds of 3f5c463 and 899da0e (README.md).
cd "$(dirname "$0")/../../.."
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$PWD/.cache/ort/onnxruntime-1.31.1/libonnxruntime.so.1.31.1}
OLD_FAST=${OLD_FAST:-/work/paraforge-3f5c463}
OLD_SLOW=${OLD_SLOW:-/work/paraforge-899da0e}
V=data/vectors/glove.6B.50d.top25k.txt.gz
D=bench-out/train/data
for b in "$OLD_FAST" "$OLD_SLOW" target/release/paraforge; do
  n=$(basename $b); [ $n = paraforge ] && n=current
  rm -rf /tmp/dropm /tmp/dropm2
  perf record -F 2000 -g -o /tmp/perf-$n.data -- $b train --data $D --model lstm --init-vectors $V --megabatch 1 --scramble 0 --no-dev --epochs 1 --max-pairs 2000 --shuffle-buffer 1 --threads 1 --out /tmp/dropm 2>/dev/null | grep '^epoch 1' | sed "s|^|$n |"
  perf report -i /tmp/perf-$n.data --no-children --sort dso,symbol --stdio 2>/dev/null | grep -v '^#' | grep '%' | head -25 > /tmp/perf-$n.txt
  perf stat -e task-clock,page-faults,context-switches -o /tmp/stat-$n.txt -- $b train --data $D --model lstm --init-vectors $V --megabatch 1 --scramble 0 --no-dev --epochs 1 --max-pairs 2000 --shuffle-buffer 1 --threads 1 --out /tmp/dropm2 2>/dev/null | grep '^epoch 1' | sed "s|^|$n (stat) |"
done
