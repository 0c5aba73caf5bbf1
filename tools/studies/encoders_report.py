#!/usr/bin/env python3
"""The every-encoder table of docs/replication.md from tools/studies/replicate_encoders.sh's
outputs: eval-sts JSON, the runs list, and the papers' figures. Standard library only.

usage: encoders_report.py --sts sts.json --runs models.tsv --papers paper_figures.json [--epochs N]
"""
import argparse
import json
import statistics

YEARS = ["STS2012", "STS2013", "STS2014", "STS2015", "STS2016"]
COLS = YEARS + ["SemEval", "STSB", "SICK-R"]


def fmt(xs):
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.1f}"
    return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs):.1f}"


# paper_figures.json names each paper by a short id; the table cites it by
# author and year (docs/REFERENCES.md).
PAPERS = {
    "000": "Wieting and Gimpel (2018)",
    "001": "Wieting et al. (2017)",
    "002": "Wieting et al. (2016)",
    "003": "Wieting et al. (2015)",
    "004": "Chen and Gimpel (2020)",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sts", required=True)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--papers", required=True)
    ap.add_argument("--epochs", type=int, default=5)
    a = ap.parse_args()

    results = {}
    for r in json.load(open(a.sts)):
        g = {x["group"]: x["pearson"] for x in r["groups"]}
        # eval-sts labels a model "NAME (KIND)".
        name = r["model"].split(" (")[0]
        if r["model"].endswith("(averaged)"):
            name = "GloVe averaging: " + name
        for suffix in (".pfe",):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        g["SemEval"] = statistics.mean(g[y] for y in YEARS) if all(y in g for y in YEARS) else None
        results[name] = g

    runs = {}  # spec -> [(name, seed, seconds)]
    order = []
    for line in open(a.runs):
        name, spec, seed, secs = line.rstrip("\n").split("\t")
        if spec not in runs:
            order.append(spec)
        runs.setdefault(spec, []).append((name, int(seed), int(secs)))

    papers = json.load(open(a.papers)).get("encoders", {})

    print(f"| encoder | seeds | " + " | ".join(c.replace("STS20", "") for c in COLS) + " | train time |")
    print("|---|---:|" + "---:|" * len(COLS) + "---:|")
    for spec in order:
        rows = [results[n] for n, _, _ in runs[spec] if n in results]
        cells = []
        for c in COLS:
            xs = [r[c] for r in rows if r.get(c) is not None]
            cells.append(fmt(xs))
        secs = statistics.mean(s for _, _, s in runs[spec])
        print(f"| {spec} | {len(rows)} | " + " | ".join(cells) + f" | {secs / 60:.1f} min |")
    for name, g in results.items():
        if name.startswith("GloVe averaging: "):
            cells = [fmt([g[c]]) if g.get(c) is not None else "-" for c in COLS]
            print(f"| GloVe 50d averaging (untrained) | - | " + " | ".join(cells) + " | - |")

    print()
    print("The papers' figures for the same encoders (Pearson's r x 100; their data, dimensions and training, not ours):")
    print()
    print("| encoder | paper | table | data | dim | " + " | ".join(c.replace("STS20", "") for c in COLS) + " |")
    print("|---|---|---|---|---:|" + "---:|" * len(COLS))
    for spec in order:
        for p in papers.get(spec, []):
            y = p.get("years") or {}
            vals = [y.get(c[3:]) for c in YEARS]
            sem = statistics.mean(vals) if all(v is not None for v in vals) else None
            vals += [sem, p.get("stsb_test"), p.get("sick")]
            cells = ["-" if v is None else f"{v:.1f}" for v in vals]
            paper = PAPERS.get(p.get("paper", ""), p.get("paper", ""))
            print(f"| {spec} | {paper} | {p.get('table', '')} | {p.get('data', '')} | {p.get('dim') or '-'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
