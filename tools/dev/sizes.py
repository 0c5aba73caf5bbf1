#!/usr/bin/env python3
"""Files over 900 lines and functions over 120 lines, tests left out (a
file's `#[cfg(test)] mod` block, and the tests/ crate): `tools/dev/sizes.py`
lists them and exits non-zero if there are any. docs/development.md
quotes it."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE, MAX_FN = 900, 120
SKIP = {"tests", "target", ".cache", "bench-out"}


def code_lines(text: str) -> list[str]:
    """The file's lines before its test module."""
    lines = text.split("\n")
    for i, l in enumerate(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", l) and i + 1 < len(lines) and re.match(r"\s*mod\s+\w+", lines[i + 1]):
            return lines[:i]
    return lines


def strip(line: str, state: dict) -> str:
    """The line without comments and string contents (braces inside them
    do not count); `state` carries a block comment or string across lines."""
    out, i = [], 0
    while i < len(line):
        c = line[i]
        if state.get("block"):
            if line.startswith("*/", i):
                state["block"] = False
                i += 2
            else:
                i += 1
            continue
        if state.get("str"):
            if c == "\\":
                i += 2
                continue
            if c == '"':
                state["str"] = False
            i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        if c == '"':
            state["str"] = True
            i += 1
            continue
        if c == "'" and i + 2 < len(line) and (line[i + 2] == "'" or line[i + 1] == "\\"):
            j = line.find("'", i + 2)
            i = j + 1 if j > 0 else i + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(lines: list[str]):
    """(name, first line, length) of every fn with a body."""
    state: dict = {}
    clean = [strip(l, state) for l in lines]
    found = []
    for i, l in enumerate(clean):
        m = re.search(r"\bfn\s+(\w+)", l)
        if not m:
            continue
        depth, started, j = 0, False, i
        while j < len(clean):
            seg = clean[j] if j != i else clean[j][m.end():]
            for c in seg:
                if c == ";" and not started and depth == 0:
                    break
                if c == "{":
                    depth += 1
                    started = True
                elif c == "}":
                    depth -= 1
            else:
                if started and depth == 0:
                    break
                j += 1
                continue
            break
        if started:
            found.append((m.group(1), i + 1, j - i + 1))
    return found


def main() -> int:
    bad = 0
    for f in sorted(ROOT.rglob("*.rs")):
        rel = f.relative_to(ROOT)
        if rel.parts[0] in SKIP or "examples" in rel.parts or "benches" in rel.parts:
            continue
        lines = code_lines(f.read_text(encoding="utf-8"))
        if len(lines) > MAX_FILE:
            print(f"{rel}: {len(lines)} lines")
            bad += 1
        for name, at, n in functions(lines):
            if n > MAX_FN:
                print(f"{rel}:{at}: fn {name} {n} lines")
                bad += 1
    print(f"{bad} over the limits ({MAX_FILE} lines a file, {MAX_FN} a function)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
