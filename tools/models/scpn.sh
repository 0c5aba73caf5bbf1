#!/usr/bin/env bash
# Syntactic control for the bundled paraphraser (Wieting and Gimpel, 2018,
# section 6, after Iyyer et al., 2018): the paraphraser learns to follow a
# target template, the top two levels of a constituent tree without its
# words (`(S (NP) (VP) (.))`, from Link Grammar: `paraforge parse
# --template 2`). One model does both: it is fine-tuned from the plain
# paraphraser on the same pairs, half of the inputs prefixed with their
# target's template and ` || `, so `paraforge paraphrase` paraphrases freely
# and `paraforge paraphrase --template T` to a template. With CHANGED=1
# (the default), a pair whose target's template differs from its input's
# always gets it (the template then says something the input does not),
# the others with probability SHARE.
#
# It resumes from its own checkpoint in WORK/train when there is one: the
# bundled model is `SHARE=0.5 CHANGED=0 MINUTES=50 tools/models/scpn.sh` followed
# by `SHARE=0.3 MINUTES=30 tools/models/scpn.sh` (docs/replication.md).
#
#   tools/models/scpn.sh [OUT]
#
# Reads tools/models/paraphraser.sh's work directory (its pairs and its trained
# checkpoint, .cache/paraphrase); writes OUT (default models/paraphrase-en).
# Needs `make venv`, Link Grammar (`make link-grammar`) and the release
# binary. Logs under .cache/scpn.
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${1:-models/paraphrase-en}
FROM=${FROM:-.cache/paraphrase}
WORK=${WORK:-.cache/scpn}
MINUTES=${MINUTES:-45}
SHARE=${SHARE:-0.3}
CHANGED=${CHANGED:-1}
PY=.venv/bin/python
BIN=${PARAFORGE:-target/release/paraforge}
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$PWD/.cache/ort/onnxruntime-1.31.1/libonnxruntime.so.1.31.1}

mkdir -p "$WORK"
if [ ! -s "$WORK/templates.txt" ]; then
  cut -f4 "$FROM/pairs.tsv" > "$WORK/targets.txt"
  "$BIN" parse --template 2 "$WORK/targets.txt" > "$WORK/templates.tmp"
  mv "$WORK/templates.tmp" "$WORK/templates.txt"
fi
if [ "$CHANGED" = 1 ] && [ ! -s "$WORK/input-templates.txt" ]; then
  cut -f3 "$FROM/pairs.tsv" > "$WORK/inputs.txt"
  "$BIN" parse --template 2 "$WORK/inputs.txt" > "$WORK/input-templates.tmp"
  mv "$WORK/input-templates.tmp" "$WORK/input-templates.txt"
fi
[ "$CHANGED" = 1 ] || : > "$WORK/no-input-templates.txt"

INPUT_TEMPLATES="$WORK/input-templates.txt"
[ "$CHANGED" = 1 ] || INPUT_TEMPLATES="$WORK/no-input-templates.txt"
"$PY" - "$FROM/pairs.tsv" "$WORK/templates.txt" "$WORK/pairs.tsv" "$SHARE" "$INPUT_TEMPLATES" <<'PYEOF'
import itertools, random, sys
pairs, templates, out, share, inputs = sys.argv[1:6]
share = float(share)
random.seed(1)
n = with_t = changed = 0
with open(pairs, encoding="utf-8") as p, open(templates, encoding="utf-8") as t, \
        open(inputs, encoding="utf-8") as i, open(out, "w", encoding="utf-8") as o:
    for line, tpl, itpl in zip(p, t, itertools.chain(i, itertools.repeat(""))):
        id_, score, src, tgt = line.rstrip("\n").split("\t")
        tpl, itpl = tpl.strip(), itpl.strip()
        differs = bool(itpl) and tpl != itpl
        changed += differs
        if tpl and (differs or random.random() < share):
            src = f"{tpl} || {src}"
            with_t += 1
        o.write(f"{id_}\t{score}\t{src}\t{tgt}\n")
        n += 1
print(f"{n} pairs, {changed} whose target's template is not the input's, "
      f"{with_t} with their target's template -> {out}")
PYEOF

# The plain paraphraser's weights and tokenizer, a fresh optimizer.
if [ ! -f "$WORK/train/hf/model.safetensors" ]; then
  mkdir -p "$WORK/train/hf"
  cp "$FROM"/train/hf/* "$WORK/train/hf/"
fi
"$PY" tools/models/marian_model.py train --bitext "$WORK/pairs.tsv" --out "$WORK/train" \
  --direction en-en --d-model 256 --layers 3 --heads 4 --ffn 1024 --vocab 8000 --max-positions 256 \
  --lr 0.0003 --warmup 100 --minutes "$MINUTES" --save-every 15 \
  --resume 2>&1 | tee -a "$WORK/training.log"

rm -rf "$WORK/export"
"$PY" tools/models/marian_model.py export --model "$WORK/train/hf" --out "$WORK/export" --merged no --quantize
rm -rf "$WORK/model" && mkdir -p "$WORK/model"
"$PY" tools/models/requantize.py weight-only "$WORK/export" "$WORK/model"
cat "$FROM/training.log" "$WORK/training.log" > "$WORK/model/training.log"
# What `paraphrase --template` checks for: the form the model was trained on.
printf '{"separator": " || ", "levels": 2}\n' \
  > "$WORK/model/templates.json"
(cd "$WORK/model" && rm -f encoder_model.onnx decoder_model.onnx decoder_with_past_model.onnx &&
  sha256sum config.json generation_config.json tokenizer_config.json vocab.json source.spm target.spm \
    templates.json *_quantized.onnx > SHA256SUMS)
[ -f "$OUT/README.md" ] && cp "$OUT/README.md" "$WORK/model/README.md"
rm -rf "$OUT" && mkdir -p "$(dirname "$OUT")" && mv "$WORK/model" "$OUT"
du -sh "$OUT"
