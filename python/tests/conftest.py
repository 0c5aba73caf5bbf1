"""Shared fixtures: the repository's bundled models and data, the CLI that
`make test` builds, and one small corpus that the CLI writes for real."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def repo(rel: str) -> str:
    return str(REPO / rel)


@pytest.fixture(scope="session")
def paraforge_bin() -> str:
    p = os.environ.get("PARAFORGE_BIN", repo("target/debug/paraforge"))
    if not os.path.isfile(p):
        pytest.fail(f"{p}: build the CLI first (cargo build --bin paraforge), or set PARAFORGE_BIN")
    return p


def run_cli(paraforge_bin: str, *args: str, cwd=None) -> str:
    out = subprocess.run(
        [paraforge_bin, *args], cwd=cwd or REPO, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, f"paraforge {' '.join(args)}:\n{out.stderr}"
    return out.stdout


# The corpus's model and options; the translator tests use the same.
MODEL = "models/tiny-cs-en"
BEAM, BATCH, MAX_NEW = 4, 8, 24
SCORER = "models/scorer-trigram"


@pytest.fixture(scope="session")
def corpus(tmp_path_factory, paraforge_bin):
    """`paraforge run` on the first 40 sample pairs in two shards: a
    finished output (manifest, _SUCCESS, Parquet) and its input lines."""
    d = tmp_path_factory.mktemp("corpus")
    with open(repo("data/sample/czeng16-heldout.cs-en.tsv"), encoding="utf-8") as f:
        lines = [next(f) for _ in range(40)]
    (d / "input.tsv").write_text("".join(lines), encoding="utf-8")
    (d / "job.toml").write_text(
        f"""[job]
name = "python-test"
output = "{d / 'out'}"
shard_pairs = 20

[input]
paths = ["{d / 'input.tsv'}"]
format = "czeng16"

[model]
dir = "{repo(MODEL)}"
threads = 1
beam = {BEAM}
batch_size = {BATCH}
max_new_tokens = {MAX_NEW}

[scoring]
model = "{repo(SCORER)}"

[coordinator]
listen = "127.0.0.1:0"
metrics = "127.0.0.1:0"

[workers]
local = 1
""",
        encoding="utf-8",
    )
    run_cli(paraforge_bin, "run", "--config", str(d / "job.toml"))
    return d / "out"


@pytest.fixture
def unfinished(corpus, tmp_path):
    """A copy of the corpus without its _SUCCESS marker."""
    c = tmp_path / "unfinished"
    shutil.copytree(corpus, c)
    (c / "_SUCCESS").unlink()
    return c
