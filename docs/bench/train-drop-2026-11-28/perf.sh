#!/usr/bin/env bash
# perf profiles of the LSTM epoch (1 thread, 2,000 pairs) of each binary.
cd /work/main
export ORT_DYLIB_PATH=/work/main/.cache/ort/onnxruntime-1.31.1/libonnxruntime.so.1.31.1
V=data/vectors/glove.6B.50d.top25k.txt.gz
D=bench-out/train/data
for b in /work/paraforge-3f5c463 /work/paraforge-899da0e target/release/paraforge; do
  n=$(basename $b); [ $n = paraforge ] && n=current
  rm -rf /tmp/dropm /tmp/dropm2
  perf record -F 2000 -g -o /tmp/perf-$n.data -- $b train --data $D --model lstm --init-vectors $V --megabatch 1 --scramble 0 --no-dev --epochs 1 --max-pairs 2000 --shuffle-buffer 1 --threads 1 --out /tmp/dropm 2>/dev/null | grep '^epoch 1' | sed "s|^|$n |"
  perf report -i /tmp/perf-$n.data --no-children --sort dso,symbol --stdio 2>/dev/null | grep -v '^#' | grep '%' | head -25 > /tmp/perf-$n.txt
  perf stat -e task-clock,page-faults,context-switches -o /tmp/stat-$n.txt -- $b train --data $D --model lstm --init-vectors $V --megabatch 1 --scramble 0 --no-dev --epochs 1 --max-pairs 2000 --shuffle-buffer 1 --threads 1 --out /tmp/dropm2 2>/dev/null | grep '^epoch 1' | sed "s|^|$n (stat) |"
done
