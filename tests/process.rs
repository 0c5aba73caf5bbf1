//! Real `paraforge` processes over loopback: a coordinator and workers
//! started as the README says, stopped with signals.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use paraforge_rpc::proto::coordinator_client::CoordinatorClient;
use paraforge_rpc::proto::{JobStatusRequest, JobStatusResponse};
use paraforge_tests::procs::{coordinator, free_port, worker, Proc};
use paraforge_tests::{
    job_toml, output_rows, paraforge_ok, repo_root, sample_lines, scoring_section,
};

/// A job over the first `lines` sample pairs, written to `dir/job.toml`.
fn write_job(dir: &Path, lines: usize, shard_pairs: usize) -> (PathBuf, Vec<String>) {
    let (rows, ids) = sample_lines(lines);
    let input = dir.join("input.tsv");
    std::fs::write(&input, rows.join("\n") + "\n").unwrap();
    let text = job_toml(
        "process-test",
        &input.display().to_string(),
        &dir.join("out").display().to_string(),
        &format!("shard_pairs = {shard_pairs}\nlease_seconds = 10"),
        "beam = 2\nbatch_size = 16\nmax_new_tokens = 24",
        &format!(
            "{}\n[coordinator]\nlisten = \"127.0.0.1:0\"\nmetrics = \"127.0.0.1:0\"",
            scoring_section()
        ),
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

/// SIGTERM stops a worker holding a shard within 10 s: it gives the lease
/// back (the shard is pending again at once, not after the lease expires,
/// and the attempt does not count) and exits non-zero, since the job is not
/// finished; the coordinator does not wait for it at the end; a second
/// worker finishes the job and the output is complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_returns_the_held_shard_and_exits_non_zero_within_10_s() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, ids) = write_job(dir.path(), 800, 100);
    // A long lease: a shard pending right after the worker exits was given
    // back, not expired; and one attempt per shard: a give-back is not a
    // failed attempt (a preempted worker must not fail shards).
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace(
            "lease_seconds = 10",
            "lease_seconds = 600\nmax_attempts = 1",
        ),
    )
    .unwrap();
    let (mut coord, url) = coordinator(&cfg);
    let mut a = worker(&url, "a");
    wait_until(&url, "a lease", &mut a, |s| s.shards_leased > 0).await;
    // `paraforge status` lists the worker with its device.
    let listed = paraforge_tests::paraforge_ok(&["status", "--coordinator", &url]);
    assert!(
        listed
            .lines()
            .any(|l| l.trim_start().starts_with("a (") && l.contains(" on cpu: 1 lease")),
        "{listed}"
    );
    let t = Instant::now();
    a.signal("TERM");
    let (st, out) = a.wait(Duration::from_secs(10));
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "worker a took {:?} to stop",
        t.elapsed()
    );
    assert!(!st.success(), "a stopped job is not a success: {st} {out}");
    let s = status(&url).await;
    assert_eq!(s.shards_leased, 0, "a stopped worker holds no lease: {s:?}");
    assert!(
        s.shards_committed < s.shards_total,
        "a stopped early: {s:?}"
    );
    assert!(s.failed.is_empty(), "a returned shard is not failed: {s:?}");

    let mut b = worker(&url, "b");
    let (st, out) = coord.wait(Duration::from_secs(300));
    assert!(st.success(), "coordinator: {st} {out}");
    assert!(out.contains("8 of 8 shards committed"), "{out}");
    let (st, out) = b.wait(Duration::from_secs(60));
    assert!(st.success(), "worker b saw the job done: {st} {out}");
    let out_dir = dir.path().join("out");
    assert!(out_dir.join("_SUCCESS").is_file());
    let mut got: Vec<String> = output_rows(&out_dir).into_iter().map(|r| r.0).collect();
    got.sort();
    let mut want = ids;
    want.sort();
    assert_eq!(got, want, "every pair exactly once");
}

/// `paraforge worker` with its standard error captured, for the message a
/// stopped worker ends with.
fn worker_logged(url: &str, name: &str) -> Proc {
    let child = std::process::Command::new(paraforge_tests::paraforge_bin())
        .args(["worker", "--coordinator", url, "--name", name])
        .args(["--connect-attempts", "1000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting paraforge worker");
    Proc {
        child,
        name: name.to_string(),
    }
}

/// Waits up to 10 s for a SIGTERMed process; its status and standard error.
fn stops_within_10_s(p: &mut Proc) -> (std::process::ExitStatus, String) {
    let t = Instant::now();
    p.signal("TERM");
    let (st, _) = p.wait(Duration::from_secs(10));
    let took = t.elapsed();
    let mut err = String::new();
    if let Some(mut e) = p.child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(
        took < Duration::from_secs(10),
        "{} took {took:?} to stop:\n{err}",
        p.name
    );
    (st, err)
}

/// A worker retrying a coordinator where nothing listens (one that never
/// came up, or went away) stops retrying on SIGTERM: it exits non-zero
/// within 10 s, saying it was stopped.
#[test]
fn sigterm_stops_a_worker_retrying_an_unreachable_coordinator() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let mut w = worker_logged(&url, "lost");
    std::thread::sleep(Duration::from_secs(2));
    assert!(w.exited().is_none(), "the worker is still retrying");
    let (st, err) = stops_within_10_s(&mut w);
    assert!(!st.success(), "{st}: {err}");
    assert!(err.contains("stopped"), "{err}");
}

/// A worker whose coordinator was killed while it held a shard (its
/// heartbeats and its completion now retry a closed port) stops within
/// 10 s of SIGTERM and exits non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_worker_whose_coordinator_was_killed() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = write_job(dir.path(), 800, 100);
    let (mut coord, url) = coordinator(&cfg);
    let mut w = worker_logged(&url, "orphan");
    wait_until(&url, "a lease", &mut w, |s| s.shards_leased > 0).await;
    coord.signal("KILL");
    let _ = coord.wait(Duration::from_secs(10));
    // Long enough for a heartbeat, a completion or a lease to find the
    // coordinator gone and start retrying.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(w.exited().is_none(), "the worker is still retrying");
    let (st, err) = stops_within_10_s(&mut w);
    assert!(!st.success(), "{st}: {err}");
}

/// A dirty corpus through `paraforge run`: every bad line lands in the
/// rejects files with its file, line and reason, and the summary counts it.
#[test]
fn dirty_lines_are_rejected_with_file_line_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, ids) = write_job(dir.path(), 40, 25);
    let input = dir.path().join("input.tsv");
    let good = std::fs::read(&input).unwrap();
    let mut lines: Vec<Vec<u8>> = good
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let mut dirty: Vec<(usize, Vec<u8>, &str)> = vec![
        (
            3,
            b"only\ttwo".to_vec(),
            "2 tab-separated columns, expected 4",
        ),
        (
            8,
            b"x\t1.0\ta\tb\tc".to_vec(),
            "5 tab-separated columns, expected 4",
        ),
        (12, b"x\t1.0\t\xc3\x28 broken\tok".to_vec(), "invalid UTF-8"),
        (
            15,
            b"x\t1.0\tnul\0in it\tok".to_vec(),
            "control character U+0000",
        ),
        (20, b"x\t1.0\tOK\t".to_vec(), "empty reference side"),
        (
            25,
            [b"x\t1.0\t".as_slice(), &vec![b'a'; 1 << 20], b"\tlong"].concat(),
            "more than the limit",
        ),
    ];
    for (at, l, _) in &dirty {
        lines.insert(at - 1, l.clone());
    }
    // CRLF and a BOM are not dirt: those lines are read.
    lines[0] = [b"\xef\xbb\xbf".as_slice(), &lines[0]].concat();
    let last = lines.len() - 1;
    lines[last].push(b'\r');
    std::fs::write(&input, lines.join(&b'\n')).unwrap();
    let stdout = paraforge_ok(&[
        "run".as_ref(),
        "--workers".as_ref(),
        "1".as_ref(),
        "--config".as_ref(),
        cfg.as_os_str(),
    ]);
    assert!(
        stdout.contains(&format!(
            "{} pairs, {} rejected lines",
            ids.len(),
            dirty.len()
        )),
        "{stdout}"
    );
    let out = dir.path().join("out");
    let mut rejects: Vec<serde_json::Value> = Vec::new();
    for shard in std::fs::read_dir(out.join("_rejects")).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
            rejects.extend(
                text.lines()
                    .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()),
            );
        }
    }
    rejects.sort_by_key(|r| r["line"].as_u64());
    dirty.sort_by_key(|d| d.0);
    assert_eq!(rejects.len(), dirty.len());
    for (r, (at, _, why)) in rejects.iter().zip(&dirty) {
        assert_eq!(r["line"].as_u64(), Some(*at as u64), "{r}");
        assert!(r["reason"].as_str().unwrap().contains(why), "{r}");
        assert!(r["file"].as_str().unwrap().ends_with("input.tsv"), "{r}");
        assert!(
            r["text"].as_str().unwrap().len() <= 1100,
            "rejects keep at most 1 KB of a line"
        );
    }
    let got = output_rows(&out).len();
    assert_eq!(got, ids.len());
}

/// A job whose model cannot load ends with an error naming it, instead of
/// waiting for workers that will never come.
#[test]
fn a_missing_model_is_a_clear_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = write_job(dir.path(), 20, 10);
    let text = std::fs::read_to_string(&cfg).unwrap();
    let model = repo_root().join("models/tiny-cs-en").display().to_string();
    std::fs::write(&cfg, text.replace(&model, "/nonexistent/model")).unwrap();
    let mut p = Proc {
        child: std::process::Command::new(paraforge_tests::paraforge_bin())
            .args(["run", "--config"])
            .arg(&cfg)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
        name: "run".into(),
    };
    let (st, _) = p.wait(Duration::from_secs(60));
    let mut err = String::new();
    std::io::Read::read_to_string(p.child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!st.success());
    assert!(err.contains("/nonexistent/model"), "{err}");
}

/// Every shell example the docs mark ```` ```sh runnable ```` runs as
/// written from the repository root (with `paraforge` the binary under
/// test, `target/release/paraforge` read as it), so the pages cannot drift
/// from the commands.
#[test]
fn the_docs_runnable_examples_run_as_written() {
    let root = repo_root();
    let mut pages: Vec<PathBuf> = ["README.md", "deploy/README.md", "python/README.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        paraforge_tests::paraforge_bin(),
        bin.path().join("paraforge"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let mut lines = text.lines();
        while let Some(l) = lines.next() {
            if l.trim() != "```sh runnable" {
                continue;
            }
            let script: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            let script = script
                .join("\n")
                .replace("target/release/paraforge", "paraforge");
            let t = Instant::now();
            let o = std::process::Command::new("timeout")
                .args(["120", "bash", "-euo", "pipefail", "-c", &script])
                .current_dir(&root)
                .env("PATH", &path)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{}: this example failed ({:?}):\n{script}\n{}",
                page.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            eprintln!("{}: example ran in {:?}", page.display(), t.elapsed());
            ran += 1;
        }
    }
    assert!(ran >= 4, "only {ran} runnable examples in the docs");
}
