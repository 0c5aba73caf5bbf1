#!/usr/bin/env bash
# Small-scale replication of seed 000's training experiments (issue: the
# training stage). Back-translates a CzEng-layout bitext with the demo model,
# bins it, trains WORD and WORD,TRIGRAM (a) with M = 1, 20, 40 on
# TRAIN_DATA (default: every pair of the corpus; with millions of pairs use
# the paper's training sample, `bins/train`) and (b) on the top versus the
# bottom para_score fold, and evaluates every model next to GloVe averaging.
#
# usage: tools/replicate.sh BITEXT.tsv [BITEXT.tsv ...]
#   env: MODEL (models/demo-cs-en), BEAM (4), VECTORS (the bundled GloVe),
#        EPOCHS (5), OUT (bench-out/replication)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BITEXT.tsv [...]" >&2; exit 2; }
MODEL=${MODEL:-models/demo-cs-en}
BEAM=${BEAM:-4}
VECTORS=${VECTORS:-data/vectors/glove.6B.50d.top25k.txt.gz}
EPOCHS=${EPOCHS:-5}
OUT=${OUT:-bench-out/replication}
TRAIN_DATA=${TRAIN_DATA:-$OUT/corpus}
BIN=target/release/paraforge
mkdir -p "$OUT"
paths=$(printf '"%s", ' "$(realpath "$1")"; shift; for p in "$@"; do printf '"%s", ' "$(realpath "$p")"; done)
if [ ! -f "$OUT/corpus/_SUCCESS" ]; then
  cat > "$OUT/job.toml" <<TOML
[job]
name = "replication"
output = "$OUT/corpus"
shard_pairs = 2000
[input]
paths = [${paths%, }]
format = "czeng16"
[model]
dir = "$MODEL"
threads = 1
beam = $BEAM
batch_size = 32
max_new_tokens = 64
[scoring]
vectors = "$VECTORS"
[bins]
output = "$OUT/bins"
deciles = ["para_score", "trigram_overlap", "translation_score"]
train_sample = 40000
[coordinator]
listen = "127.0.0.1:0"
metrics = "127.0.0.1:0"
[workers]
local = 2
TOML
  $BIN run --config "$OUT/job.toml" | tee "$OUT/run.log"
fi
$BIN report --data "$OUT/corpus" --out "$OUT/report" > /dev/null
train() { # name data model M
  [ -f "$OUT/models/$1.pfe" ] || $BIN train --data "$2" --model "$3" --megabatch "$4" \
    --init-vectors "$VECTORS" --epochs "$EPOCHS" --seed 1 --out "$OUT/models/$1.pfe" | tail -2
}
mkdir -p "$OUT/models"
for m in word word,trigram; do
  n=${m/,/-}
  for M in 1 20 40; do train "$n-M$M" "$TRAIN_DATA" "$m" "$M"; done
  train "$n-top" "$OUT/bins/deciles/para_score/fold=9" "$m" 20
  train "$n-bottom" "$OUT/bins/deciles/para_score/fold=0" "$m" 20
done
$BIN eval-sts --vectors "$VECTORS" $(ls "$OUT"/models/*.pfe | sed 's/^/--model /') \
  --json "$OUT/sts.json" | tee "$OUT/sts.md"
