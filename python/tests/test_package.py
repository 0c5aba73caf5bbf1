"""The Python package against the CLI on the same models and data: the same
cosines, columns, translations and manifest checks, and clear exceptions
for bad input."""

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

import paraforge_corpus as pf
from conftest import BATCH, BEAM, MAX_NEW, MODEL, REPO, SCORER, repo, run_cli


@pytest.fixture(scope="session")
def neural(corpus, paraforge_bin, tmp_path_factory):
    """A neural encoder as `paraforge train` writes one (a directory)."""
    out = tmp_path_factory.mktemp("neural") / "model"
    # BLSTM with max pooling from GloVe: an untrained LSTM's cosines all lie
    # within 0.001 of 1, too close for a correlation to tell two apart.
    run_cli(paraforge_bin, "train", "--model", "blstm-max", "--min-word-count", "1",
            "--word-dim", "50", "--init-vectors", repo("data/vectors/glove.6B.50d.top25k.txt.gz"),
            "--epochs", "1", "--no-dev", "--data", str(corpus), "--out", str(out))
    return str(out)


# Every kind of encoder: a .pfe (TRIGRAM), a neural encoder's directory, the
# transformer scorer (ONNX) and word vectors.
ENCODERS = ["trigram", "neural", "transformer", "vectors"]


@pytest.mark.parametrize("kind", ENCODERS)
def test_cosines_are_eval_sts_cosines(kind, tmp_path, paraforge_bin, request):
    if kind == "neural":
        arg, path = "--model", request.getfixturevalue("neural")
    elif kind == "vectors":
        arg, path = "--vectors", repo("data/vectors/glove.6B.50d.top25k.txt.gz")
    else:
        arg = "--model"
        path = repo(SCORER if kind == "trigram" else "tests/data/tiny-sentence-encoder")
    enc = (pf.Encoder.load(vectors=path) if kind == "vectors"
           else pf.Encoder.load(path))
    # STS Benchmark pairs whose two sentences both have an embedding (a
    # model trained on 40 pairs knows few words); eval-sts's Pearson of
    # the model's cosines with the gold scores, and the package's.
    with open(repo("data/sts/stsbenchmark/sts-test.csv"), encoding="utf-8") as f:
        rows = [next(f) for _ in range(200)]
    cols = [r.rstrip("\n").split("\t") for r in rows]
    a, b = enc.encode([c[5] for c in cols]), enc.encode([c[6] for c in cols])
    assert a.shape == (200, enc.dim) and a.dtype == np.float32
    keep = [i for i in range(200) if np.isfinite(a[i]).all() and np.isfinite(b[i]).all()]
    assert len(keep) >= 20, f"{kind}: {len(keep)} pairs with embeddings"
    sts = tmp_path / "sts" / "stsbenchmark"
    sts.mkdir(parents=True)
    (sts / "sts-test.csv").write_text("".join(rows[i] for i in keep), encoding="utf-8")
    out = tmp_path / "eval.json"
    run_cli(paraforge_bin, "eval-sts", arg, path, "--sts", str(tmp_path / "sts"), "--json",
            str(out))
    want = json.loads(out.read_text())[0]["sets"][0]
    assert want["pairs"] == len(keep), want
    cos = np.array([pf.cosine(a[i], b[i]) for i in keep])
    gold = np.array([float(cols[i][4]) for i in keep])
    assert 100 * np.corrcoef(cos, gold)[0, 1] == pytest.approx(want["pearson"], abs=1e-4)


def test_score_pairs_gives_the_corpus_columns(corpus):
    t = pf.open_corpus(corpus).to_table()
    assert t.num_rows == 40
    got = pf.score_pairs(
        t["reference"].to_pylist(), t["translation"].to_pylist(), model=repo(SCORER)
    )
    for name, values in got.items():
        if name == "translation_perplexity":  # no [scoring] lm in the job
            assert np.isnan(values).all()
            continue
        want = t[name].to_numpy(zero_copy_only=False)
        np.testing.assert_array_equal(values, np.asarray(want, dtype=values.dtype), err_msg=name)
    # para_score is the encoder's cosine.
    enc = pf.Encoder.load(repo(SCORER))
    r, h = enc.encode(t["reference"].to_pylist()), enc.encode(t["translation"].to_pylist())
    cos = [pf.cosine(x, y) for x, y in zip(r, h)]
    np.testing.assert_allclose(cos, got["para_score"], atol=1e-6)


def test_translator_matches_the_corpus_and_the_cli(corpus, tmp_path, paraforge_bin):
    t = pf.open_corpus(corpus).to_table()
    t = t.sort_by("id")
    sources = t["source"].to_pylist()
    tr = pf.Translator(repo(MODEL), beam=BEAM, batch_size=BATCH, threads=1,
                              max_new_tokens=MAX_NEW)
    got = tr.translate(sources)
    assert got == t["translation"].to_pylist()
    inp = tmp_path / "src.txt"
    inp.write_text("\n".join(sources) + "\n", encoding="utf-8")
    cli = run_cli(paraforge_bin, "translate", "--model", repo(MODEL), "--beam", str(BEAM),
                  "--batch-size", str(BATCH), "--threads", "1", "--max-new-tokens", str(MAX_NEW),
                  str(inp))
    assert cli.splitlines() == got
    scored = tr.translate_with_scores(sources[:3])
    np.testing.assert_allclose([s for _, s in scored], t["translation_score"].to_pylist()[:3],
                               rtol=1e-6)
    assert tr.translate(["", "   "]) == ["", ""]
    # The repetition controls, as `paraforge translate` applies them.
    ctl = pf.Translator(repo(MODEL), beam=BEAM, batch_size=BATCH, threads=1,
                        max_new_tokens=MAX_NEW, no_repeat_ngram_size=2,
                        repetition_penalty=1.5)
    got = ctl.translate(sources[:20])
    cli = run_cli(paraforge_bin, "translate", "--model", repo(MODEL), "--beam", str(BEAM),
                  "--batch-size", str(BATCH), "--threads", "1", "--max-new-tokens", str(MAX_NEW),
                  "--no-repeat-ngram-size", "2", "--repetition-penalty", "1.5", str(inp))
    assert cli.splitlines()[:20] == got
    assert got != t["translation"].to_pylist()[:20]


def test_open_corpus_reads_only_a_verified_output(corpus, unfinished, tmp_path):
    ds = pf.open_corpus(corpus)
    manifest = json.loads((corpus / "_manifest.json").read_text())
    assert ds.count_rows() == sum(f["rows"] for f in manifest["files"])
    assert sorted(Path(f).name for f in ds.files) == sorted(
        Path(f["path"]).name for f in manifest["files"])
    with pytest.raises(pf.ParaforgeError, match="_SUCCESS"):
        pf.open_corpus(unfinished)
    # A listed file changed after the job: its SHA-256 no longer matches.
    changed = tmp_path / "changed"
    import shutil
    shutil.copytree(corpus, changed)
    part = next(changed.rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:-1] + b"!")
    with pytest.raises(pf.ParaforgeError, match=re.escape(part.name)):
        pf.open_corpus(changed)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        pf.open_corpus(tmp_path / "nowhere")


def test_open_corpus_keeps_the_partition_columns_typed(corpus, paraforge_bin, tmp_path):
    import pyarrow as pa
    t = pf.open_corpus(corpus).to_table()
    assert t.schema.field("shard").type == pa.int64()
    assert sorted(set(t.column("shard").to_pylist())) == [0, 1]
    bins = tmp_path / "bins"
    run_cli(paraforge_bin, "bin", "--data", str(corpus), "--out", str(bins),
            "--train-sample", "10")
    manifest = json.loads((bins / "_manifest.json").read_text())
    r = pf.open_corpus(bins / "ranges").to_table()
    assert r.schema.field("para_range").type == pa.string()
    got = {k: v for k, v in zip(*pc.value_counts(r.column("para_range")).flatten())}
    assert {k.as_py(): v.as_py() for k, v in got.items()} == {
        k: n for k, n in manifest["ranges"].items() if n}
    f = pf.open_corpus(bins / "deciles" / "para_score").to_table()
    assert f.schema.field("fold").type == pa.int64()
    assert set(f.column("fold").to_pylist()) <= set(range(10))
    assert "fold" not in pf.open_corpus(bins / "train").schema.names


def test_bad_input_raises_and_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        pf.Encoder.load(tmp_path / "no-such-model")
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        pf.Translator(tmp_path / "no-such-model")
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with pytest.raises(pf.ParaforgeError, match="empty-model"):
        pf.Translator(empty)
    garbage = tmp_path / "model.pfe"
    garbage.write_bytes(b"not a model")
    with pytest.raises(pf.ParaforgeError, match="model.pfe"):
        pf.Encoder.load(garbage)
    enc = pf.Encoder.load(repo(SCORER))
    # Undecodable bytes as surrogateescape leaves them: no UTF-8 form.
    bad = b"caf\xe9 au lait".decode("utf-8", "surrogateescape")
    with pytest.raises(ValueError, match=r"sentences\[2\]"):
        enc.encode(["fine", "also fine", bad])
    with pytest.raises(ValueError, match=r"sentences\[1001\]"):
        enc.encode(["x"] * 1001 + [bad], batch_size=500)
    with pytest.raises(TypeError, match=r"sentences\[1\]: a str, not int"):
        enc.encode(["fine", 3])
    with pytest.raises(TypeError, match="bytes"):
        enc.encode(b"raw bytes")
    with pytest.raises(ValueError, match="2 references but 1 translations"):
        pf.score_pairs(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="nist"):
        pf.score_pairs(["a"], ["a"], bleu="nist")
    with pytest.raises(ValueError, match="unknown device"):
        pf.Translator(repo(MODEL), device="tpu")
    # The CLI's bounds: a beam of a million would exhaust memory.
    with pytest.raises(ValueError, match="beam=1000000"):
        pf.Translator(repo(MODEL), beam=1_000_000)
    with pytest.raises(ValueError, match="batch_size=0"):
        pf.Translator(repo(MODEL), batch_size=0)
    with pytest.raises(ValueError, match="streams=0"):
        pf.Translator(repo(MODEL), streams=0)
    with pytest.raises(ValueError, match="repetition_penalty=0"):
        pf.Translator(repo(MODEL), repetition_penalty=0.0)
    with pytest.raises(ValueError, match="not both"):
        pf.score_pairs(["a"], ["a"], model=repo(SCORER),
                              vectors=repo("data/vectors/glove.6B.50d.top25k.txt.gz"))
    with pytest.raises(TypeError, match="Encoder.load"):
        pf.Encoder(repo(SCORER))
    assert pf.ParaforgeError.__module__ == "paraforge_corpus._native"


def test_the_tree_encoder_survives_adversarial_sentences(corpus, paraforge_bin,
                                                        tmp_path):
    """Link Grammar corrupted its heap on a 40,000-character word and took
    the interpreter with it; every call now reaches it bounded."""
    tree = tmp_path / "tree"
    run_cli(paraforge_bin, "train", "--model", "tree-rnn", "--min-word-count", "1",
            "--epochs", "0", "--no-dev", "--data", str(corpus), "--out", str(tree))
    enc = pf.Encoder.load(tree)
    rng = np.random.default_rng(3)
    # 300 tokens is over the parser's 60; the tree itself is evaluated one
    # level per step, so a 5,000-token line took the test from 1 s to 290 s.
    lines = ["a" * 40000 + " .", "a " * 300, "ctrl \x07\x1b[31m", "((( ]]] (S (NP) ))",
             "a man plays a guitar ."]
    lines += ["".join(chr(c) for c in rng.integers(0x20, 0x3000, size=n))
              for n in rng.integers(1, 3000, size=10)]
    out = enc.encode(lines)
    assert out.shape == (len(lines), enc.dim)


def test_encode_is_sentence_transformers_shaped_and_releases_the_gil():
    enc = pf.Encoder.load(repo(SCORER))
    one = enc.encode("A man is playing a guitar.")
    assert one.shape == (enc.dim,) == (enc.get_sentence_embedding_dimension(),)
    unit = enc.encode(["A man is playing a guitar."], normalize_embeddings=True,
                      show_progress_bar=False)
    assert np.linalg.norm(unit[0]) == pytest.approx(1.0, abs=1e-6)
    # A sentence with no trigram the model knows has no embedding (NaN), as
    # para_score is null for it in a corpus.
    assert np.isnan(enc.encode(["", "A man."])[0]).all()
    # While one thread encodes, this one keeps running Python: the call
    # releases the GIL while it works (held, this loop would stall for the
    # whole call).
    # The input grows until one call lasts long enough to tell, whatever
    # the machine's speed.
    n = 60000
    while True:
        big = ["A man is playing a guitar while the sun sets over the harbour."] * n
        result = {}
        worker = threading.Thread(target=lambda: result.update(v=enc.encode(big, batch_size=n)))
        worker.start()
        last, gaps, began = time.perf_counter(), [], time.perf_counter()
        while worker.is_alive():
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
        took = time.perf_counter() - began
        worker.join()
        assert result["v"].shape == (n, enc.dim)
        if took > 0.3 or n >= 2_000_000:
            break
        n *= 4
    assert took > 0.3, f"{n} sentences took {took:.3f} s: too short to tell"
    assert max(gaps) < 0.5 * took, f"Python stalled {max(gaps):.3f} s of a {took:.3f} s call"


def test_the_readmes_python_example_runs_as_written(tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### From Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    # The example prints an embedding matrix's shape, a cosine and a translation.
    assert lines[0] == "(2, 128)", out.stdout
    assert 0.0 < float(lines[1]) <= 1.0, out.stdout
    assert lines[2].strip(), out.stdout
    # Outside the repository the models it names are not there: the error
    # says which path, not a crash.
    elsewhere = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                               text=True, timeout=300)
    assert elsewhere.returncode == 1, elsewhere.stderr
    assert "FileNotFoundError: model models/scorer-trigram" in elsewhere.stderr, elsewhere.stderr


# The sentence-transformers comparison runs in .cache/stenv (`make stenv`:
# sentence-transformers and torch), with this test's freshly built package
# put on its path; without that environment it is skipped, saying so.
STENV_PYTHON = REPO / ".cache/stenv/bin/python"

ST_SCRIPT = r"""
import sys, numpy
from sentence_transformers import SentenceTransformer
a = sys.argv[1:]
for st, inp, out in zip(a[0::3], a[1::3], a[2::3]):
    m = SentenceTransformer(st, device="cpu", trust_remote_code=True)
    assert type(m[0]).__name__ == "ParaforgeEncoder", m
    lines = open(inp, encoding="utf-8").read().split("\n")[:-1]
    numpy.save(out, m.encode(lines, batch_size=64).astype(numpy.float32))
"""


def test_sentence_transformers_embeds_raw_text_as_paraforge_does(corpus, paraforge_bin, tmp_path):
    if not STENV_PYTHON.is_file():
        pytest.skip(f"no {STENV_PYTHON} with sentence-transformers (make stenv)")
    # Raw sentences as written: STS Benchmark's English, the sample's Czech.
    en = []
    for line in (REPO / "data/sts/stsbenchmark/sts-test.csv").read_text(encoding="utf-8").splitlines()[:150]:
        c = line.split("\t")
        en += [c[5], c[6]]
    en += ["Don't STOP, Příliš žluťoučký kůň!", "snake_case and C++ cost $5.", "zzqx"]
    cs = [line.split("\t")[2] for line in
          (REPO / "data/sample/czeng16-heldout.cs-en.tsv").read_text(encoding="utf-8").splitlines()[:300]]
    word = tmp_path / "word.pfe"
    run_cli(paraforge_bin, "train", "--model", "word", "--epochs", "1", "--no-dev",
            "--min-word-count", "1", "--init-vectors", repo("data/vectors/glove.6B.50d.top25k.txt.gz"),
            "--data", str(corpus), "--out", str(word))
    # The package as built for this test run, on the other environment's path.
    site = tmp_path / "site"
    site.mkdir()
    (site / "paraforge_corpus").symlink_to(Path(pf.__file__).parent)
    args, want = [], {}
    for name, model in [("word", str(word)), ("trigram", repo(SCORER))]:
        st = tmp_path / f"{name}-st"
        run_cli(paraforge_bin, "export", "--format", "sentence-transformers", "--model", model,
                "--out", str(st))
        for lang, lines in [("en", en), ("cs", cs)]:
            inp = tmp_path / f"{lang}.txt"
            inp.write_text("\n".join(lines) + "\n", encoding="utf-8")
            ref = tmp_path / f"{name}-{lang}-paraforge.npy"
            run_cli(paraforge_bin, "embed", "--model", model, "--input", str(inp), "--out", str(ref))
            want[(name, lang)] = np.load(ref)
            args += [str(st), str(inp), str(tmp_path / f"{name}-{lang}-st.npy")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run([str(STENV_PYTHON), "-c", ST_SCRIPT, *args], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    for (name, lang), ref in want.items():
        got = np.load(tmp_path / f"{name}-{lang}-st.npy")
        assert got.shape == ref.shape, (name, lang)
        # Sentences with nothing the model knows are NaN in both.
        assert np.array_equal(np.isnan(got).all(1), np.isnan(ref).all(1)), (name, lang)
        norms = np.linalg.norm(np.nan_to_num(ref), axis=1)
        # A zero vector (every token the WORD model's untrained unknown-word
        # row) has no cosine: it must be zero there too.
        zero = ~np.isnan(ref).all(1) & (norms == 0)
        assert np.array_equal(got[zero], ref[zero]), (name, lang)
        ok = ~np.isnan(ref).all(1) & (norms > 0)
        unit = lambda m: m[ok] / np.linalg.norm(m[ok], axis=1, keepdims=True)
        worst = float(np.abs((unit(got) * unit(ref)).sum(1) - 1).max())
        print(f"{name} {lang}: {ok.sum()} sentences, {zero.sum()} zero, "
              f"{(~ok & ~zero).sum()} NaN, max |1 - cosine(st, paraforge)| = {worst:.2e}")
        assert worst <= 1e-5, (name, lang, worst)
