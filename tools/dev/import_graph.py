#!/usr/bin/env python3
"""Which module of a crate uses which (`crate::NAME` paths in its source),
and every circle among them: `tools/dev/import_graph.py [CRATE_DIR ...]`
prints each crate's edges and circles and exits non-zero if any crate has
a circle. docs/ARCHITECTURE.md quotes it; `make test` runs it."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRATES = ["core", "job", "rpc", "nmt", "dataset", "coordinator", "worker", "encoders",
          "eval", "trainer", "scorer", "rescore", "cli", "python"]


def modules(src: Path) -> dict[str, list[Path]]:
    """Top-level module name -> its files (`a.rs`, `a/*.rs`)."""
    mods: dict[str, list[Path]] = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src)
        top = rel.parts[0].removesuffix(".rs")
        if top in ("lib", "main"):
            continue
        mods.setdefault(top, []).append(f)
    return mods


def strip_tests(text: str) -> str:
    """The file without its `#[cfg(test)] mod tests { ... }` block."""
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def edges(src: Path) -> dict[str, set[str]]:
    mods = modules(src)
    out: dict[str, set[str]] = {m: set() for m in mods}
    for m, files in mods.items():
        for f in files:
            text = strip_tests(f.read_text(encoding="utf-8"))
            text = re.sub(r"//.*", "", text)
            for used in re.findall(r"\bcrate::(\w+)", text):
                if used in mods and used != m:
                    out[m].add(used)
            # `use crate::{a, b::c}`
            for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
                for used in re.findall(r"(?:^|,)\s*(\w+)", group):
                    if used in mods and used != m:
                        out[m].add(used)
    return out


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, on, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    crates = sys.argv[1:] or CRATES
    bad = 0
    for c in crates:
        src = ROOT / c / "src"
        g = edges(src)
        cs = circles(g)
        print(f"{c}: {len(g)} modules, {sum(len(v) for v in g.values())} uses")
        for m in sorted(g):
            if g[m]:
                print(f"  {m} -> {', '.join(sorted(g[m]))}")
        for comp in cs:
            print(f"  CIRCLE: {' <-> '.join(comp)}")
            print(f"{c}: import circle {' <-> '.join(comp)}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
