#!/usr/bin/env bash
# Trains the default para_score model (models/scorer-trigram) with the
# project's own loop, and writes its evaluation:
#
#   1. the shared bitext minus the held-out evaluation pairs (the ids of
#      data/sample/czeng16-heldout.cs-en.tsv, HELD_OUT_PREFIXES in
#      tools/models/marian_model.py), so that the demo never scores pairs its
#      scorer was trained on;
#   2. back-translated with models/demo-cs-en (beam 4), scored and binned by
#      tools/studies/replicate.sh's first step (TRANSLATE_ONLY=1);
#   3. TRIGRAM models (the charagram averaging of Wieting and Gimpel, 2018) trained on every pair
#      with mega-batches of M = 20, one per candidate setting (CANDIDATES:
#      "trigram-dim:epochs" ...), saved as bfloat16 (PRECISION): the scorer
#      reads half the bytes per trigram, and every figure below is of the
#      saved model;
#   4. each evaluated by `paraforge eval-sts` next to GloVe averaging; among
#      the candidates of at most MAX_DIM dimensions (the scorer's speed
#      floor: it must keep 500k pairs/s on 2 cores, and the row sums grow with the
#      dimension; docs/bench/HISTORY.md, "Pair scoring"), the one with the best STS
#      Benchmark *dev* Pearson is kept (test stays unseen; within 0.2 points
#      the smaller, faster one) and copied to DEST, then evaluated in detail.
# Resumes: every step is skipped when its output exists.
#
# usage: tools/models/train_scorer.sh [BITEXT.tsv ...]   (default: ../shared/data/bitext/*.tsv)
#   env: OUT (bench-out/scorer), DEST (models/scorer-trigram),
#        CANDIDATES ("300:10 200:10 160:10 128:10 100:10"), MAX_DIM (128),
#        MIN_TRIGRAM_COUNT (2), SEED (1), PRECISION (bf16),
#        PARAFORGE_BIN (target/release/paraforge),
#        FROM_CORPUS: a job output that already back-translated the *whole*
#        bitext the same way (e.g. tools/studies/replicate.sh's, beam 4): step 2 then
#        takes its rows minus the held-out ids instead of translating again
#        (the translations are the same: decoding does not depend on the
#        batch; needs PYTHON with pyarrow)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-bench-out/scorer}
DEST=${DEST:-models/scorer-trigram}
CANDIDATES=${CANDIDATES:-300:10 200:10 160:10 128:10 100:10}
MAX_DIM=${MAX_DIM:-128}
PY=${PYTHON:-python3}
MIN_TRIGRAM_COUNT=${MIN_TRIGRAM_COUNT:-2}
SEED=${SEED:-1}
PRECISION=${PRECISION:-bf16}
BIN=${PARAFORGE_BIN:-target/release/paraforge}
GLOVE=data/vectors/glove.6B.50d.top25k.txt.gz
[ $# -ge 1 ] || set -- ../shared/data/bitext/*.tsv
mkdir -p "$OUT/models"
log() { echo "== $(date +%H:%M:%S) $*"; }

# 1. Held out: the evaluation sets named in the demo models' cards.
if [ ! -f "$OUT/bitext-train.tsv" ]; then
  cat "$@" | grep -v -E '^(multi30k-test-2016-flickr-|multi30k-test-2018-flickr-|wmt19-newstest2019encs-)' \
    > "$OUT/bitext-train.tsv.tmp"
  mv "$OUT/bitext-train.tsv.tmp" "$OUT/bitext-train.tsv"
fi
log "$(wc -l < "$OUT/bitext-train.tsv") training pairs (held-out sets excluded)"

# 2. Back-translate, score (GloVe), bin; or the rows of an earlier
# translation of the whole bitext, minus the held-out ids.
if [ -n "${FROM_CORPUS:-}" ] && [ ! -f "$OUT/corpus/_manifest.json" ]; then
  log "taking the back-translations from $FROM_CORPUS"
  mkdir -p "$OUT/corpus"
  $PY - "$FROM_CORPUS" "$OUT/corpus" <<'PY'
import glob, json, re, sys
import pyarrow as pa, pyarrow.parquet as pq
src, out = sys.argv[1:]
held = re.compile(r"^(multi30k-test-2016-flickr-|multi30k-test-2018-flickr-|wmt19-newstest2019encs-)")
files = [f["path"] for f in json.load(open(f"{src}/_manifest.json"))["files"] if f["path"].endswith(".parquet")]
parts = []
for f in files:
    t = pq.read_table(f"{src}/{f}")
    parts.append(t.filter(pa.array([not held.match(i) for i in t.column("id").to_pylist()])))
t = pa.concat_tables(parts)
pq.write_table(t, f"{out}/part-00000.parquet", compression="zstd")
json.dump({"from": src, "rows": t.num_rows, "files": [{"path": "part-00000.parquet", "rows": t.num_rows}]},
          open(f"{out}/_manifest.json", "w"))
print(f"{t.num_rows} pairs")
PY
elif [ -z "${FROM_CORPUS:-}" ]; then
  OUT=$OUT TRANSLATE_ONLY=1 PARAFORGE_BIN=$BIN tools/studies/replicate.sh "$OUT/bitext-train.tsv"
fi

# 3. Candidates.
for c in $CANDIDATES; do
  dim=${c%%:*}
  epochs=${c#*:}
  name="trigram-d$dim-e$epochs"
  [ -f "$OUT/models/$name.pfe" ] && continue
  log "train $name"
  $BIN train --data "$OUT/corpus" --model trigram --megabatch 20 --seed "$SEED" \
    --epochs "$epochs" --trigram-dim "$dim" --min-trigram-count "$MIN_TRIGRAM_COUNT" \
    --precision "$PRECISION" --no-dev --out "$OUT/models/$name.pfe" 2>&1 | tee "$OUT/models/$name.log" | tail -1
done

# 4. Evaluate, select on STSB dev, install.
log "evaluating"
$BIN eval-sts --vectors "$GLOVE" $(ls "$OUT"/models/*.pfe | sed 's/^/--model /') \
  --json "$OUT/sts.json" > "$OUT/sts.md"
best=$(python3 - "$OUT/sts.json" "$MAX_DIM" <<'PY'
import json, sys
cols = json.load(open(sys.argv[1]))
dev = {c["model"].split(" ")[0]: g["pearson"] for c in cols for g in c["groups"] if g["group"] == "STSB-dev"}
dim = lambda m: int(m.split("-d")[1].split("-")[0])
dev = {m: p for m, p in dev.items() if m.endswith(".pfe") and dim(m) <= int(sys.argv[2])}
# Best dev Pearson; within 0.2 points, the smaller model (faster scoring).
top = max(dev.values())
print(min((m for m, p in dev.items() if p >= top - 0.2), key=lambda m: (dim(m), -dev[m])))
PY
)
log "selected $best (best STS Benchmark dev Pearson at most $MAX_DIM dimensions)"
mkdir -p "$DEST"
cp "$OUT/models/$best" "$DEST/model.pfe"
$BIN eval-sts --vectors "$GLOVE" --model "$DEST/model.pfe" --detail --json "$OUT/scorer-sts.json" \
  > "$OUT/scorer-sts.md"
log "done: $DEST/model.pfe ($(du -h "$DEST/model.pfe" | cut -f1)); STS in $OUT/scorer-sts.md"
