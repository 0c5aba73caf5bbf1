#!/usr/bin/env python3
"""Which dependency builds does the wheel build (maturin, `python/` alone)
not share with the workspace's test build, and why?

cargo resolves features per selection of packages, so a crate built alone
can get other features than the same crate in `cargo test --workspace`,
and then it and everything above it compile again. python/Cargo.toml
names the workspace's features to keep the two identical; this prints
what differs when they drift. It reads cargo's unit graph, a nightly-only
flag, with RUSTC_BOOTSTRAP=1 set for these two queries only (nothing is
built).

usage: tools/dev/python_features.py
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def graph(*args: str) -> list:
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    out = subprocess.run(["cargo", *args, "-Z", "unstable-options", "--unit-graph"], cwd=ROOT,
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["units"]


def keyed(units: list) -> list:
    """(own description, hash over it and its dependencies', dependency indices)."""
    memo: dict = {}

    def key(i: int):
        if i not in memo:
            u, p = units[i], units[i]["profile"]
            own = (u["pkg_id"].split("#")[-1], u["target"]["name"], u["mode"],
                   ",".join(sorted(u["features"])), p["opt_level"], str(p.get("debuginfo")))
            deps = sorted(key(d["index"])[1] for d in u["dependencies"])
            h = hashlib.sha1(repr((own, deps)).encode()).hexdigest()
            memo[i] = (own, h, [d["index"] for d in u["dependencies"]])
        return memo[i]

    return [key(i) for i in range(len(units))]


def main() -> int:
    test = keyed(graph("test", "--workspace", "--all-targets", "--no-run"))
    wheel = keyed(graph("rustc", "-p", "paraforge-python", "--lib"))
    built = {h for _, h, _ in test}
    again = [k for k in wheel if k[1] not in built and not k[0][0].startswith(("pyo3", "paraforge-python"))]
    if not again:
        print("the wheel build shares every dependency with the test build")
        return 0
    print(f"{len(again)} units would compile again; where they start:")
    for own, h, deps in again:
        if all(wheel[d][1] in built for d in deps):
            same = [t for t in test if t[0][:3] == own[:3]]
            print(f"  {own[0]} ({own[2]}) features [{own[3]}]; test build has:",
                  "; ".join(f"[{t[0][3]}]" for t in same) or "no such unit")
            if same and all(t[0][3] == own[3] for t in same):
                # Same features: a dependency differs only as a variant
                # (e.g. host and target builds of one crate).
                for t in same:
                    theirs = {test[d][0] for d in t[2]}
                    print("     dependencies differing:",
                          [wheel[d][0][0] + " [" + wheel[d][0][3] + "]" for d in deps
                           if wheel[d][0] not in theirs])
    print("add the test build's features to python/Cargo.toml's list")
    return 1


if __name__ == "__main__":
    sys.exit(main())
