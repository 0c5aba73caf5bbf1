//! `paraforge export --format sentence-transformers`: word vectors as the
//! library's own modules give paraforge's vectors on real sentences, a
//! `.pfe` model exports as the paraforge module, and encoders the format
//! cannot express are refused. (The paraforge module in the real library,
//! on raw text, is python/tests/test_package.py's: it needs the wheel.)
//!
//! The comparison needs a Python with sentence-transformers (and torch):
//! `PARAFORGE_ST_PYTHON`, else `.cache/stenv/bin/python` (`make stenv`).
//! Without one it is skipped, saying why, as in CI; the refusals run
//! everywhere.

use std::path::{Path, PathBuf};

use paraforge_core::{Model, Vectors};
use paraforge_tests::{paraforge_cmd, paraforge_ok, repo_root};

fn glove_path() -> PathBuf {
    repo_root().join("data/vectors/glove.6B.50d.top25k.txt.gz")
}

/// The Python with sentence-transformers, or None, saying why the test is
/// skipped.
fn st_python() -> Option<PathBuf> {
    let p = std::env::var_os("PARAFORGE_ST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/stenv/bin/python"));
    if !p.is_file() {
        eprintln!(
            "SKIPPED: no Python with sentence-transformers at {} (run `make stenv` or set PARAFORGE_ST_PYTHON)",
            p.display()
        );
        return None;
    }
    let ok = std::process::Command::new(&p)
        .args([
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec('sentence_transformers') is None)",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "SKIPPED: {} cannot import sentence_transformers (run `make stenv`)",
            p.display()
        );
        return None;
    }
    Some(p)
}

/// The refused export's error text; nothing may be left at `out`.
fn refusal(model: &Path, out: &Path) -> String {
    let o = paraforge_cmd(&[
        "export".as_ref(),
        "--format".as_ref(),
        "sentence-transformers".as_ref(),
        "--model".as_ref(),
        model.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success(),
        "{} exported: {stderr}",
        model.display()
    );
    assert!(!out.exists(), "{} written", out.display());
    stderr
}

#[test]
fn encoders_the_format_cannot_express_are_refused_naming_them() {
    use paraforge_trainer::neural::Arch;
    use paraforge_trainer::nn_model::{cpu, NeuralModel};

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("st");

    let words: Vec<String> = ["a", "man", "plays"].map(String::from).to_vec();
    let w = Model::from_tables(
        paraforge_core::encoder::Kind::Word,
        words,
        4,
        (0..16).map(|i| i as f32 / 16.0).collect(),
        vec![],
        0,
        vec![],
    )
    .unwrap();
    let lstm = dir.path().join("lstm");
    NeuralModel::init(Arch::Lstm, w, 4, 1, 7, &cpu())
        .unwrap()
        .save(&lstm)
        .unwrap();
    let e = refusal(&lstm, &out);
    assert!(
        e.contains("the lstm encoder") && e.contains("Encoder.load(path).encode(sentences)"),
        "{e}"
    );

    let e = refusal(&repo_root().join("tests/data/tiny-sentence-encoder"), &out);
    assert!(e.contains("the transformer encoder"), "{e}");
}

/// A `.pfe` model (here TRIGRAM, which the library's own modules cannot
/// express) exports as the paraforge module: `modules.json` names it, the
/// model file is the trained one byte for byte (the comparison with the
/// real library is python/tests/test_package.py's, where the wheel is).
#[test]
fn a_pfe_model_exports_as_the_paraforge_module() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("st");
    let model = paraforge_tests::model("scorer-trigram");
    export("--model", &model, &out);
    let modules: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("modules.json")).unwrap()).unwrap();
    assert_eq!(
        modules,
        serde_json::json!([{"idx": 0, "name": "0", "path": "", "type": "paraforge_corpus.st.ParaforgeEncoder"}])
    );
    assert_eq!(
        std::fs::read(out.join("model.pfe")).unwrap(),
        std::fs::read(model.join("model.pfe")).unwrap()
    );
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        readme.contains("trigram") && readme.contains("paraforge_corpus-"),
        "{readme}"
    );
}

/// `--format glove` writes the bytes `export-vectors` writes.
#[test]
fn the_glove_format_is_what_export_vectors_writes() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = ["a", "man", "plays"].map(String::from).to_vec();
    let w: Vec<f32> = (0..8).map(|i| i as f32 / 8.0).collect();
    let m = Model::from_tables(
        paraforge_core::encoder::Kind::Word,
        words,
        2,
        w,
        vec![],
        0,
        vec![],
    )
    .unwrap();
    let pfe = dir.path().join("m.pfe");
    m.save(&pfe).unwrap();
    let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
    paraforge_ok(&[
        "export".as_ref(),
        "--format".as_ref(),
        "glove".as_ref(),
        "--model".as_ref(),
        pfe.as_os_str(),
        "--out".as_ref(),
        a.as_os_str(),
    ]);
    paraforge_ok(&[
        "export-vectors".as_ref(),
        "--model".as_ref(),
        pfe.as_os_str(),
        "--out".as_ref(),
        b.as_os_str(),
    ]);
    let text = std::fs::read(&a).unwrap();
    assert_eq!(text, std::fs::read(&b).unwrap());
    assert!(String::from_utf8(text).unwrap().starts_with("a 0 0.125\n"));
}

/// The first `n` STS Benchmark test pairs' sentences, as written.
fn sts_sentences(n: usize) -> Vec<String> {
    let text =
        std::fs::read_to_string(repo_root().join("data/sts/stsbenchmark/sts-test.csv")).unwrap();
    text.lines()
        .take(n)
        .flat_map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            [c[5].to_string(), c[6].to_string()]
        })
        .collect()
}

fn read_npy(path: &Path) -> (Vec<f32>, usize) {
    let bytes = std::fs::read(path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let d = npy.shape()[1] as usize;
    (npy.into_vec::<f32>().unwrap(), d)
}

/// sentence-transformers' embeddings of each job's sentences (one per
/// line) with the job's model directory, in one Python process (importing
/// torch takes seconds).
fn st_encode(py: &Path, jobs: &[(&Path, &[String])], dir: &Path) -> Vec<(Vec<f32>, usize)> {
    let mut args = Vec::new();
    for (i, (st, lines)) in jobs.iter().enumerate() {
        let input = dir.join(format!("st-{i}.txt"));
        std::fs::write(&input, lines.join("\n") + "\n").unwrap();
        args.extend([st.to_path_buf(), input, dir.join(format!("st-{i}.npy"))]);
    }
    let script = r#"
import sys, numpy
from sentence_transformers import SentenceTransformer
a = sys.argv[1:]
for st, inp, out in zip(a[0::3], a[1::3], a[2::3]):
    m = SentenceTransformer(st, device="cpu")
    lines = open(inp, encoding="utf-8").read().split("\n")[:-1]
    numpy.save(out, m.encode(lines, batch_size=256).astype(numpy.float32))
"#;
    let o = std::process::Command::new(py)
        .arg("-c")
        .arg(script)
        .args(&args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "sentence-transformers failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (0..jobs.len())
        .map(|i| read_npy(&dir.join(format!("st-{i}.npy"))))
        .collect()
}

/// paraforge's embeddings of `lines` through `paraforge embed`.
fn embed(flag: &str, model: &Path, lines: &[String], dir: &Path, name: &str) -> Vec<f32> {
    let input = dir.join(format!("{name}.txt"));
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = dir.join(format!("{name}.npy"));
    paraforge_ok(&[
        "embed".as_ref(),
        flag.as_ref(),
        model.as_os_str(),
        "--input".as_ref(),
        input.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    read_npy(&out).0
}

fn export(flag: &str, model: &Path, out: &Path) {
    paraforge_ok(&[
        "export".as_ref(),
        "--format".as_ref(),
        "sentence-transformers".as_ref(),
        flag.as_ref(),
        model.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
}

/// The Python that README.md gives for paraforge's tokens (its classes
/// differ from Rust's only outside Latin, Greek and Cyrillic text; see
/// docs/encoders.md).
const TOKENS_PY: &str = r#"
import re, sys
WORD = re.compile(r"(?:[^\W_]|[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f])+|\S")
def paraforge_tokens(text):
    return " ".join(WORD.findall(text.lower()))
raw = open(sys.argv[1], encoding="utf-8").read().split("\n")[:-1]
want = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
for i, (r, w) in enumerate(zip(raw, want)):
    if paraforge_tokens(r) != w:
        sys.exit(f"line {i + 1}: {r!r}: {paraforge_tokens(r)!r}, paraforge {w!r}")
print(len(raw))
"#;

/// Checks [`TOKENS_PY`] against paraforge's tokenizer on `raw`.
fn check_python_tokens(py: &Path, raw: &[String], dir: &Path) {
    let tokens: Vec<String> = raw
        .iter()
        .map(|s| paraforge_core::tokenize(s).texts().join(" "))
        .collect();
    let (a, b) = (dir.join("tok-raw.txt"), dir.join("tok-want.txt"));
    std::fs::write(&a, raw.join("\n") + "\n").unwrap();
    std::fs::write(&b, tokens.join("\n") + "\n").unwrap();
    let o = std::process::Command::new(py)
        .args(["-c", TOKENS_PY])
        .args([&a, &b])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "the README's Python tokens differ: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The bundled GloVe vectors, exported and loaded by sentence-transformers,
/// embed 1,000 STS Benchmark sentences as `paraforge embed` does (to 1e-5)
/// when the text is paraforge's tokens joined by spaces: paraforge's sum
/// is the library's mean times the number of known words. The README's
/// Python tokens are paraforge's on these and on harder sentences.
#[test]
fn sentence_transformers_embeds_word_vectors_as_paraforge_does() {
    let Some(py) = st_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let raw = sts_sentences(500);
    let mut hard = raw.clone();
    hard.extend(
        [
            "Don't STOP, Příliš žluťoučký kůň!",
            "3.14 km/h \u{201e}Ahoj\u{201c} \u{2014} řekl, ΣΊΣΥΦΟΣ; Cafe\u{301} OK",
            "snake_case and C++ cost $5.",
        ]
        .map(String::from),
    );
    check_python_tokens(&py, &hard, d);

    let (vectors, _) = Vectors::load(&glove_path()).unwrap();
    let glove_st = d.join("glove-st");
    export("--vectors", &glove_path(), &glove_st);
    let sums = embed("--vectors", &glove_path(), &raw, d, "glove-paraforge");
    let (mut glove_tokens, mut known) = (Vec::new(), Vec::new());
    for s in &raw {
        let t = paraforge_core::tokenize(s);
        glove_tokens.push(t.texts().join(" "));
        known.push(
            t.iter()
                .filter(|tok| vectors.get(tok.text).is_some())
                .count(),
        );
    }
    assert!(known.iter().all(|&k| k > 0));

    let got = st_encode(&py, &[(&glove_st, &glove_tokens)], d);
    let dim = vectors.dim();
    assert!(got.iter().all(|(_, d)| *d == dim));
    let want: Vec<f32> = sums
        .chunks(dim)
        .zip(&known)
        .flat_map(|(row, &k)| row.iter().map(move |x| x / k as f32))
        .collect();
    let diff = max_abs_diff(&got[0].0, &want);
    eprintln!(
        "GloVe vectors: {} sentences, max |sentence-transformers - paraforge / known words| = {diff:e}",
        raw.len()
    );
    assert!(diff < 1e-5, "max abs difference {diff}");
}
