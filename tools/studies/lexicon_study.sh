#!/usr/bin/env bash
# What the corpus gives beyond sentence encoders (docs/replication.md,
# "Beyond sentence encoders"): the paraphrase lexicon of Wieting and Gimpel
# (2018, appendix A.1) at several minimum counts on SimLex-999 and
# WordSim-353, PARAGRAM word vectors (Wieting et al., 2015) from it over a
# small grid, the transfer tasks (appendix A.2) for GloVe averaging, a
# WORD model trained on the corpus and the default TRIGRAM scorer, and the
# supervised SICK training of Wieting et al. (2016) for the same three.
#
# usage: tools/studies/lexicon_study.sh CORPUS_DIR [TASKS_DIR]
#   CORPUS_DIR: a finished output (tools/studies/replicate.sh's step 1 with
#   `[scoring] model = "models/scorer-trigram"`); TASKS_DIR: the transfer
#   tasks' files (default data/sts/sick2014: SICK only).
#   env: OUT (bench-out/lexicon), PARAFORGE_BIN (target/release/paraforge)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: $0 CORPUS_DIR [TASKS_DIR]" >&2; exit 2; }
CORPUS=$1
TASKS=${2:-data/sts/sick2014}
OUT=${OUT:-bench-out/lexicon}
BIN=${PARAFORGE_BIN:-target/release/paraforge}
G=data/vectors/glove.6B.50d.top25k.txt.gz
mkdir -p "$OUT"
log() { echo "== $(date +%H:%M:%S) $*"; }

log "lexicons"
lex=()
for m in 1 2 3 5; do
  [ -f "$OUT/lex-min$m/_SUCCESS" ] || $BIN lexicon --data "$CORPUS" --out "$OUT/lex-min$m" --min-count "$m"
  lex+=(--lexicon "$OUT/lex-min$m")
done
$BIN eval-words "${lex[@]}" --json "$OUT/lexicon-words.json"

log "PARAGRAM word vectors (chosen on WordSim-353; SimLex-999 held out)"
vecs=(--vectors "$G")
for pmi in 0.5 1 1.5; do
  for lam in 1e-6 1e-4 1e-3; do
    o="$OUT/paragram-pmi$pmi-lambda$lam.txt"
    [ -f "$o" ] || $BIN train --model paragram-words --data "$OUT/lex-min3" --init-vectors "$G" \
      --lexicon-min-pmi "$pmi" --lambda-w "$lam" --out "$o"
    vecs+=(--vectors "$o")
  done
done
$BIN eval-words "${vecs[@]}" --json "$OUT/paragram-words.json"

log "transfer tasks"
[ -f "$OUT/word.pfe" ] || $BIN train --model word --data "$CORPUS" --init-vectors "$G" --out "$OUT/word.pfe"
$BIN eval-transfer --vectors "$G" --tasks "$TASKS" --json "$OUT/transfer-glove.json"
$BIN eval-transfer --model "$OUT/word.pfe" --tasks "$TASKS" --json "$OUT/transfer-word.json"
$BIN eval-transfer --model models/scorer-trigram --tasks "$TASKS" --json "$OUT/transfer-trigram.json"

log "supervised SICK (Wieting et al., 2016, Table 5): the tables trained, and frozen"
S=data/sts/sick2014
$BIN eval-transfer --vectors "$G" --tasks "$S" --fine-tune --json "$OUT/supervised-glove.json"
$BIN eval-transfer --model "$OUT/word.pfe" --tasks "$S" --fine-tune --json "$OUT/supervised-word.json"
$BIN eval-transfer --model models/scorer-trigram --tasks "$S" --fine-tune --json "$OUT/supervised-trigram.json"
