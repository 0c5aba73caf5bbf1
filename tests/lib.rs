//! Shared helpers for the end-to-end tests: where the bundled data and
//! models are, and reading the transformers reference files.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

pub mod procs;

/// The repository root (this crate lives in `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A file or directory under `tests/data/`.
pub fn data(rel: &str) -> PathBuf {
    repo_root().join("tests/data").join(rel)
}

/// A bundled model directory under `models/`.
pub fn model(name: &str) -> PathBuf {
    repo_root().join("models").join(name)
}

/// Reads a JSON-lines file into typed rows.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Vec<T> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// Real pairs from the bundled sample: (id, czech, english).
pub fn sample_pairs(n: usize) -> Vec<(String, String, String)> {
    let path = repo_root().join("data/sample/czeng16-heldout.cs-en.tsv");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .take(n)
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            (c[0].to_string(), c[2].to_string(), c[3].to_string())
        })
        .collect()
}

/// The first `n` lines of the bundled sample (CzEng 1.6 layout) and their ids.
pub fn sample_lines(n: usize) -> (Vec<String>, Vec<String>) {
    let path = repo_root().join("data/sample/czeng16-heldout.cs-en.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: Vec<String> = text.lines().take(n).map(String::from).collect();
    let ids = lines
        .iter()
        .map(|l| l.split('\t').next().unwrap_or_default().to_string())
        .collect();
    (lines, ids)
}

/// A job config's text as the end-to-end tests share it: CzEng 1.6 input,
/// the tiny test model on one thread. `job` and `model` are more lines for
/// those sections; `rest` is further sections, verbatim.
pub fn job_toml(
    name: &str,
    input: &str,
    output: &str,
    job: &str,
    model: &str,
    rest: &str,
) -> String {
    format!(
        "[job]\nname = \"{name}\"\noutput = \"{output}\"\n{job}\n\n[input]\npaths = [\"{input}\"]\nformat = \"czeng16\"\n\n[model]\ndir = \"{}\"\nthreads = 1\n{model}\n\n{rest}\n",
        self::model("tiny-cs-en").display()
    )
}

/// `[scoring]` with the bundled GloVe vectors.
pub fn scoring_section() -> String {
    format!(
        "[scoring]\nvectors = \"{}\"\n",
        repo_root()
            .join("data/vectors/glove.6B.50d.top25k.txt.gz")
            .display()
    )
}

/// Back-translates and scores the first `n` sample pairs with the bundled
/// test model and vectors (the worker's steps, in one process), and writes
/// them as `files` Parquet files under `dir`. Returns the rows.
pub fn scored_dataset(dir: &Path, n: usize, files: usize) -> Vec<paraforge_core::PairRow> {
    scored_dataset_with(dir, n, files, "tiny-cs-en", 4)
}

/// [`scored_dataset`] with the bundled model `model` (e.g. `demo-cs-en`,
/// whose translations are good enough to learn from) and `beams`. With
/// `demo-en-cs` the English side is translated: Czech pairs, whose
/// para_score the English vectors mostly cannot give.
pub fn scored_dataset_with(
    dir: &Path,
    n: usize,
    files: usize,
    model_name: &str,
    beams: usize,
) -> Vec<paraforge_core::PairRow> {
    use paraforge_core::schema::{schema, PairFileWriter};
    use paraforge_core::{RowsBuilder, Scorer, Vectors};
    use paraforge_nmt::{GenerateOptions, LoadOptions, Translator};

    let pairs = sample_pairs(n);
    let mut t = Translator::load(&model(model_name), &LoadOptions::default()).expect("test model");
    let en_cs = model_name.ends_with("en-cs");
    let sides = |p: &(String, String, String)| -> (String, String) {
        match en_cs {
            true => (p.2.clone(), p.1.clone()),
            false => (p.1.clone(), p.2.clone()),
        }
    };
    let cs: Vec<String> = pairs.iter().map(|p| sides(p).0).collect();
    let cs: Vec<&str> = cs.iter().map(String::as_str).collect();
    let o = GenerateOptions {
        num_beams: beams,
        max_new_tokens: Some(48),
        ..GenerateOptions::default()
    };
    let out = t.translate(&cs, &o).expect("translate");
    let (vectors, _) = Vectors::load(&repo_root().join("data/vectors/glove.6B.50d.top25k.txt.gz"))
        .expect("vectors");
    let mut scorer = Scorer::new(Some(&vectors));
    let rows: Vec<paraforge_core::PairRow> = pairs
        .iter()
        .zip(&out)
        .map(|(p, tr)| {
            let (source, reference) = sides(p);
            paraforge_core::PairRow {
                id: p.0.clone(),
                scores: scorer.score(&reference, &tr.text),
                source,
                reference,
                translation: tr.text.clone(),
                candidate_rank: 1,
                translation_score: Some(tr.score),
                source_len: Some(tr.source_tokens as i32),
                truncated: tr.flag.is_some(),
            }
        })
        .collect();
    let per = rows.len().div_ceil(files.max(1));
    for (i, chunk) in rows.chunks(per).enumerate() {
        let mut b = RowsBuilder::default();
        for r in chunk {
            b.push(r);
        }
        let mut w =
            PairFileWriter::create(&dir.join(format!("part-{i:05}.parquet")), schema(), &[])
                .expect("writer");
        w.write(&b.finish()).expect("write");
        w.close().expect("close");
    }
    // A finished dataset, as a job leaves it: readers verify what they read.
    paraforge_core::dataset::testing::seal(dir, paraforge_core::layout::ManifestKind::Job);
    rows
}

/// The `paraforge` binary that `cargo test --workspace` builds next to the
/// test executables (or `PARAFORGE_BIN`), for tests that run real processes.
pub fn paraforge_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PARAFORGE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/paraforge
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("paraforge"))
        .expect("target directory");
    assert!(
        bin.is_file(),
        "{} is missing: build it first (`cargo build --bin paraforge`, which `make test` does)",
        bin.display()
    );
    bin
}

/// Runs `paraforge` with `args`; its exit status and both streams.
pub fn paraforge_cmd<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    std::process::Command::new(paraforge_bin())
        .args(args)
        .output()
        .expect("starting paraforge")
}

/// Runs `paraforge` with `args`, asserts it succeeded (showing both streams
/// when not) and returns its standard output.
pub fn paraforge_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let o = std::process::Command::new(paraforge_bin())
        .args(args)
        .output()
        .expect("starting paraforge");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "paraforge {:?} failed:\n{stdout}\n{}",
        args.iter()
            .map(|a| a.as_ref().to_string_lossy())
            .collect::<Vec<_>>(),
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// id -> translation of every row of a committed local output.
pub fn output_rows(out: &Path) -> Vec<(String, String)> {
    use arrow_array::{Array, StringArray};
    use paraforge_core::dataset::dataset_files;
    use paraforge_core::schema::PairReader;
    let mut rows = Vec::new();
    for f in dataset_files(out).unwrap() {
        for b in PairReader::open(&f, &["id", "translation"]).unwrap() {
            let b = b.unwrap();
            let col = |name: &str| {
                b.column_by_name(name)
                    .unwrap()
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .unwrap()
                    .clone()
            };
            let (ids, tr) = (col("id"), col("translation"));
            for i in 0..b.num_rows() {
                rows.push((ids.value(i).to_string(), tr.value(i).to_string()));
            }
        }
    }
    rows
}

/// Starts a job's coordinator in this process on free loopback ports (gRPC
/// and metrics), as the in-process tests share it.
pub async fn start_on_loopback(
    cfg: &paraforge_job::config::JobConfig,
) -> Result<paraforge_coordinator::run::Running, paraforge_coordinator::run::RunError> {
    paraforge_coordinator::run::start(
        cfg,
        Some("127.0.0.1:0".parse().expect("an address")),
        Some("127.0.0.1:0".parse().expect("an address")),
    )
    .await
}

/// One HTTP/1.1 GET over `io`; returns (status code, body).
pub async fn http_get<S>(mut io: S, path: &str, token: Option<&str>) -> (u16, String)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    io.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let _ = io.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let body = text
        .find("\r\n\r\n")
        .map_or(String::new(), |i| text[i + 4..].to_string());
    (code, body)
}

/// [`http_get`] over plain TCP.
pub async fn get_plain(
    addr: std::net::SocketAddr,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    http_get(
        tokio::net::TcpStream::connect(addr).await.unwrap(),
        path,
        token,
    )
    .await
}

/// The value of one series (`name{labels}` exactly as the page writes it)
/// on a metrics page, if the page has it.
pub fn metric(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// Spearman's rho, written here apart from the trainer's: ranks with ties
/// averaged, then Pearson's r of the ranks.
pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    fn ranks(x: &[f64]) -> Vec<f64> {
        x.iter()
            .map(|a| {
                let below = x.iter().filter(|b| *b < a).count() as f64;
                let same = x.iter().filter(|b| *b == a).count() as f64;
                below + (same + 1.0) / 2.0
            })
            .collect()
    }
    let (x, y) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let cov: f64 = x.iter().zip(&y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum::<f64>().sqrt();
    let sy: f64 = y.iter().map(|b| (b - my).powi(2)).sum::<f64>().sqrt();
    cov / (sx * sy)
}

/// A card paraforge wrote (a model's or a dataset's): its Hub metadata by
/// key, read as it writes it (`key: <JSON>` lines), and its text; a card
/// without front matter fails the test.
pub fn read_card(
    path: &Path,
) -> (
    std::collections::BTreeMap<String, serde_json::Value>,
    String,
) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no card at {}: {e}", path.display()));
    let (meta, body) = paraforge_core::layout::card::read_front_matter(&text)
        .unwrap_or_else(|| panic!("{}: no front matter\n{text}", path.display()));
    (meta.into_iter().collect(), body.to_string())
}

/// The `model-index` value of `metric` (`pearson`, `spearman`) on the
/// dataset named `dataset`, from a model card's metadata.
pub fn card_metric(
    meta: &std::collections::BTreeMap<String, serde_json::Value>,
    dataset: &str,
    metric: &str,
) -> Option<f64> {
    meta.get("model-index")?[0]["results"]
        .as_array()?
        .iter()
        .find(|r| r["dataset"]["name"] == dataset)?["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["type"] == metric)?["value"]
        .as_f64()
}

/// The first `keep` pairs of the bundled SICK train, trial and test files
/// (after their header line) written into `dir` under their own names.
pub fn sick_slice(dir: &Path, keep: [usize; 3]) {
    let sick = repo_root().join("data/sts/sick2014");
    for (file, keep) in [
        "SICK_train.txt",
        "SICK_trial.txt",
        "SICK_test_annotated.txt",
    ]
    .into_iter()
    .zip(keep)
    {
        let text = std::fs::read_to_string(sick.join(file)).unwrap();
        let part: Vec<&str> = text.lines().take(keep + 1).collect();
        std::fs::write(dir.join(file), part.join("\n") + "\n").unwrap();
    }
}
