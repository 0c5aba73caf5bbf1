#!/usr/bin/env python3
"""The filtering study of Wieting et al. (2017) (its Tables 5-10 and 12) at this project's scale.

On a CzEng-layout bitext (default: the shared one), with paraforge doing
every step that is paraforge's job:

 0. the bitext minus the demo's held-out sets, split by a hash of the pair id
    into a mining pool (60%) and an auxiliary pool (40%), as Wieting et al. (2017) keep
    100,000 pairs to mine and 50,000 apart for their language model and
    classifier;
 1. `paraforge lm-train`: a 3-gram model of the auxiliary references;
 2. `paraforge run`: both pools back-translated by models/demo-cs-en, beam 4,
    the 4 best candidates kept (`model.beam_candidates`), every score
    including translation_perplexity under that model;
 3. `paraforge train-classifier` (avg and lstm) on the auxiliary pool
    (Table 8), and `paraforge rescore --classifier` of the mining pool;
 4. every filter of Wieting et al. (2017) on the mining pool's best candidates: random,
    translation-length ranges (Tables 5-6), translation cost, perplexity,
    P(reference) (Table 7), unigram/bigram/trigram overlap and BLEU bounds
    (Table 12); each setting that keeps enough pairs gives a fixed-size
    sample (--train-size) on which `paraforge train` trains AVG (`word`, 20
    epochs) with the stopping epoch picked on STS 2016 (the paper's dev set),
    and `paraforge eval-sts` scores it; the setting with the best dev score
    is a filter's tuned result, reported on the test sets (STS 2012-2015
    datasets and SICK-R, mean Pearson x 100);
 5. GRAN (`gran`, 3 epochs) on the random sample and on each filter's
    AVG-tuned setting (not tuned for GRAN: the recurrent model is too slow
    here to train once per setting);
 6. the analysis of references against translations (Tables 9-10) on the
    auxiliary pool.

Resumes: every step whose output exists is skipped. Writes OUT/study.json and
OUT/study.md. Tooling only: needs pyarrow (`make venv`).

usage: tools/studies/filter_study.py [--out bench-out/filter-study] [BITEXT.tsv ...]
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

HELD_OUT = re.compile(r"^(multi30k-test-2016-flickr-|multi30k-test-2018-flickr-|wmt19-newstest2019encs-)")
GLOVE = "data/vectors/glove.6B.50d.top25k.txt.gz"
FREQ = "data/freq/enwiki_vocab_top50k.txt"

# The grids of Wieting et al. (2017), sections 5.5-5.7.
LENGTH_RANGES = [(0, 10), (0, 15), (0, 20), (0, 30), (0, 100), (10, 20), (10, 30), (10, 100),
                 (15, 25), (15, 30), (15, 100), (20, 30), (20, 100), (30, 100)]
TABLE5_RANGES = [(0, 10), (10, 20), (20, 30), (30, 100)]
COST_MAX = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
PPL_MAX = [25, 50, 75, 100, 150, 200, math.inf]
PREF_MIN = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
LOWER = [0.0, 0.1, 0.2, 0.3]
UPPER = [0.6, 0.7, 0.8, 0.9, 1.0]
OVERLAPS = {"unigram": "unigram_overlap", "bigram": "bigram_overlap",
            "trigram": "trigram_overlap", "bleu": "sentence_bleu"}


def log(msg: str) -> None:
    print(f"== {time.strftime('%H:%M:%S')} {msg}", flush=True)


def run(cmd: list[str], logfile: Path) -> str:
    log(" ".join(cmd))
    with open(logfile, "w") as f:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True)
    Path(str(logfile) + ".out").write_text(p.stdout)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}; see {logfile}")
    return p.stdout


def pool_of(pair_id: str) -> str:
    h = int.from_bytes(hashlib.blake2b(pair_id.encode(), digest_size=8).digest(), "big")
    return "mine" if h % 100 < 60 else "aux"


def read_rows(path: Path) -> pa.Table:
    files = sorted(p for p in path.rglob("*.parquet") if not any(part.startswith("_") for part in p.relative_to(path).parts))
    return pa.concat_tables([pq.ParquetFile(f).read() for f in files]).combine_chunks()


def write_table(t: pa.Table, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, path / "part-00000.parquet.tmp", compression="zstd")
    os.replace(path / "part-00000.parquet.tmp", path / "part-00000.parquet")


def sts_scores(js: Path) -> dict:
    """dev = STS 2016 (mean of its datasets); test = mean Pearson over the
    STS 2012-2015 datasets and SICK-R (the test sets of Wieting et al. (2017) that we have; their
    Twitter set is not in the data)."""
    res = json.loads(js.read_text())[0]
    groups = {g["group"]: g["pearson"] for g in res["groups"]}
    test_sets = [s["pearson"] for s in res["sets"]
                 if s["group"] in ("STS2012", "STS2013", "STS2014", "STS2015", "SICK-R")]
    return {"dev": groups["STS2016"], "test": sum(test_sets) / len(test_sets),
            "test_sets": len(test_sets), "stsb": groups.get("STSB")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bitext", nargs="*", default=None)
    ap.add_argument("--out", default="bench-out/filter-study")
    ap.add_argument("--bin", default="target/release/paraforge")
    ap.add_argument("--train-size", type=int, default=12000)
    ap.add_argument("--avg-epochs", type=int, default=20)
    ap.add_argument("--gran-epochs", type=int, default=3)
    ap.add_argument("--lstm-classifier-epochs", type=int, default=4)
    ap.add_argument("--no-gran", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    out = Path(a.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    bitext = a.bitext or sorted(str(p) for p in Path("../shared/data/bitext").glob("*.tsv"))
    B = a.bin

    # 0. Split.
    mine_tsv, aux_tsv = out / "mine.tsv", out / "aux.tsv"
    if not aux_tsv.exists():
        pools = {"mine": [], "aux": []}
        for p in bitext:
            for line in open(p, encoding="utf-8"):
                pid = line.split("\t", 1)[0]
                if HELD_OUT.match(pid):
                    continue
                pools[pool_of(pid)].append(line if line.endswith("\n") else line + "\n")
        mine_tsv.write_text("".join(pools["mine"]))
        aux_tsv.write_text("".join(pools["aux"]))
    n_mine = sum(1 for _ in open(mine_tsv))
    n_aux = sum(1 for _ in open(aux_tsv))
    log(f"{n_mine} mining pairs, {n_aux} auxiliary pairs")

    # 1. Language model of the auxiliary references.
    lm = out / "aux-refs.arpa"
    if not lm.exists():
        run([B, "lm-train", "--order", "3", "--column", "3", str(aux_tsv), "-o", str(lm)], out / "logs/lm-train.log")

    # 2. Back-translate both pools with 4 candidates each.
    corpus = out / "corpus"
    if not (corpus / "_SUCCESS").exists():
        cfg = out / "job.toml"
        cfg.write_text(f"""[job]
name = "filter-study"
output = "{corpus.resolve()}"
shard_pairs = 2000

[input]
paths = ["{mine_tsv.resolve()}", "{aux_tsv.resolve()}"]
format = "czeng16"

[model]
dir = "models/demo-cs-en"
threads = 1
beam = 4
beam_candidates = 4
batch_size = 32
max_new_tokens = 64

[scoring]
lm = "{lm.resolve()}"

[workers]
local = 2
""")
        run([B, "run", "--config", str(cfg)], out / "logs/run.log")
    rows = read_rows(corpus)
    ids = rows.column("id").to_pylist()
    in_mine = pa.array([pool_of(i) == "mine" for i in ids])
    mine_all = rows.filter(in_mine)
    aux_all = rows.filter(pc.invert(in_mine))
    mine_dir, aux_dir = out / "pools/mine", out / "pools/aux"
    if not (aux_dir / "part-00000.parquet").exists():
        write_table(mine_all, mine_dir)
        write_table(aux_all, aux_dir)

    # 3. Classifiers (Table 8) and P(reference) of the mining pool.
    study = {"pairs": {"mine": n_mine, "aux": n_aux}, "train_size": a.train_size}
    aux_pairs = len(set(aux_all.column("id").to_pylist()))
    held = min(4000, aux_pairs // 10)
    classifiers = {}
    for kind, epochs in (("avg", 10), ("lstm", a.lstm_classifier_epochs)):
        d = out / f"classifier-{kind}"
        if not (d / "config.json").exists():
            run([B, "train-classifier", "--data", str(aux_dir), "--model", kind,
                 "--init-vectors", GLOVE, "--min-word-count", "2", "--epochs", str(epochs),
                 "--train-pairs", str(aux_pairs - 2 * held), "--valid-pairs", str(held),
                 "--test-pairs", str(held), "--seed", str(a.seed), "--out", str(d)],
                out / f"logs/classifier-{kind}.log")
        notes = json.loads((d / "config.json").read_text())["notes"]
        classifiers[kind] = {"report": notes["report"], "epochs": epochs}
    study["classifiers"] = classifiers
    best_cls = max(classifiers, key=lambda k: classifiers[k]["report"]["valid"]["all"])
    study["classifier_used"] = best_cls
    scored = out / "mine-scored"
    if not (scored / "_manifest.json").exists():
        run([B, "rescore", "--data", str(mine_dir), "--classifier", str(out / f"classifier-{best_cls}"),
             "--out", str(scored)], out / "logs/rescore.log")
    mine = read_rows(scored)
    best = mine.filter(pc.equal(mine.column("candidate_rank"), 1))
    log(f"{best.num_rows} mining pairs (best candidates), classifier {best_cls}")

    # 4. Filters, AVG.
    cols = {c: best.column(c).to_numpy(zero_copy_only=False) for c in
            ["translation_len", "translation_score", "translation_perplexity", "reference_probability",
             "unigram_overlap", "bigram_overlap", "trigram_overlap", "sentence_bleu"]}
    n = best.num_rows

    def keep(pred):
        return [i for i in range(n) if pred(i)]

    def finite(x):
        return x is not None and not (isinstance(x, float) and math.isnan(x))

    settings: list[tuple[str, str, list[int]]] = [("random", "all", list(range(n)))]
    for lo, hi in LENGTH_RANGES:
        settings.append(("length", f"[{lo},{hi}]", keep(lambda i: lo <= cols["translation_len"][i] <= hi)))
    for c in COST_MAX:
        settings.append(("cost", f"<= {c}", keep(lambda i: -cols["translation_score"][i] <= c)))
    for m in PPL_MAX:
        settings.append(("perplexity", f"<= {m}", keep(lambda i: finite(cols["translation_perplexity"][i]) and cols["translation_perplexity"][i] <= m)))
    for m in PREF_MIN:
        settings.append(("p_reference", f">= {m}", keep(lambda i: finite(cols["reference_probability"][i]) and cols["reference_probability"][i] >= m)))
    for name, col in OVERLAPS.items():
        scale = 100.0 if col == "sentence_bleu" else 1.0
        for lo in LOWER:
            for hi in UPPER:
                settings.append((name, f"[{lo},{hi}]", keep(lambda i: lo * scale <= cols[col][i] <= hi * scale)))

    def train_eval(model: str, family: str, setting: str, idx: list[int]) -> dict:
        tag = re.sub(r"[^A-Za-z0-9.]+", "_", f"{model}-{family}-{setting}").strip("_")
        res_path = out / "runs" / f"{tag}.json"
        res_path.parent.mkdir(parents=True, exist_ok=True)
        if res_path.exists():
            return json.loads(res_path.read_text())
        rng = random.Random(a.seed)
        sample = sorted(rng.sample(idx, a.train_size))
        data = out / "samples" / tag
        write_table(best.take(pa.array(sample)), data)
        m = out / "models" / (tag + (".pfe" if model == "word" else ""))
        m.parent.mkdir(parents=True, exist_ok=True)
        epochs = a.avg_epochs if model == "word" else a.gran_epochs
        cmd = [B, "train", "--data", str(data), "--model", model, "--init-vectors", GLOVE,
               "--epochs", str(epochs), "--seed", str(a.seed), "--dev", "data/sts/semeval/STS2016-test",
               "--out", str(m), "--overwrite"]  # a run killed before its result was kept
        if model != "word":
            cmd += ["--min-word-count", "1", "--lr", "0.001"]
        t0 = time.time()
        run(cmd, out / "logs" / f"train-{tag}.log")
        secs = time.time() - t0
        js = out / "runs" / f"{tag}.sts.json"
        run([B, "eval-sts", "--model", str(m), "--sts", "data/sts", "--json", str(js)], out / "logs" / f"eval-{tag}.log")
        r = {"model": model, "family": family, "setting": setting, "kept": len(idx), **sts_scores(js),
             "train_seconds": secs}
        res_path.write_text(json.dumps(r))
        import shutil
        shutil.rmtree(data, ignore_errors=True)
        return r

    results = []
    for family, setting, idx in settings:
        if len(idx) < a.train_size:
            results.append({"model": "word", "family": family, "setting": setting, "kept": len(idx), "skipped": True})
            continue
        r = train_eval("word", family, setting, idx)
        log(f"word {family} {setting}: kept {r['kept']}, dev {r['dev']:.1f}, test {r['test']:.1f}")
        results.append(r)
    study["avg"] = results

    # 5. GRAN on random and each family's AVG-tuned setting.
    tuned = {}
    for r in results:
        if r.get("skipped"):
            continue
        f = r["family"]
        if f not in tuned or r["dev"] > tuned[f]["dev"]:
            tuned[f] = r
    study["avg_tuned"] = tuned
    gran = []
    by_key = {(f, s): idx for f, s, idx in settings}
    order = ["random", "length", "cost", "perplexity", "p_reference", "unigram", "bigram", "trigram", "bleu"]
    for f in order:
        if f not in tuned:
            continue
        # --no-gran still reports the GRAN runs an earlier invocation finished.
        done = out / "runs" / (re.sub(r"[^A-Za-z0-9.]+", "_", f"gran-{f}-{tuned[f]['setting']}").strip("_") + ".json")
        if a.no_gran and not done.exists():
            continue
        idx = by_key[(f, tuned[f]["setting"])]
        if f != "random" and len(idx) == n and gran and gran[0]["family"] == "random":
            # The tuned setting keeps every pair: the same sample as random.
            r = {**gran[0], "family": f, "setting": tuned[f]["setting"], "same_as_random": True}
        else:
            r = train_eval("gran", f, tuned[f]["setting"], idx)
        log(f"gran {f} {r['setting']}: dev {r['dev']:.1f}, test {r['test']:.1f}")
        gran.append(r)
        study["gran"] = gran
        (out / "study.json").write_text(json.dumps(study, indent=1))

    # 6. References against translations (Tables 9-10), auxiliary pool.
    study["analysis"] = analysis(aux_all, mine, a.seed)
    (out / "study.json").write_text(json.dumps(study, indent=1))
    (out / "study.md").write_text(report(study))
    print((out / "study.md").read_text())


TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def toks(s: str) -> list[str]:
    return TOKEN.findall(s.lower())


def ngrams(t: list[str], n: int) -> list[tuple]:
    return [tuple(t[i:i + n]) for i in range(len(t) - n + 1)]


def entropy(counter: collections.Counter) -> float:
    total = sum(counter.values())
    return -sum(c / total * math.log2(c / total) for c in counter.values())


def repetition(t: list[str], n: int) -> tuple[int, int]:
    """(repeated, total) n-grams of one sentence: an n-gram is a repetition
    when it already appeared earlier in the sentence; for unigrams only
    words of at least 3 characters count (Wieting et al., 2017, section 5.6.1)."""
    grams = ngrams(t, n)
    if n == 1:
        grams = [g for g in grams if len(g[0]) >= 3]
    seen, rep = set(), 0
    for g in grams:
        rep += g in seen
        seen.add(g)
    return rep, len(grams)


def spearman(x: list[float], y: list[float]) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy)


def analysis(aux: pa.Table, mine: pa.Table, seed: int) -> dict:
    rng = random.Random(seed)
    by_id: dict[str, tuple[str, list[str]]] = {}
    for pid, ref, tr in zip(aux.column("id").to_pylist(), aux.column("reference").to_pylist(),
                            aux.column("translation").to_pylist()):
        by_id.setdefault(pid, (ref, []))[1].append(tr)
    # Footnote 5: a random candidate of the beam per reference.
    sides = {"reference": [], "translation": []}
    for pid in sorted(by_id):
        ref, cands = by_id[pid]
        sides["reference"].append(toks(ref))
        sides["translation"].append(toks(rng.choice(cands)))
    out = {"pairs": len(by_id)}
    for side, sents in sides.items():
        uni = collections.Counter(g for t in sents for g in ngrams(t, 1))
        tri = collections.Counter(g for t in sents for g in ngrams(t, 3))
        r1 = [repetition(t, 1) for t in sents]
        r3 = [repetition(t, 3) for t in sents]
        out[side] = {
            "entropy_unigram": entropy(uni), "entropy_trigram": entropy(tri),
            "repetition_unigram": 100 * sum(r for r, _ in r1) / max(1, sum(n for _, n in r1)),
            "repetition_trigram": 100 * sum(r for r, _ in r3) / max(1, sum(n for _, n in r3)),
            "mean_tokens": sum(map(len, sents)) / len(sents),
        }
    out["difference"] = {k: out["reference"][k] - out["translation"][k] for k in out["reference"]}

    # Table 10: P(reference) of the mining pool's translations against
    # properties of the same sentence.
    counts = {}
    for line in open(FREQ, encoding="utf-8"):
        w, c = line.split()
        counts[w] = int(c)
    total = sum(counts.values())
    rare = math.log(total / min(counts.values()))
    p, rep1, rep3, idf, length = [], [], [], [], []
    for tr, pr in zip(mine.column("translation").to_pylist(), mine.column("reference_probability").to_pylist()):
        if pr is None:
            continue
        t = toks(tr)
        if not t:
            continue
        p.append(pr)
        a1, n1 = repetition(t, 1)
        a3, n3 = repetition(t, 3)
        rep1.append(a1 / n1 if n1 else 0.0)
        rep3.append(a3 / n3 if n3 else 0.0)
        idf.append(sum(math.log(total / counts[w]) if w in counts else rare for w in t) / len(t))
        length.append(len(t))
    out["spearman_p_reference"] = {
        "sentences": len(p),
        "unigram_repetition": 100 * spearman(p, rep1),
        "trigram_repetition": 100 * spearman(p, rep3),
        "average_idf": 100 * spearman(p, idf),
        "length": 100 * spearman(p, length),
    }
    return out


def report(s: dict) -> str:
    L = []
    L.append(f"Mining pool {s['pairs']['mine']} pairs, auxiliary pool {s['pairs']['aux']}; "
             f"fixed training size {s['train_size']}.\n")
    L.append("Table 8 (classifier accuracy x 100, auxiliary pool):\n")
    L.append("| model | epochs | train | test acc. | + acc. | - acc. | valid acc. |")
    L.append("|---|---|---|---|---|---|---|")
    for k, c in s["classifiers"].items():
        r = c["report"]
        L.append(f"| {k} | {c['epochs']} | {r['train_pairs']} | {r['test']['all']:.1f} | {r['test']['reference']:.1f} | "
                 f"{r['test']['translation']:.1f} | {r['valid']['all']:.1f} |")
    L.append(f"\nP(reference) for filtering from: {s['classifier_used']}\n")
    avg = [r for r in s["avg"] if not r.get("skipped")]
    rand = next(r for r in avg if r["family"] == "random")
    L.append("Table 5 (AVG, fixed length ranges, test):\n")
    L.append("| range | kept | dev | test |")
    L.append("|---|---|---|---|")
    for lo, hi in TABLE5_RANGES:
        r = next((x for x in s["avg"] if x["family"] == "length" and x["setting"] == f"[{lo},{hi}]"), None)
        if r is None or r.get("skipped"):
            L.append(f"| [{lo},{hi}] | {r['kept'] if r else '-'} | too few pairs | |")
        else:
            L.append(f"| [{lo},{hi}] | {r['kept']} | {r['dev']:.1f} | {r['test']:.1f} |")
    L.append("\nTables 6, 7, 12 (tuned on STS 2016 by AVG; test = mean Pearson over STS 2012-2015 and SICK-R):\n")
    gran = {g["family"]: g for g in s.get("gran", [])}
    L.append("| filter | tuned setting | kept | AVG dev | AVG test | GRAN dev | GRAN test | settings tried (too few pairs) |")
    L.append("|---|---|---|---|---|---|---|---|")
    for f in ["random", "length", "cost", "perplexity", "p_reference", "unigram", "bigram", "trigram", "bleu"]:
        t = s["avg_tuned"].get(f)
        tried = [r for r in s["avg"] if r["family"] == f]
        skipped = sum(1 for r in tried if r.get("skipped"))
        if t is None:
            L.append(f"| {f} | - | - | - | - | - | - | {len(tried)} ({skipped}) |")
            continue
        g = gran.get(f)
        gd = f"{g['dev']:.1f}" if g else "-"
        gt = f"{g['test']:.1f}" if g else "-"
        L.append(f"| {f} | {t['setting']} | {t['kept']} | {t['dev']:.1f} | {t['test']:.1f} | {gd} | {gt} | {len(tried)} ({skipped}) |")
    an = s["analysis"]
    L.append(f"\nTable 9 (references minus translations, {an['pairs']} auxiliary pairs, a random candidate each):\n")
    L.append("| | Ent. (uni) | Ent. (tri) | Rep. (uni) | Rep. (tri) |")
    L.append("|---|---|---|---|---|")
    for side in ("reference", "translation"):
        x = an[side]
        L.append(f"| {side} | {x['entropy_unigram']:.2f} | {x['entropy_trigram']:.2f} | {x['repetition_unigram']:.2f}% | {x['repetition_trigram']:.2f}% |")
    d = an["difference"]
    L.append(f"| difference | {d['entropy_unigram']:.2f} | {d['entropy_trigram']:.2f} | {d['repetition_unigram']:.2f}% | {d['repetition_trigram']:.2f}% |")
    sp = an["spearman_p_reference"]
    L.append(f"\nTable 10 (Spearman's rho x 100 of P(reference) with each measure, {sp['sentences']} mining-pool translations):\n")
    L.append("| measure | rho |")
    L.append("|---|---|")
    for k in ("unigram_repetition", "trigram_repetition", "average_idf", "length"):
        L.append(f"| {k} | {sp[k]:.1f} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
