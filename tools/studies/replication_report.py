#!/usr/bin/env python3
"""Tables and figures for docs/replication.md from a tools/studies/replicate.sh run.

usage: tools/studies/replication_report.py OUT
Reads OUT/sts.json (paraforge eval-sts --json) and, for the para_score
histogram, OUT/corpus and OUT/rescored (pyarrow); writes OUT/replication.md,
OUT/folds.svg and OUT/para_score.svg (the figures need matplotlib).
"""
import json
import re
import statistics
import sys
from pathlib import Path

SEMEVAL = ["STS2012", "STS2013", "STS2014", "STS2015", "STS2016"]
GROUPS = SEMEVAL + ["STSB", "SICK-R"]
# Wieting and Gimpel (2018), Table 8 (WORD / WORD,TRIGRAM, Pearson x 100).
PAPER = {
    "STS2012": "66.2 / 67.8",
    "STS2013": "61.8 / 62.7",
    "STS2014": "76.2 / 77.4",
    "STS2015": "79.3 / 80.3",
    "STS2016": "77.5 / 78.1",
    "STSB": "79.2 / 79.9",
    "SICK-R": "-",
}
CRITERIA = [
    ("glove", "para_score (GloVe 50d)"),
    ("trained", "para_score (trained WORD vectors)"),
    ("trigram", "trigram overlap"),
    ("translation", "translation score"),
]


def load(out):
    rows = json.loads((out / "sts.json").read_text())
    models = {}
    baseline = None
    for r in rows:
        g = {x["group"]: x["pearson"] for x in r["groups"]}
        g["SemEval"] = statistics.mean(g[y] for y in SEMEVAL)
        name = r["model"].split(" ")[0]
        if name.endswith(".pfe"):
            models[name[:-4]] = g
        else:
            baseline = g
    return baseline, models


def megabatch_table(baseline, models):
    lines = []
    cols = []
    for kind, label in [("word", "WORD"), ("trigram", "TRIGRAM"), ("word-trigram", "W,T")]:
        for m in (1, 20, 40):
            runs = [v for k, v in models.items() if re.fullmatch(f"mb-{kind}-M{m}-s\\d+", k)]
            if runs:
                cols.append((f"{label} M={m}", runs))
    n = max((len(r) for _, r in cols), default=0)
    init = models.get("init-word-trigram")
    init_t = models.get("init-trigram")
    lines.append(
        "| set | GloVe avg | TRIGRAM untrained | W,T untrained | "
        + " | ".join(c for c, _ in cols)
        + " | paper WORD / W,T |"
    )
    lines.append("|---|---:|---:|---:|" + "---:|" * len(cols) + "---:|")
    for g in GROUPS + ["SemEval"]:
        cells = []
        for _, runs in cols:
            xs = [r[g] for r in runs]
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            cells.append(f"{statistics.mean(xs):.1f} ± {sd:.1f}")
        label = "SemEval mean" if g == "SemEval" else g
        paper = PAPER.get(g, "-")
        untrained = " | ".join(f"{m[g]:.1f}" if m else "-" for m in (init_t, init))
        lines.append(
            f"| {label} | {baseline[g]:.1f} | {untrained} | " + " | ".join(cells) + f" | {paper} |"
        )
    return "\n".join(lines), n


def fold_scores(models, crit, metric):
    """Per fold: mean of WORD and TRIGRAM, and each."""
    out = []
    for fold in range(10):
        w = models.get(f"fold-{crit}-{fold}-word")
        t = models.get(f"fold-{crit}-{fold}-trigram")
        if w is None or t is None:
            out.append(None)
        else:
            out.append((0.5 * (w[metric] + t[metric]), w[metric], t[metric]))
    return out


def fold_table(models, metric):
    lines = ["| fold | " + " | ".join(label for _, label in CRITERIA) + " |"]
    lines.append("|---:|" + "---:|" * len(CRITERIA))
    table = {c: fold_scores(models, c, metric) for c, _ in CRITERIA}
    for fold in range(10):
        cells = []
        for c, _ in CRITERIA:
            v = table[c][fold]
            if v is None:
                cells.append("-")
                continue
            best = max(x[0] for x in table[c] if x is not None)
            s = f"{v[0]:.1f} ({v[1]:.1f} / {v[2]:.1f})"
            cells.append(f"**{s}**" if v[0] == best else s)
        lines.append(f"| {fold} | " + " | ".join(cells) + " |")
    return "\n".join(lines), table


def untrained_line(baseline, models, metric):
    t = models.get("init-trigram")
    if not t:
        return ""
    mean = 0.5 * (baseline[metric] + t[metric])
    return (
        f"Untrained, for comparison: {mean:.1f} (GloVe averaging {baseline[metric]:.1f} / "
        f"random-init TRIGRAM {t[metric]:.1f})."
    )


def composition(out):
    """Per criterion and fold: share of each source corpus, mean reference
    length, mean trigram overlap and para_score (needs pyarrow)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    dirs = {
        "glove": out / "bins/deciles/para_score",
        "trained": out / "bins-rescored/deciles/para_score",
        "trigram": out / "bins/deciles/trigram_overlap",
        "translation": out / "bins/deciles/translation_score",
    }
    lines = [
        "| criterion | fold | Multi30K | Tatoeba | WMT news | ref. tokens | trigram overlap | para_score (GloVe) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c, label in CRITERIA:
        for fold in (0, 3, 6, 9):
            t = ds.dataset(str(dirs[c] / f"fold={fold}"), format="parquet").to_table(
                columns=["id", "reference_len", "trigram_overlap"]
                + (["para_score"] if c != "trained" else [])
            )
            ids = t.column("id").to_pylist()
            n = len(ids)
            share = lambda p: 100.0 * sum(i.startswith(p) for i in ids) / n
            para = (
                f"{pc.mean(t.column('para_score')).as_py():.3f}" if c != "trained" else "-"
            )
            lines.append(
                f"| {label} | {fold} | {share('multi30k'):.0f}% | {share('tatoeba'):.0f}% | "
                f"{share('wmt'):.0f}% | {pc.mean(t.column('reference_len')).as_py():.1f} | "
                f"{pc.mean(t.column('trigram_overlap')).as_py():.2f} | {para} |"
            )
    return "\n".join(lines)


def figure_folds(out, tables, baseline, untrained):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (metric, title) in zip(axes, [("STSB", "STS Benchmark test"), ("SemEval", "SemEval 2012-2016 mean")]):
        for c, label in CRITERIA:
            ys = [v[0] if v else float("nan") for v in tables[metric][c]]
            ax.plot(range(10), ys, marker="o", label=label)
        if untrained is not None:
            ax.axhline(
                0.5 * (baseline[metric] + untrained[metric]),
                color="grey",
                linestyle="--",
                label="untrained (GloVe averaging, random TRIGRAM)",
            )
        ax.set_xlabel("training fold (decile of the criterion; 9 = top)")
        ax.set_ylabel("Pearson r x 100, mean of WORD and TRIGRAM")
        ax.set_title(title)
        ax.set_xticks(range(10))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "folds.svg")


def figure_para_score(out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow.dataset as ds

    def scores(d):
        t = ds.dataset(str(d), format="parquet", partitioning="hive", exclude_invalid_files=True)
        col = t.to_table(columns=["para_score"]).column("para_score").drop_null()
        return col.to_numpy()

    fig, ax = plt.subplots(figsize=(6, 3.5))
    bins = [i / 50 for i in range(-25, 51)]
    ax.hist(scores(out / "corpus"), bins=bins, alpha=0.6, label="GloVe 50d (as translated)")
    ax.hist(scores(out / "rescored"), bins=bins, alpha=0.6, label="trained WORD vectors (rescored)")
    for x in (0.2, 0.4, 0.6, 0.8):
        ax.axvline(x, color="grey", linewidth=0.5)
    ax.set_yscale("log")
    ax.set_xlabel("para_score")
    ax.set_ylabel("pairs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "para_score.svg")


def main():
    out = Path(sys.argv[1])
    baseline, models = load(out)
    mb, seeds = megabatch_table(baseline, models)
    stsb, t_stsb = fold_table(models, "STSB")
    sem, t_sem = fold_table(models, "SemEval")
    doc = [
        f"## Mega-batching (Pearson r x 100, mean ± sd over {seeds} seeds)",
        "",
        mb,
        "",
        "## Training folds: STS Benchmark test (mean of WORD and TRIGRAM (WORD / TRIGRAM))",
        "",
        stsb,
        "",
        untrained_line(baseline, models, "STSB"),
        "",
        "## Training folds: SemEval 2012-2016 mean (mean of WORD and TRIGRAM (WORD / TRIGRAM))",
        "",
        sem,
        "",
        untrained_line(baseline, models, "SemEval"),
        "",
    ]
    try:
        doc += ["## What the folds hold", "", composition(out), ""]
    except ImportError as e:
        print(f"fold composition skipped: {e}", file=sys.stderr)
    (out / "replication.md").write_text("\n".join(doc))
    print("\n".join(doc))
    try:
        figure_folds(out, {"STSB": t_stsb, "SemEval": t_sem}, baseline, models.get("init-trigram"))
        figure_para_score(out)
    except ImportError as e:
        print(f"figures skipped: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
