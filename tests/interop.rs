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
use paraforge_core::config::JobConfig;
use paraforge_core::storage::Storage;
use paraforge_tests::{job_toml, repo_root, sample_lines, scoring_section};
use paraforge_worker::node::{run as run_worker, WorkerOptions};

fn python() -> Option<PathBuf> {
    let p = std::env::var_os("PARAFORGE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/testenv/bin/python"));
    p.is_file().then_some(p)
}

/// The first 600 sample lines.
fn input_text() -> String {
    sample_lines(600).0.join("\n") + "\n"
}

fn config_text(input: &str, output: &str, state: Option<&Path>, extra: &str) -> String {
    let state = state
        .map(|s| format!("[coordinator]\nstate = \"{}\"\n", s.display()))
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
    let Some(py) = python() else {
        eprintln!("SKIPPED: no Python test environment (run `make testenv`)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = config(dir.path(), out.to_str().unwrap(), None);
    let m = run_job(&cfg).await;
    assert_eq!(m.pairs, 600);
    let script = r#"
import sys, pyarrow.dataset as ds, duckdb
root = sys.argv[1]
t = ds.dataset(root, format="parquet", partitioning="hive").to_table()
assert t.num_rows == 600, t.num_rows
assert len(set(t.column("id").to_pylist())) == 600
assert "shard" in t.column_names and "trigram_overlap" in t.column_names
n, ids, mean = duckdb.sql(f"select count(*), count(distinct id), avg(trigram_overlap) from read_parquet('{root}/shard=*/*.parquet', hive_partitioning=true)").fetchall()[0]
assert (n, ids) == (600, 600), (n, ids)
print("ok", t.num_rows, n, round(mean, 4))
"#;
    let o = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.starts_with("ok 600 600"), "{stdout}");
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
    let Some(py) = python() else {
        eprintln!("SKIPPED: no Python test environment (run `make testenv`)");
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
    // locally and uploaded under `<output>/_bins`.
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
    let listed: Vec<String> = Storage::open("s3://paraforge-test/jobs/cli")
        .unwrap()
        .list("_bins")
        .await
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert!(
        listed
            .iter()
            .any(|p| p.starts_with("_bins/ranges/para_range="))
            && listed
                .iter()
                .any(|p| p.starts_with("_bins/deciles/para_score/fold="))
            && listed.contains(&"_bins/_manifest.json".to_string()),
        "{listed:?}"
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
    assert!(String::from_utf8_lossy(&o.stderr).contains("not empty"));
}
