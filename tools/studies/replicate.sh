#!/usr/bin/env bash
# Small-scale replication of the training experiments of Wieting and Gimpel (2018) (docs/replication.md).
#
#   1. back-translate a CzEng-layout bitext with the demo model, score it with
#      GloVe, bin it (deciles of para_score, trigram_overlap, translation_score);
#   2. mega-batching (Table 6): WORD, TRIGRAM, WORD,TRIGRAM with M = 1, 20, 40 on
#      TRAIN_DATA (default: every pair), EPOCHS epochs, SEEDS seeds each;
#   3. the loop: export the WORD M=20 model's vectors, `paraforge rescore`
#      the corpus with them, bin the new para_score;
#   4. filtering (Table 5): WORD and TRIGRAM trained on each of the ten
#      deciles of each criterion (GloVe para_score, trained para_score,
#      trigram overlap, translation score), FOLD_EPOCHS epochs, M = 20;
#   5. every model on STS next to GloVe averaging; tables and a figure from
#      tools/studies/replication_report.py.
# Every step is skipped when its output exists, so an interrupted run resumes.
#
# usage: tools/studies/replicate.sh BITEXT.tsv [BITEXT.tsv ...]
#   env: MODEL (models/demo-cs-en), BEAM (4), VECTORS (the bundled GloVe),
#        EPOCHS (5), SEEDS ("1 2 3"), FOLD_EPOCHS (20), TRIGRAM_DIM (300),
#        OUT (bench-out/replication), TRANSLATE_ONLY (stop after step 1:
#        tools/models/train_scorer.sh reuses it for the corpus the default scorer
#        is trained on)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: $0 BITEXT.tsv [...]" >&2; exit 2; }
MODEL=${MODEL:-models/demo-cs-en}
BEAM=${BEAM:-4}
VECTORS=${VECTORS:-data/vectors/glove.6B.50d.top25k.txt.gz}
EPOCHS=${EPOCHS:-5}
SEEDS=${SEEDS:-1 2 3}
FOLD_EPOCHS=${FOLD_EPOCHS:-20}
TRIGRAM_DIM=${TRIGRAM_DIM:-300}
OUT=${OUT:-bench-out/replication}
TRAIN_DATA=${TRAIN_DATA:-$OUT/corpus}
BIN=${PARAFORGE_BIN:-target/release/paraforge}
PY=${PYTHON:-python3}
mkdir -p "$OUT/models"
log() { echo "== $(date +%H:%M:%S) $*"; }

# 1. Translate, score, bin.
paths=$(printf '"%s", ' "$(realpath "$1")"; shift; for p in "$@"; do printf '"%s", ' "$(realpath "$p")"; done)
if [ ! -f "$OUT/corpus/_SUCCESS" ]; then
  log "translating"
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
[ -f "$OUT/report/report.md" ] || $BIN report --data "$OUT/corpus" --out "$OUT/report" > /dev/null
[ -z "${TRANSLATE_ONLY:-}" ] || exit 0

train() { # name data model M seed epochs
  [ -f "$OUT/models/$1.pfe" ] && return 0
  log "train $1"
  # Trigram tables are 300-d as in the paper, also beside 50-d words.
  local dim=()
  [ "$3" = word ] || dim=(--trigram-dim "$TRIGRAM_DIM")
  $BIN train --data "$2" --model "$3" --megabatch "$4" --seed "$5" --epochs "$6" \
    --init-vectors "$VECTORS" "${dim[@]}" --out "$OUT/models/$1.pfe" 2>&1 | tail -1
}

# Untrained baselines (0 epochs: GloVe rows as given, random trigram rows).
train init-word "$OUT/corpus" word 1 1 0
train init-trigram "$OUT/corpus" trigram 1 1 0
train init-word-trigram "$OUT/corpus" word,trigram 1 1 0

# 2. Mega-batching.
for m in word trigram word,trigram; do
  for M in 1 20 40; do
    for s in $SEEDS; do train "mb-${m/,/-}-M$M-s$s" "$TRAIN_DATA" "$m" "$M" "$s" "$EPOCHS"; done
  done
done

# 3. Close the loop: trained vectors as the para_score scorer.
first_seed=${SEEDS%% *}
if [ ! -f "$OUT/rescored/_manifest.json" ]; then
  log "export and rescore"
  $BIN export-vectors --model "$OUT/models/mb-word-M20-s$first_seed.pfe" --out "$OUT/trained-vectors.txt" --overwrite
  $BIN rescore --data "$OUT/corpus" --vectors "$OUT/trained-vectors.txt" --out "$OUT/rescored" \
    | tee "$OUT/rescore.log"
fi
[ -f "$OUT/report-rescored/report.md" ] || $BIN report --data "$OUT/rescored" --out "$OUT/report-rescored" > /dev/null
[ -f "$OUT/bins-rescored/_manifest.json" ] || $BIN bin --data "$OUT/rescored" --out "$OUT/bins-rescored" \
  --deciles para_score | tee "$OUT/bin-rescored.log"

# 4. Filtering: every decile of every criterion.
for crit in glove:bins/deciles/para_score trained:bins-rescored/deciles/para_score \
            trigram:bins/deciles/trigram_overlap translation:bins/deciles/translation_score; do
  name=${crit%%:*}
  dir=$OUT/${crit#*:}
  for fold in 0 1 2 3 4 5 6 7 8 9; do
    for m in word trigram; do train "fold-$name-$fold-$m" "$dir/fold=$fold" "$m" 20 1 "$FOLD_EPOCHS"; done
  done
done

# 5. Evaluate and tabulate.
log "evaluating"
$BIN eval-sts --vectors "$VECTORS" $(ls "$OUT"/models/*.pfe | sed 's/^/--model /') \
  --json "$OUT/sts.json" > "$OUT/sts.md"
$PY tools/studies/replication_report.py "$OUT"
log "done: $OUT/replication.md"
