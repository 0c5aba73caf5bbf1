//! Real `paraforge` processes over loopback: a coordinator and workers
//! started as the README says, stopped with signals.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use paraforge_core::proto::coordinator_client::CoordinatorClient;
use paraforge_core::proto::{JobStatusRequest, JobStatusResponse};
use paraforge_tests::procs::{coordinator, worker, Proc};
use paraforge_tests::{output_rows, repo_root};

/// A job over the first `lines` sample pairs, written to `dir/job.toml`.
fn write_job(dir: &Path, lines: usize, shard_pairs: usize) -> (PathBuf, Vec<String>) {
    let sample =
        std::fs::read_to_string(repo_root().join("data/sample/czeng16-heldout.cs-en.tsv")).unwrap();
    let rows: Vec<&str> = sample.lines().take(lines).collect();
    let ids = rows
        .iter()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    let input = dir.join("input.tsv");
    std::fs::write(&input, rows.join("\n") + "\n").unwrap();
    let root = repo_root();
    let text = format!(
        r#"
[job]
name = "process-test"
output = "{out}"
shard_pairs = {shard_pairs}
lease_seconds = 10

[input]
paths = ["{input}"]
format = "czeng16"

[model]
dir = "{model}"
beam = 2
batch_size = 16
max_new_tokens = 24
threads = 1

[scoring]
vectors = "{vectors}"

[coordinator]
listen = "127.0.0.1:0"
metrics = "127.0.0.1:0"
"#,
        out = dir.join("out").display(),
        input = input.display(),
        model = root.join("models/tiny-cs-en").display(),
        vectors = root
            .join("data/vectors/glove.6B.50d.top25k.txt.gz")
            .display(),
    );
    let cfg = dir.join("job.toml");
    std::fs::write(&cfg, text).unwrap();
    (cfg, ids)
}

async fn status(url: &str) -> JobStatusResponse {
    let mut c = CoordinatorClient::connect(url.to_string()).await.unwrap();
    c.job_status(JobStatusRequest {})
        .await
        .unwrap()
        .into_inner()
}

/// Polls the status until `f` holds; fails at once if `watch` exited.
async fn wait_until(
    url: &str,
    what: &str,
    watch: &mut Proc,
    f: impl Fn(&JobStatusResponse) -> bool,
) {
    let t = Instant::now();
    loop {
        if let Some(st) = watch.child.try_wait().unwrap() {
            panic!("{} exited ({st}) while waiting for {what}", watch.name);
        }
        let s = status(url).await;
        if f(&s) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "waiting for {what}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGTERM makes a worker finish the shard it holds, lease no more and exit
/// cleanly; a second worker finishes the job and the output is complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_held_shard_and_leaves_nothing_leased() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, ids) = write_job(dir.path(), 800, 100);
    let (mut coord, url) = coordinator(&cfg);
    let mut a = worker(&url, "a");
    wait_until(&url, "a lease", &mut a, |s| s.shards_leased > 0).await;
    a.signal("TERM");
    let (st, out) = a.wait(Duration::from_secs(120));
    assert!(st.success(), "worker a: {st} {out}");
    assert!(out.contains("worker done"), "{out}");
    let s = status(&url).await;
    assert_eq!(s.shards_leased, 0, "a stopped worker holds no lease: {s:?}");
    assert!(s.shards_committed >= 1, "a finished its shard: {s:?}");
    assert!(
        s.shards_committed < s.shards_total,
        "a stopped early: {s:?}"
    );

    let mut b = worker(&url, "b");
    let (st, out) = coord.wait(Duration::from_secs(300));
    assert!(st.success(), "coordinator: {st} {out}");
    assert!(out.contains("8 of 8 shards committed"), "{out}");
    let _ = b.wait(Duration::from_secs(60));
    let out_dir = dir.path().join("out");
    assert!(out_dir.join("_SUCCESS").is_file());
    let mut got: Vec<String> = output_rows(&out_dir).into_iter().map(|r| r.0).collect();
    got.sort();
    let mut want = ids;
    want.sort();
    assert_eq!(got, want, "every pair exactly once");
}
