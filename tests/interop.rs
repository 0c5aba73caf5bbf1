//! The output read by other tools (pyarrow and DuckDB read the Hive-style
//! directory as one table) and written to S3 (a moto server started here).
//! Both need the small Python environment `make testenv` builds; without it
//! they say so and pass (the rest of the suite does not depend on them).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use paraforge_coordinator::run::{finalize, start};
use paraforge_job::config::JobConfig;
use paraforge_job::storage::Storage;
use paraforge_tests::{job_toml, repo_root, sample_lines, scoring_section};
use paraforge_worker::node::{run as run_worker, WorkerOptions};

fn python() -> Option<PathBuf> {
    let p = std::env::var_os("PARAFORGE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/testenv/bin/python"));
    p.is_file().then_some(p)
}

/// The test environment's Python, with `module` importable ("" for none);
/// None, saying why the test is skipped, otherwise.
fn python_with(module: &str) -> Option<PathBuf> {
    let Some(py) = python() else {
        eprintln!("SKIPPED: no Python test environment (run `make testenv`)");
        return None;
    };
    if !module.is_empty() && !has_module(&py, module) {
        eprintln!(
            "SKIPPED: {module} is not installed in the test environment (run `make testenv`)"
        );
        return None;
    }
    Some(py)
}

/// The first 600 sample lines.
fn input_text() -> String {
    sample_lines(600).0.join("\n") + "\n"
}

fn config_text(input: &str, output: &str, state: Option<&Path>, extra: &str) -> String {
    let state = state
        // Any free ports: `paraforge run` as a process must not collide with
        // another coordinator on the machine.
        .map(|s| {
            format!(
                "[coordinator]\nstate = \"{}\"\nlisten = \"127.0.0.1:0\"\nmetrics = \"127.0.0.1:0\"\n",
                s.display()
            )
        })
        .unwrap_or_default();
    job_toml(
        "interop",
        input,
        output,
        "shard_pairs = 200",
        "beam = 2\nmax_new_tokens = 24",
        &format!("{}\n{state}{extra}", scoring_section()),
    )
}

fn config(dir: &Path, output: &str, state: Option<&Path>) -> JobConfig {
    let input = dir.join("input.tsv");
    std::fs::write(&input, input_text()).unwrap();
    let text = config_text(input.to_str().unwrap(), output, state, "");
    JobConfig::parse(&text, Path::new("interop.toml")).unwrap()
}

async fn run_job(cfg: &JobConfig) -> paraforge_coordinator::run::Manifest {
    let coord = start(
        cfg,
        Some("127.0.0.1:0".parse().unwrap()),
        Some("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let o = WorkerOptions {
        coordinator: format!("http://{}", coord.grpc_addr),
        name: "w".into(),
        connect_attempts: 5,
        access: Default::default(),
        device: None,
        model_dir: None,
    };
    run_worker(o, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    let m = finalize(&coord.shared, &Storage::open(&cfg.job.output).unwrap())
        .await
        .unwrap();
    coord.stop().await;
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyarrow_and_duckdb_read_the_output_as_one_table() {
    let Some(py) = python_with("") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = config(dir.path(), out.to_str().unwrap(), None);
    let m = run_job(&cfg).await;
    assert_eq!(m.pairs, 600);
    let bins = dir.path().join("out-bins");
    paraforge_tests::paraforge_ok(&[
        "bin".as_ref(),
        "--data".as_ref(),
        out.as_os_str(),
        "--out".as_ref(),
        bins.as_os_str(),
        "--train-sample".as_ref(),
        "50".as_ref(),
    ]);
    let script = r#"
import sys, json, pyarrow.dataset as ds, duckdb, yaml
root, bins = sys.argv[1], sys.argv[2]
# The job's card sits beside the shards as _README.md, which these readers skip.
card = yaml.safe_load(open(root + "/_README.md").read().split("---\n")[1])
m = json.load(open(root + "/_manifest.json"))
assert card["configs"][0]["data_files"][0]["path"] == [f["path"] for f in m["files"]], card
assert card["size_categories"] == ["n<1K"] and card["license"] == "other", card
t = ds.dataset(root, format="parquet", partitioning="hive").to_table()
assert t.num_rows == 600, t.num_rows
assert len(set(t.column("id").to_pylist())) == 600
assert "shard" in t.column_names and "trigram_overlap" in t.column_names
n, ids, mean = duckdb.sql(f"select count(*), count(distinct id), avg(trigram_overlap) from read_parquet('{root}/shard=*/*.parquet', hive_partitioning=true)").fetchall()[0]
assert (n, ids) == (600, 600), (n, ids)
# The partition column is an integer to every reader (DuckDB reads a value
# with leading zeros as a string).
types = {"pyarrow": str(t.schema.field("shard").type)}
types["duckdb"] = duckdb.sql(f"select distinct typeof(shard) from read_parquet('{root}/shard=*/*.parquet', hive_partitioning=true)").fetchall()
import polars as pl
types["polars"] = str(pl.scan_parquet(root + "/shard=*/*.parquet", hive_partitioning=True).collect_schema()["shard"])
assert types == {"pyarrow": "int32", "duckdb": [("BIGINT",)], "polars": "Int64"}, types
# The bins' partitions too: fold=N an integer, para_range=LABEL a string.
folds = bins + "/deciles/para_score/fold=*/*.parquet"
ranges = bins + "/ranges/para_range=*/*.parquet"
types = {
    "pyarrow": [str(ds.dataset(bins + d, format="parquet", partitioning="hive").schema.field(k).type)
                for d, k in [("/deciles/para_score", "fold"), ("/ranges", "para_range")]],
    "duckdb": [duckdb.sql(f"select distinct typeof({k}) from read_parquet('{g}', hive_partitioning=true)").fetchall()[0][0]
               for g, k in [(folds, "fold"), (ranges, "para_range")]],
    "polars": [str(pl.scan_parquet(g, hive_partitioning=True).collect_schema()[k])
               for g, k in [(folds, "fold"), (ranges, "para_range")]],
}
assert types == {"pyarrow": ["int32", "string"], "duckdb": ["BIGINT", "VARCHAR"], "polars": ["Int64", "String"]}, types
print("ok", t.num_rows, n, round(mean, 4), sorted(types))
"#;
    let o = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(&out)
        .arg(&bins)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.starts_with("ok 600 600"), "{stdout}");

    // Hugging Face `datasets`: the output loads as exactly the job's pairs
    // (its card names them; the bins' `train` folder inside would otherwise
    // be taken for the whole split), and each bin loads by name.
    let Some(py) = python_with("datasets") else {
        return;
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bins.join("_manifest.json")).unwrap()).unwrap();
    let script = r#"
import os, shutil, sys, json, datasets
root, bins = sys.argv[1], sys.argv[2]
d = datasets.load_dataset(root)["train"]
assert d.num_rows == 600 and len(set(d["id"])) == 600, d
# The job's card, uploaded as the repository's README.md beside the shards
# (here: copied), names the pairs through its configs.
hub = root + "-hub"
os.makedirs(hub)
shutil.copy(os.path.join(root, "_README.md"), os.path.join(hub, "README.md"))
for name in os.listdir(root):
    if name.startswith("shard="):
        shutil.copytree(os.path.join(root, name), os.path.join(hub, name))
h = datasets.load_dataset(hub)["train"]
assert h.num_rows == 600, h
m = json.load(open(bins + "/_manifest.json"))
for label, n in m["ranges"].items():
    if n == 0:
        continue  # an empty bin has no file, so no config
    b = datasets.load_dataset(bins, "range-" + label)["train"]
    assert b.num_rows == n, (label, b.num_rows, n)
t = datasets.load_dataset(bins, "train")["train"]
f9 = datasets.load_dataset(bins, "decile-para_score-9")["train"]
print("ok", d.num_rows, t.num_rows, f9.num_rows)
"#;
    let hf = dir.path().join("hf");
    let o = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(&out)
        .arg(&bins)
        .env("HF_HOME", &hf)
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let f9 = manifest["deciles"]["para_score"]["counts"][9]
        .as_u64()
        .unwrap();
    assert_eq!(stdout.trim(), format!("ok 600 50 {f9}"), "{stdout}");
}

struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_writes_to_s3_through_object_store() {
    let Some(py) = python_with("") else {
        return;
    };
    let moto_bin = py.with_file_name("moto_server");
    if !moto_bin.is_file() {
        eprintln!("SKIPPED: moto_server is not installed in the test environment");
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _moto = Moto(
        Command::new(&moto_bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let endpoint = format!("http://127.0.0.1:{port}");
    // Wait for it, then create the bucket (moto takes an unsigned PUT).
    let mut up = false;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !up {
        eprintln!("SKIPPED: moto_server did not start");
        return;
    }
    let made = Command::new(&py)
        .arg("-c")
        .arg(format!("import urllib.request as u; u.urlopen(u.Request('{endpoint}/paraforge-test', method='PUT')).read()"))
        .status()
        .unwrap();
    assert!(made.success(), "creating the bucket on moto");
    // Safety: set before any S3 client exists in this test binary.
    unsafe {
        std::env::set_var("AWS_ENDPOINT_URL", &endpoint);
        std::env::set_var("AWS_ACCESS_KEY_ID", "test");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
        std::env::set_var("AWS_REGION", "us-east-1");
    }
    let dir = tempfile::tempdir().unwrap();
    // The input is read from S3 too: planned and read in ranged GETs.
    Storage::open("s3://paraforge-test/inputs")
        .unwrap()
        .put("input.tsv", bytes::Bytes::from(input_text()))
        .await
        .unwrap();
    let text = config_text(
        "s3://paraforge-test/inputs/input.tsv",
        "s3://paraforge-test/jobs/interop",
        Some(&dir.path().join("state.redb")),
        "",
    );
    let cfg = JobConfig::parse(&text, Path::new("interop.toml")).unwrap();
    let m = run_job(&cfg).await;
    assert_eq!((m.pairs, m.shards_committed), (600, 3));
    let s3 = Storage::open("s3://paraforge-test/jobs/interop").unwrap();
    let listed: Vec<String> = s3
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert!(
        listed.contains(&"_SUCCESS".to_string()) && listed.contains(&"_manifest.json".to_string()),
        "{listed:?}"
    );
    let mut rows = 0;
    for f in &m.files {
        let bytes = s3.get(&f.path).await.unwrap();
        use sha2::Digest;
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&bytes)),
            f.sha256,
            "{} checksum",
            f.path
        );
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        rows += r.map(|b| b.unwrap().num_rows()).sum::<usize>();
    }
    assert_eq!(rows, 600);

    // `paraforge run` as a process: S3 in, S3 out, bins at the end staged
    // locally and uploaded next to the output, to `<output>-bins`.
    let text = config_text(
        "s3://paraforge-test/inputs/input.tsv",
        "s3://paraforge-test/jobs/cli",
        Some(&dir.path().join("cli.redb")),
        "[bins]\ndeciles = [\"para_score\"]\n",
    );
    let cfg_path = dir.path().join("cli.toml");
    std::fs::write(&cfg_path, text).unwrap();
    let stdout = paraforge_tests::paraforge_ok(&[
        "run".as_ref(),
        "--workers".as_ref(),
        "2".as_ref(),
        "--config".as_ref(),
        cfg_path.as_os_str(),
    ]);
    assert!(stdout.contains("600 pairs"), "{stdout}");
    let listed: Vec<String> = Storage::open("s3://paraforge-test/jobs/cli-bins")
        .unwrap()
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert!(
        listed.iter().any(|p| p.starts_with("ranges/para_range="))
            && listed
                .iter()
                .any(|p| p.starts_with("deciles/para_score/fold="))
            && listed.contains(&"_manifest.json".to_string())
            && listed.contains(&"README.md".to_string()),
        "{listed:?}"
    );
    // Its card names the output by its URL, not the staging directory
    // that is gone.
    let card = Storage::open("s3://paraforge-test/jobs/cli-bins")
        .unwrap()
        .get("README.md")
        .await
        .unwrap();
    let card = String::from_utf8_lossy(&card);
    assert!(
        card.contains("Bins of s3://paraforge-test/jobs/cli")
            && card.contains("at `s3://paraforge-test/jobs/cli`"),
        "{card}"
    );
    // The model is named by its path, under the clone, wherever that is
    // (a clone under /tmp failed here before).
    let beside_repo = card.replace(&*paraforge_tests::repo_root().to_string_lossy(), "<repo>");
    assert!(
        !beside_repo.contains(&*std::env::temp_dir().to_string_lossy()),
        "{card}"
    );

    // `paraforge rescore` with the default scorer, S3 to S3: a complete new
    // dataset, the original untouched.
    let snapshot = |url: &'static str| async move {
        let s = Storage::open(url).unwrap();
        let mut all = Vec::new();
        for (p, _) in s.list("").await.unwrap() {
            use sha2::Digest;
            let sha = hex::encode(sha2::Sha256::digest(s.get(&p).await.unwrap()));
            all.push((p, sha));
        }
        all.sort();
        all
    };
    let before = snapshot("s3://paraforge-test/jobs/interop").await;
    let args = |out: &str| -> Vec<String> {
        [
            "rescore",
            "--data",
            "s3://paraforge-test/jobs/interop",
            "--model",
            &repo_root()
                .join("models/scorer-trigram")
                .display()
                .to_string(),
            "--out",
            out,
        ]
        .map(String::from)
        .to_vec()
    };
    let stdout = paraforge_tests::paraforge_ok(&args("s3://paraforge-test/jobs/interop-rescored"));
    assert!(stdout.contains("600 pairs in 3 files"), "{stdout}");
    assert_eq!(snapshot("s3://paraforge-test/jobs/interop").await, before);
    let new = Storage::open("s3://paraforge-test/jobs/interop-rescored").unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&new.get("_manifest.json").await.unwrap()).unwrap();
    assert_eq!(manifest["rows"], 600);
    assert_eq!(manifest["input"], "s3://paraforge-test/jobs/interop");
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len(), m.files.len());
    let mut rows = 0;
    for f in files {
        let bytes = new.get(f["path"].as_str().unwrap()).await.unwrap();
        use sha2::Digest;
        assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), f["sha256"]);
        let r =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        let kind = r
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .unwrap()
            .iter()
            .find(|kv| kv.key == paraforge_core::schema::meta::PARA_SCORER_KIND)
            .and_then(|kv| kv.value.clone());
        assert!(kind.unwrap().starts_with("trigram model"));
        rows += r
            .build()
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum::<usize>();
    }
    assert_eq!(rows, 600);
    // A second run into the same prefix is refused, and changes nothing.
    let o = std::process::Command::new(paraforge_tests::paraforge_bin())
        .args(args("s3://paraforge-test/jobs/interop-rescored"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("holds a finished dataset") && err.contains("--overwrite"),
        "{err}"
    );

    // `paraforge lexicon` from S3 to S3, through the same staging: a
    // lexicon's manifest, its file checked, `_SUCCESS` last.
    let out = paraforge_tests::paraforge_ok(&[
        "lexicon",
        "--data",
        "s3://paraforge-test/jobs/interop",
        "--out",
        "s3://paraforge-test/jobs/interop-lexicon",
        "--min-count",
        "1",
    ]);
    assert!(out.contains("of 600 pairs counted"), "{out}");
    let lex = Storage::open("s3://paraforge-test/jobs/interop-lexicon").unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&lex.get("_manifest.json").await.unwrap()).unwrap();
    assert_eq!(manifest["kind"], "lexicon");
    let f = &manifest["files"][0];
    let bytes = lex.get(f["path"].as_str().unwrap()).await.unwrap();
    use sha2::Digest;
    assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), f["sha256"]);
    assert!(f["rows"].as_u64().unwrap() > 100, "{f}");
    let listed: Vec<String> = lex
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert!(
        listed.contains(&"_SUCCESS".to_string()) && listed.contains(&"README.md".to_string()),
        "{listed:?}"
    );
}

/// Whether the test Python can import `module`.
fn has_module(py: &Path, module: &str) -> bool {
    Command::new(py)
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a Python script on a JSON-lines input; returns its stdout lines.
fn python_lines(py: &Path, script: &str, input: &Path, extra: &[&str]) -> Vec<String> {
    let o = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(input)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// `sentence_bleu` (the column the worker writes) is sacrebleu's
/// `sentence_bleu(translation, [reference])` with its defaults, to 1e-4, on
/// 500 real pairs translated here by the test model, on the same
/// references against their Czech sources (non-ASCII, few matches) and
/// against themselves lowercased, and on inputs that reach every branch of
/// the 13a tokenizer.
#[test]
fn sentence_bleu_matches_sacrebleu_on_real_pairs() {
    let Some(py) = python_with("sacrebleu") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rows = paraforge_tests::scored_dataset(dir.path(), 500, 1);
    let mut cases: Vec<(String, String, f64)> = Vec::new();
    for r in &rows {
        cases.push((
            r.translation.clone(),
            r.reference.clone(),
            r.scores.sentence_bleu as f64,
        ));
    }
    let bleu = paraforge_core::bleu::sentence_bleu;
    for r in rows.iter().take(200) {
        for (h, rf) in [
            (r.source.clone(), r.reference.clone()),
            (r.reference.to_lowercase(), r.reference.clone()),
        ] {
            let s = bleu(&h, &rf);
            cases.push((h, rf, s));
        }
    }
    for (h, rf) in [
        (
            "It costs 1,000.50 - or 3.5-4 &quot;units&quot; &amp; more.",
            "It costs 1,000.50 or 3.5 - 4 \"units\" & more .",
        ),
        (
            "a-\nb <skipped> c\nd {x} [y] `z` ~w",
            "ab c d { x } [ y ] ` z ` ~ w",
        ),
        ("Hello,world.Bye,2,3.x", "Hello , world . Bye , 2,3 . x"),
        ("  trailing spaces \u{a0}\u{2003} ", "trailing spaces"),
        ("", "an empty hypothesis"),
        ("one", "one"),
        ("the the the the", "the cat"),
    ] {
        cases.push((h.to_string(), rf.to_string(), bleu(h, rf)));
    }
    let input = dir.path().join("bleu.jsonl");
    let text: String = cases
        .iter()
        .map(|(h, r, _)| serde_json::json!({"h": h, "r": r}).to_string() + "\n")
        .collect();
    std::fs::write(&input, text).unwrap();
    let script = r#"
import sys, json, sacrebleu
for line in open(sys.argv[1], encoding="utf-8"):
    c = json.loads(line)
    print(repr(sacrebleu.sentence_bleu(c["h"], [c["r"]]).score))
"#;
    let got = python_lines(&py, script, &input, &[]);
    assert_eq!(got.len(), cases.len());
    let (mut worst, mut nonzero, mut full) = (0.0f64, 0, 0);
    for ((h, r, ours), theirs) in cases.iter().zip(&got) {
        let theirs: f64 = theirs.parse().unwrap();
        let d = (ours - theirs).abs();
        assert!(d <= 1e-4, "{h:?} / {r:?}: ours {ours}, sacrebleu {theirs}");
        worst = worst.max(d);
        nonzero += (theirs > 0.0) as usize;
        full += (theirs > 99.999) as usize;
    }
    eprintln!(
        "sentence_bleu: {} cases, worst |ours - sacrebleu| = {worst:e}, {nonzero} above 0, {full} at 100",
        cases.len()
    );
    assert!(nonzero > 300 && full >= 1, "{nonzero} {full}");
}

/// The perplexity column's language model: `paraforge_core::lm` trains a
/// 3-gram model on 2,000 real references and scores 300 held-out English
/// references and the Czech sources of the first 50 (mostly unknown words) as KenLM's
/// Python module scores the same ARPA file (log10 probability with <s> and
/// </s>, and perplexity), to 1e-4. Where `kenlm` does not install, the
/// script scores with its own reading of the ARPA backoff rule instead
/// (written independently of `lm.rs`) and says so.
#[test]
fn perplexity_matches_kenlm_on_a_trained_model() {
    let Some(py) = python_with("") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (lines, _) = sample_lines(2400);
    let train = dir.path().join("train.tsv");
    std::fs::write(&train, lines[..2000].join("\n") + "\n").unwrap();
    let arpa = dir.path().join("refs.arpa");
    let (summary, skipped) = paraforge_core::lm::train_files(&[train], Some(3), 3, &arpa).unwrap();
    assert_eq!((summary.sentences, skipped), (2000, 0));
    let model = paraforge_core::ArpaModel::load(&arpa).unwrap();
    let mut cases: Vec<(String, f64, f64)> = Vec::new();
    for l in &lines[2000..] {
        let f: Vec<&str> = l.split('\t').collect();
        for text in [f[3]]
            .into_iter()
            .chain((cases.len() < 100).then_some(f[2]))
        {
            let toks = paraforge_core::tokenize(text);
            let words: Vec<&str> = toks.iter().map(|t| t.text).collect();
            let (lp, _) = model.score_words(words.iter().copied());
            cases.push((words.join(" "), lp, model.perplexity(text)));
        }
    }
    let input = dir.path().join("sentences.jsonl");
    let text: String = cases
        .iter()
        .map(|(s, _, _)| serde_json::json!({ "s": s }).to_string() + "\n")
        .collect();
    std::fs::write(&input, text).unwrap();
    let script = r#"
import sys, json
path, arpa = sys.argv[1], sys.argv[2]
try:
    import kenlm
    m = kenlm.Model(arpa)
    print("kenlm")
    for line in open(path, encoding="utf-8"):
        s = json.loads(line)["s"]
        print(repr(m.score(s, bos=True, eos=True)), repr(m.perplexity(s)))
except ImportError:
    # The ARPA backoff rule, read from the file here.
    print("reference")
    grams, order, section = {}, 0, None
    for line in open(arpa, encoding="utf-8"):
        line = line.strip()
        if line.startswith("ngram "):
            order = max(order, int(line[6:].split("=")[0]))
        elif line.startswith("\\") and line.endswith("-grams:"):
            section = int(line[1:line.index("-")])
        elif line and section and not line.startswith("\\"):
            f = line.split()
            grams[tuple(f[1:1 + section])] = (float(f[0]), float(f[1 + section]) if len(f) > 1 + section else 0.0)
    def lp(ctx, w):
        if (w,) not in grams:
            w = "<unk>"
        ctx = ctx[-(order - 1):]
        if tuple(ctx) + (w,) in grams:
            return grams[tuple(ctx) + (w,)][0]
        return grams.get(tuple(ctx), (0, 0.0))[1] + lp(ctx[1:], w)
    for line in open(path, encoding="utf-8"):
        words = json.loads(line)["s"].split()
        ctx, total = ["<s>"], 0.0
        for w in words + ["</s>"]:
            total += lp(ctx, w)
            ctx = ctx + [w if (w,) in grams else "<unk>"]
        print(repr(total), repr(10 ** (-total / (len(words) + 1))))
"#;
    let got = python_lines(&py, script, &input, &[arpa.to_str().unwrap()]);
    let by = got[0].clone();
    assert_eq!(got.len(), cases.len() + 1);
    if by != "kenlm" {
        eprintln!("NOTE: the kenlm Python package is not installed; compared with the script's own backoff computation");
    }
    let (mut worst_lp, mut worst_ppl) = (0.0f64, 0.0f64);
    for ((s, lp, ppl), line) in cases.iter().zip(&got[1..]) {
        let (a, b) = line.split_once(' ').unwrap();
        let (their_lp, their_ppl): (f64, f64) = (a.parse().unwrap(), b.parse().unwrap());
        assert!(
            (lp - their_lp).abs() <= 1e-4,
            "{s:?}: log10 {lp} vs {by} {their_lp}"
        );
        let rel = (ppl - their_ppl).abs() / their_ppl;
        assert!(rel <= 1e-4, "{s:?}: perplexity {ppl} vs {by} {their_ppl}");
        worst_lp = worst_lp.max((lp - their_lp).abs());
        worst_ppl = worst_ppl.max(rel);
    }
    eprintln!(
        "perplexity vs {by}: {} sentences, worst |log10 P| difference {worst_lp:e}, worst relative perplexity difference {worst_ppl:e}",
        cases.len()
    );
}

/// A neural encoder's directory is what docs/encoders.md says: Python with
/// `safetensors` and numpy alone, following that page, computes the same
/// sentence embeddings as paraforge from `model.safetensors` and
/// `config.json`, for every encoder.
#[test]
fn neural_encoders_open_in_python_as_documented() {
    use paraforge_trainer::neural::{Arch, Spec};
    use paraforge_trainer::nn_model::{cpu, NeuralModel};
    let Some(py) = python_with("safetensors") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let vectors = paraforge_core::Vectors::from_reader(
        "a 0.5 0.1 -0.2 0.3\nman 0.3 0.9 0.1 -0.4\nplays 0.2 -0.4 0.8 0.1\nguitar -0.6 0.2 0.5 0.7\n. 0.1 0.1 0.1 0.1\n"
            .as_bytes(),
        Path::new("mini.txt"),
    )
    .unwrap()
    .0;
    let texts = ["A man plays a guitar.", "guitar", "a zebra plays ."];
    const SCRIPT: &str = r#"
import json, sys
import numpy as np
from safetensors.numpy import load_file
d, sents = sys.argv[1], json.loads(sys.argv[2])
t = load_file(d + "/model.safetensors")
c = json.load(open(d + "/config.json"))
assert t["emb"].shape == (c["vocab"], c["word_dim"]) and len(c["words"]) + 1 == c["vocab"]
sig = lambda z: 1 / (1 + np.exp(-z))
def encode(a, s, pre="", tree=()):
    P = lambda name: t[pre + name]
    xs = t["emb"][s].astype(np.float64)
    def lstm(p, xs, out_gate=True, gran=False, pool=np.mean):
        h_dim = P(p + ".w_hh").shape[0]
        h, cell, hs, gs = np.zeros(h_dim), np.zeros(h_dim), [], []
        for x in xs:
            z = x @ P(p + ".w_ih") + h @ P(p + ".w_hh") + P(p + ".b")[0]
            i, f, o, g = sig(z[:h_dim]), sig(z[h_dim:2*h_dim]), sig(z[2*h_dim:3*h_dim]), np.tanh(z[3*h_dim:])
            cell = f * cell + i * g
            h = (o if out_gate else 1) * np.tanh(cell)
            hs.append(h)
            if gran:
                gs.append(x * sig(x @ P("gate.w_x") + h @ P("gate.w_h") + P("gate.b")[0]))
        return pool(gs if gran else hs, axis=0)
    def rnn(xs, act):
        h = np.zeros(P("rnn.w_h").shape[0])
        for x in xs:
            h = act(x @ P("rnn.w_x") + h @ P("rnn.w_h") + P("rnn.b")[0])
        return h
    if a == "lstm": return lstm("fwd", xs)
    if a == "lstm-no-o": return lstm("fwd", xs, out_gate=False)
    if a in ("blstm", "blstm-concat"):
        f, b = lstm("fwd", xs), lstm("bwd", xs[::-1])
        return (f + b) / 2 if a == "blstm" else np.concatenate([f, b])
    if a == "blstm-max":
        return np.concatenate([lstm("fwd", xs, pool=np.max), lstm("bwd", xs[::-1], pool=np.max)])
    if a == "gran": return lstm("fwd", xs, gran=True)
    if a == "tree-rnn":
        n = len(xs)
        # No tree given: right-branching, (w0 (w1 (w2 ...))).
        tree = tree or [[k, 2 * n - 3 - k if k < n - 2 else n - 1] for k in range(n - 2, -1, -1)]
        nodes = list(xs)
        for l, r in tree:
            nodes.append(np.tanh(np.concatenate([nodes[l], nodes[r]]) @ P("tree.w") + P("tree.b")[0]))
        return nodes[-1]
    if a == "rnn": return rnn(xs, np.tanh)
    if a == "irnn": return rnn(xs, lambda z: z) / len(xs)
    if a == "gaussian":
        mu, var = np.zeros(xs.shape[1]), np.ones(xs.shape[1])
        for scale, shift in zip(P("wlo.scale")[s].astype(np.float64), xs):
            mu, var = scale * (mu + shift), scale ** 2 * var
        return np.concatenate([mu, var])
    if a == "lstm-gaussian":
        h = lstm("fwd", xs)
        mu = h @ P("gauss.w_mu") + P("gauss.b_mu")[0]
        return np.concatenate([mu, np.exp(h @ P("gauss.w_lv") + P("gauss.b_lv")[0])])
    g = xs.mean(axis=0)
    if a == "avg": return g
    for l in range(c["layers"] if a == "dan" else 1):
        g = g @ P(f"dense.{l}.w") + P(f"dense.{l}.b")[0]
        if a == "dan": g = np.tanh(g)
    return g
for words, trigrams, tree in sents:
    a = c["arch"]
    if a in ("sum", "concat"):
        parts = []
        for i, p in enumerate(c["parts"]):
            if p == "trigram":
                rows = t["trigram.emb"][trigrams].astype(np.float64)
                parts.append(rows.mean(axis=0) if len(trigrams) else np.zeros(c["trigram_dim"]))
            else:
                parts.append(encode(p, words, f"part{i}."))
        if c.get("unit_parts"):
            parts = [p / np.sqrt(np.sum(p ** 2) + 1e-24) for p in parts]
        if c.get("parts_by_dimension"):
            total = sum(len(p) for p in parts)
            parts = [p * np.sqrt(len(p) / total) for p in parts]
        g = sum(parts) if a == "sum" else np.concatenate(parts)
    else:
        g = encode(a, words, tree=tree)
    print(json.dumps([float(v) for v in g]))
"#;
    let specs: Vec<Spec> = Arch::ALL
        .into_iter()
        .map(Spec::single)
        .chain(
            [
                "word+trigram+lstm",
                "word,trigram,blstm,dan",
                "trigram,irnn",
            ]
            .map(|s| s.parse().unwrap()),
        )
        .collect();
    for spec in specs {
        let (kind, trigrams) = if spec.has_trigrams() {
            let t = [" a ", "a m", " ma", "man", "gui", "uit"];
            (
                paraforge_trainer::Kind::WordTrigram,
                t.map(String::from).to_vec(),
            )
        } else {
            (paraforge_trainer::Kind::Word, Vec::new())
        };
        let (words, _) = paraforge_trainer::model::init_with_words(
            kind,
            ["a", "man", "plays", "guitar", "."]
                .map(String::from)
                .to_vec(),
            4,
            Some(&vectors),
            trigrams,
            // A concatenation's trigram part wider than the others, so
            // that weights by dimension differ; a sum's parts share a size.
            if spec.arch == Arch::Concat { 6 } else { 4 },
            3,
        )
        .unwrap();
        let m = NeuralModel::init_spec(&spec, words, 4, 2, 5, &cpu()).unwrap();
        // The tree-rnn's trees as its parser made them.
        let ids: Vec<serde_json::Value> = m
            .encode_texts(&texts, usize::MAX)
            .into_iter()
            .map(|e| serde_json::json!([e.words, e.trigrams, e.tree]))
            .collect();
        let out = dir.path().join(spec.name());
        m.save(&out).unwrap();
        let o = Command::new(&py)
            .arg("-c")
            .arg(SCRIPT)
            .arg(&out)
            .arg(serde_json::to_string(&ids).unwrap())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{spec}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let ours = m.embed_many(&texts);
        for (line, mine) in String::from_utf8(o.stdout).unwrap().lines().zip(&ours) {
            let theirs: Vec<f64> = serde_json::from_str(line).unwrap();
            assert_eq!(theirs.len(), mine.len(), "{spec}");
            for (a, b) in theirs.iter().zip(mine) {
                assert!(
                    (a - *b as f64).abs() < 1e-5,
                    "{spec}: python {theirs:?}, paraforge {mine:?}"
                );
            }
        }
    }
}
