"""Writes README.md, the model card, for a demo model from its training.json
(written by `marian_model.py train`) and its eval.json (written by
`eval_model.py`): Hugging Face Hub metadata (the BLEU and chrF figures of
eval.json as `model-index`), then the text.

usage: model_card.py MODEL_DIR TRAINING_JSON EVAL_JSON LOG_NAME [HISTORY]
HISTORY: a sentence on how the training ran (resumptions, settings changed).
"""

import json
import re
import sys
from pathlib import Path

NAMES = {"cs": "Czech", "en": "English"}


def flow(v, indent=2, depth=0):
    """A metadata value as JSON (YAML's flow style), as paraforge writes its
    cards (core/src/layout/card.rs, `front_matter`): one line when short
    (100 characters for a key's value, 160 for an element), else one element
    a line, three levels deep at most."""
    compact = json.dumps(v, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    line = 100 if depth == 0 else 160
    if len(compact) <= line or depth >= 3 or not isinstance(v, (list, dict)):
        return compact
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(v, list):
        items, (o, c) = [flow(x, indent + 2, depth + 1) for x in v], "[]"
    else:
        items = [f"{json.dumps(k)}: {flow(x, indent + 2, depth + 1)}" for k, x in sorted(v.items())]
        o, c = "{}"
    return o + "\n" + inner + (",\n" + inner).join(items) + "\n" + pad + c


def front_matter(fields):
    """`key: value` lines between `---` lines; a plain word where YAML reads
    one as itself."""
    out = ["---"]
    for k, v in fields:
        plain = isinstance(v, str) and re.fullmatch(r"[a-z][a-z0-9_-]*", v) and v not in (
            "y", "n", "yes", "no", "on", "off", "true", "false", "null")
        out.append(f"{k}: {v if plain else flow(v)}")
    return "\n".join(out) + "\n---\n\n"


def metadata(name, t, e):
    """The Hub metadata of a demo model: its languages, training sources,
    license (the card's "Data" section says why) and eval.json's figures."""
    src, tgt = t["direction"].split("-")
    results = [
        {
            "task": {"type": "translation", "name": f"{NAMES[src]} to {NAMES[tgt]}"},
            "dataset": {"name": r["set"], "type": r["set"], "split": "test"},
            "metrics": [
                {"type": "bleu", "value": r["bleu"], "name": f"BLEU ({r['bleu_signature']})"},
                {"type": "chrf", "value": r["chrf"],
                 "name": f"chrF ({r.get('chrf_signature', 'default')})"},
            ],
        }
        for r in e["results"]
    ]
    return front_matter([
        ("library_name", "paraforge"),
        ("pipeline_tag", "translation"),
        ("tags", ["translation", "marian", "onnx", "paraforge"]),
        ("language", [src, tgt]),
        ("datasets", ["Multi30K", "Tatoeba Challenge ces-eng test", "WMT news test sets 2008-2022"]),
        ("license", "other"),
        ("license_name", "non-commercial-research-and-demonstration"),
        ("model-index", [{"name": name, "results": results}]),
    ])


model_dir, training, evaluation, log_name = sys.argv[1:5]
history = sys.argv[5] if len(sys.argv) > 5 else ""
t = json.loads(Path(training).read_text())
e = json.loads(Path(evaluation).read_text())
src, tgt = t["direction"].split("-")
names = NAMES
size = sum(f.stat().st_size for f in Path(model_dir).iterdir() if f.is_file())
rows = "\n".join(f"| {r['set']} | {r['sentences']} | {r['bleu']:.1f} | {r['chrf']:.1f} |" for r in e["results"])
ex = e["results"][0]["examples"]
examples = "\n".join(f"| {x['source']} | {x['output']} | {x['reference']} |" for x in ex)
card = metadata(Path(model_dir).name, t, e) + f"""# {Path(model_dir).name}: a small {names[src]} to {names[tgt]} MarianMT model

> **A demonstration model.** It is small and trained for {t['minutes']:.0f} minutes
> on 2 CPU cores from {t['training_pairs']:,} sentence pairs, so that `make demo`
> translates real text on a machine without internet. Its translations are
> rough; for corpus building use a production model such as
> Helsinki-NLP/opus-mt-{src}-{tgt} exported with `tools/models/marian_model.py export`.

| | |
|---|---|
| architecture | MarianMT (transformer encoder-decoder), {t['layers']}+{t['layers']} layers, d_model {t['d_model']}, {t['heads']} heads, FFN {t['ffn']}, {t['parameters'] / 1e6:.2f}M parameters |
| vocabulary | one shared SentencePiece unigram model, {t['vocab']:,} entries (`source.spm` = `target.spm`, `vocab.json`), trained on both sides of the training data |
| files | Optimum ONNX layout, int8 weights only (paraforge loads the `*_quantized` graphs when they are all a directory has): `encoder_model_quantized.onnx`, `decoder_model_quantized.onnx`, `decoder_with_past_model_quantized.onnx`; weight-only int8 (int8 initializers -> DequantizeLinear -> MatMul, folded to fp32 when the session loads, fp32 compute), so that a sentence's translation and score do not depend on batching or sharding (see "int8 and batch invariance" below); `SHA256SUMS` lists every file paraforge reads, checked at load; {size / 1e6:.1f} MB in all |
| training | {t['steps']:,} steps ({t['epochs']} epochs), batches of about {t['batch_tokens']:,} tokens, AdamW (betas 0.9/0.98, no weight decay), lr {t['lr']} with {t['warmup']} warmup steps and inverse-square-root decay, dropout 0.1, no label smoothing, bf16 autocast on CPU; {t['minutes']:.0f} minutes of training on a 2-core CPU; seed {t['seed']}. {history} Log: `{log_name}` |
| reproduce | `tools/models/marian_model.py train --bitext ../shared/data/bitext/*.tsv --out .cache/demo-{t['direction']} --direction {t['direction']} --d-model {t['d_model']} --layers {t['layers']} --heads {t['heads']} --ffn {t['ffn']} --vocab {t['vocab'] - 1} --max-positions 512 --lr {t['lr']} --warmup {t['warmup']} --bf16 --minutes {t['minutes']:.0f}`, then `tools/models/marian_model.py export --model .cache/demo-{t['direction']}/hf --out DIR --merged no --quantize`, keep the `*_quantized.onnx` files, and rewrite them with `tools/models/requantize.py weight-only DIR models/demo-{t['direction']}`; then `sha256sum config.json generation_config.json tokenizer_config.json vocab.json source.spm target.spm *_quantized.onnx > SHA256SUMS` |

## Data

Training: 84,612 real Czech-English pairs (Multi30K train and validation,
the Tatoeba Challenge ces-eng test set, WMT news test sets 2008-2022; sources
as in `data/README.md`) minus the held-out sets below: {t['training_pairs']:,} pairs. Held out (never seen in
training, bundled in `data/sample/czeng16-heldout.cs-en.tsv`): Multi30K test
2016 and test 2018 (Flickr30K captions with professional Czech translations)
and WMT19 newstest (English-Czech news). Licenses: Multi30K is distributed
for research use; the WMT test sets are statmt.org shared-task data made
available for research use; the Tatoeba Challenge test set is CC BY-NC-SA 4.0
(the underlying Tatoeba sentences CC BY 2.0 FR). This model
inherits the most restrictive of these terms: non-commercial research
and demonstration use.

## Evaluation

sacrebleu (BLEU `{e['results'][0]['bleu_signature']}`, chrF `{e['results'][0].get('chrf_signature', 'default')}`) on the held-out sets, translated by
`paraforge translate --beam {e['beam']}` from these ONNX files
(`tools/models/eval_model.py`):

| set | sentences | BLEU | chrF |
|---|---:|---:|---:|
{rows}

## int8 and batch invariance

The graphs were first exported with ONNX Runtime's dynamic quantization
(`DynamicQuantizeLinear` + `MatMulInteger`). That computes one activation
scale per tensor, i.e. over the whole batch, so a sentence's rounding
depended on its neighbours and on padding: in a corpus job, changing
`shard_pairs` or `batch_size` changed translations (1,106 of 4,068 in the
demo with `shard_pairs` 200 instead of 500; 16 of 200 translations and all 200 scores between
`--batch-size` 1 and 16 at beam 12 in our measurement). The shipped graphs were derived
from those int8 graphs alone (the fp32 checkpoint is not kept) by
`tools/models/requantize.py weight-only`: every
`MatMulInteger(DynamicQuantizeLinear(x), W)` became
`MatMul(x, DequantizeLinear(W))` with the same int8 weights, scales and zero
points, so the weights are exactly the int8 ones and activations stay fp32.
The same tool computes cross-attention's probabilities x V transposed
(V^T x P^T), because ONNX Runtime's single-row matmul kernel sums in an
order that depends on the padded source length. With both, batch size 1,
16 or any split gives bit-identical text and scores (tests/engine.rs,
`demo_model_output_does_not_depend_on_batching`). The price is speed:
fp32 matmuls instead of int8 ones (docs/bench/HISTORY.md, "Demo model: int8 and
batch invariance"). Per-row activation quantization was measured too and
not chosen: ONNX Runtime fuses it into `MatMulIntegerToFloat`, which
mishandles a per-row activation scale (errors 6x those of fp32 activations),
and unfused it needs eight more operators per matmul.

Examples (Multi30K test 2016):

| source | model | reference |
|---|---|---|
{examples}
"""
Path(model_dir, "README.md").write_text(card)
print(card)
