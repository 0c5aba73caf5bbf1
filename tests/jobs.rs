//! A job's life across runs: what it refuses to resume, what it refuses to
//! write over, and that it never calls itself successful when it is not.
//! Coordinator and workers in process over loopback gRPC, on real sample
//! pairs with the bundled test model.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use paraforge_coordinator::run::{finalize, RunError, Running};
use paraforge_job::config::JobConfig;
use paraforge_job::storage::Storage;
use paraforge_tests::{job_toml, output_rows, paraforge_bin, sample_lines};
use paraforge_worker::node::{run as run_worker, WorkerOptions};

/// `lines` sample pairs in `dir/input.tsv`, shards of `per`, output in
/// `dir/out`; `extra` more `[job]` lines.
fn job(dir: &Path, name: &str, lines: usize, per: usize, extra: &str) -> (JobConfig, Vec<String>) {
    let (rows, ids) = sample_lines(lines);
    let input = dir.join("input.tsv");
    if !input.exists() {
        std::fs::write(&input, rows.join("\n") + "\n").unwrap();
    }
    (config(dir, name, per, extra, "beam = 2"), ids)
}

fn config(dir: &Path, name: &str, per: usize, extra: &str, model: &str) -> JobConfig {
    let text = job_toml(
        name,
        &dir.join("input.tsv").display().to_string(),
        &dir.join("out").display().to_string(),
        &format!("shard_pairs = {per}\nlease_seconds = 30\n{extra}"),
        &format!("{model}\nbatch_size = 8\nmax_new_tokens = 16"),
        "",
    );
    JobConfig::parse(&text, Path::new("jobs.toml")).unwrap()
}

async fn coordinator(cfg: &JobConfig) -> Result<Running, RunError> {
    paraforge_tests::start_on_loopback(cfg).await
}

/// One worker until the coordinator says done.
async fn work(c: &Running) {
    let o = WorkerOptions {
        coordinator: format!("http://{}", c.grpc_addr),
        name: "w".into(),
        connect_attempts: 5,
        access: Default::default(),
        device: None,
        model_dir: None,
    };
    tokio::time::timeout(
        Duration::from_secs(300),
        run_worker(o, Arc::new(AtomicBool::new(false))),
    )
    .await
    .expect("the worker finished in time")
    .expect("the worker succeeded");
}

/// `paraforge run` on `cfg` (on free loopback ports), as a user runs it.
fn paraforge_run(dir: &Path, mut cfg: JobConfig) -> std::process::Output {
    cfg.coordinator.listen = "127.0.0.1:0".into();
    cfg.coordinator.metrics = "127.0.0.1:0".into();
    let toml = dir.join("job.toml");
    std::fs::write(&toml, cfg.to_toml()).unwrap();
    std::process::Command::new(paraforge_bin())
        .args(["run", "--config"])
        .arg(&toml)
        .output()
        .unwrap()
}

/// Every file under `dir`, relative, with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if !p.ends_with("_coordinator.redb") {
                out.push((
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// A resume over a changed input: a job stopped part-way, 37 lines added at the
/// top of its input, run again. Shards are byte ranges of the planned
/// file, so resuming would lose and duplicate pairs: it must refuse, naming
/// the file. A changed output-deciding key is refused the same way; what
/// only decides speed may change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_job_refuses_a_changed_input_or_config() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = job(dir.path(), "resume", 60, 10, "");
    coordinator(&cfg).await.unwrap().stop().await;
    // Unchanged: resumes.
    coordinator(&cfg).await.unwrap().stop().await;

    let input = dir.path().join("input.tsv");
    let original = std::fs::read(&input).unwrap();
    let (extra, _) = sample_lines(97);
    let mut changed = extra[60..].join("\n").into_bytes();
    changed.push(b'\n');
    changed.extend_from_slice(&original);
    std::fs::write(&input, &changed).unwrap();
    let e = coordinator(&cfg)
        .await
        .err()
        .expect("a changed input is refused");
    let msg = e.to_string();
    assert!(
        matches!(e, RunError::InputChanged { .. }) && msg.contains(&input.display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("size changed"), "{msg}");

    // Same size, one byte different.
    let mut same_size = original.clone();
    let at = same_size.iter().rposition(|&b| b == b'a').unwrap();
    same_size[at] = b'e';
    std::fs::write(&input, &same_size).unwrap();
    let msg = coordinator(&cfg).await.err().unwrap().to_string();
    assert!(msg.contains("content changed"), "{msg}");

    std::fs::write(&input, &original).unwrap();
    let beam4 = config(dir.path(), "resume", 10, "", "beam = 4");
    let e = coordinator(&beam4)
        .await
        .err()
        .expect("a changed beam is refused");
    assert!(
        matches!(&e, RunError::ConfigChanged { key, .. } if key == "model.beam"),
        "{e}"
    );
    // Threads, streams and batch size do not change the output: a resume
    // may change them.
    let mut faster = cfg.clone();
    faster.model.as_mut().unwrap().threads = 2;
    faster.model.as_mut().unwrap().streams = Some(2);
    faster.model.as_mut().unwrap().batch_size = Some(32);
    coordinator(&faster).await.unwrap().stop().await;
}

/// A shard that fails for good (here: its only attempt was lost) leaves the
/// job incomplete: no `_SUCCESS`, no manifest, an error naming the shard.
/// Running the job again retries the failed shard and then completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_shard_leaves_no_success_and_a_rerun_retries_it() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, ids) = job(dir.path(), "failing", 60, 20, "max_attempts = 1");
    let out = dir.path().join("out");
    let c = coordinator(&cfg).await.unwrap();
    {
        // A worker leased shard 0 and was killed: with one attempt allowed,
        // the shard fails.
        let mut st = c.shared.state.lock().unwrap();
        let l = st.lease("killed-worker", 0, 1).unwrap().unwrap();
        assert_eq!(l.spec.shard_id, 0);
        assert_eq!(st.expire(10).unwrap(), 1);
    }
    work(&c).await;
    let storage = Storage::open(&cfg.job.output).unwrap();
    let e = finalize(&c.shared, &storage).await.expect_err("incomplete");
    c.stop().await;
    let msg = e.to_string();
    assert!(
        msg.contains("shard 0 failed") && msg.contains("no _SUCCESS"),
        "{msg}"
    );
    assert!(!out.join("_SUCCESS").exists());
    assert!(!out.join("_manifest.json").exists());
    let e = paraforge_core::dataset::dataset_files(&out).unwrap_err();
    assert!(
        e.to_string().contains("incomplete"),
        "bins and training refuse it: {e}"
    );

    let c = coordinator(&cfg).await.unwrap();
    assert_eq!(c.shared.state.lock().unwrap().retried_failed(), 1);
    work(&c).await;
    let m = finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    assert_eq!((m.shards_committed, m.shards_total), (3, 3));
    assert!(out.join("_SUCCESS").is_file());
    let got: Vec<String> = output_rows(&out).into_iter().map(|r| r.0).collect();
    assert_eq!(sorted(got), sorted(ids), "every pair exactly once");
    assert!(!out.join("_tmp").exists(), "no empty _tmp directories left");
}

/// An input cut short after the job was planned (a partial copy, a file
/// rewritten under the job): the shards past its new end fail, never
/// commit short, and the job writes no `_SUCCESS`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_that_shrinks_under_the_job_fails_it() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = job(dir.path(), "shrinking", 30, 10, "max_attempts = 1");
    let out = dir.path().join("out");
    let c = coordinator(&cfg).await.unwrap();
    // Planned as three shards of ten lines; now 25 lines remain, so the
    // last shard's range ends five lines early.
    let input = dir.path().join("input.tsv");
    let text = std::fs::read_to_string(&input).unwrap();
    let kept: Vec<&str> = text.lines().take(25).collect();
    std::fs::write(&input, kept.join("\n") + "\n").unwrap();
    work(&c).await;
    let storage = Storage::open(&cfg.job.output).unwrap();
    let e = finalize(&c.shared, &storage).await.expect_err("incomplete");
    c.stop().await;
    let msg = e.to_string();
    assert!(msg.contains("shard 2 failed"), "{msg}");
    assert!(msg.contains("no _SUCCESS"), "{msg}");
    assert!(!out.join("_SUCCESS").exists());
    assert!(!out.join("_manifest.json").exists());
}

/// `worker --model-dir`: the job names a model path that does not exist on
/// this node; a worker given its own copy of the model does the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_a_node_local_copy_of_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cfg, ids) = job(dir.path(), "local-model", 20, 10, "");
    let local = dir.path().join("node-local-model");
    std::fs::create_dir_all(&local).unwrap();
    for e in std::fs::read_dir(&cfg.model.as_ref().unwrap().dir).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, local.join(p.file_name().unwrap())).unwrap();
    }
    cfg.model.as_mut().unwrap().dir = "/nonexistent/shared-fs/model".into();
    let c = coordinator(&cfg).await.unwrap();
    let o = WorkerOptions {
        coordinator: format!("http://{}", c.grpc_addr),
        name: "local".into(),
        connect_attempts: 5,
        access: Default::default(),
        device: None,
        model_dir: Some(local),
    };
    tokio::time::timeout(
        Duration::from_secs(300),
        run_worker(o, Arc::new(AtomicBool::new(false))),
    )
    .await
    .expect("the worker finished in time")
    .expect("the worker succeeded with its own copy");
    let storage = Storage::open(&cfg.job.output).unwrap();
    let m = finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    assert_eq!(m.shards_committed, 2);
    let got: Vec<String> = output_rows(&dir.path().join("out"))
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(sorted(got), sorted(ids));
}

/// A second job on the same output refuses to start and leaves the first
/// job's files as they were; so does the same job restarted without its
/// state. A committed file deleted from the output is written again on the
/// next run, never listed in a manifest while missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_job_cannot_take_an_output_and_lost_files_are_redone() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, ids) = job(dir.path(), "first", 40, 20, "");
    let out = dir.path().join("out");
    let storage = Storage::open(&cfg.job.output).unwrap();
    let c = coordinator(&cfg).await.unwrap();
    work(&c).await;
    finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    let before = snapshot(&out);

    let mut other = config(dir.path(), "second", 20, "", "beam = 2");
    other.coordinator.state = Some(dir.path().join("second.redb").display().to_string());
    let e = coordinator(&other)
        .await
        .err()
        .expect("the output is taken");
    assert!(
        matches!(e, RunError::OutputClaimed { .. }) && e.to_string().contains("\"first\""),
        "{e}"
    );
    let mut again = cfg.clone();
    again.coordinator.state = Some(dir.path().join("fresh.redb").display().to_string());
    assert!(matches!(
        coordinator(&again).await.err(),
        Some(RunError::OutputClaimed { .. })
    ));
    assert_eq!(
        snapshot(&out),
        before,
        "the first job's output is untouched"
    );
    assert!(!dir.path().join("second.redb").exists());

    // Delete a committed part; the same job run again writes it anew.
    let part = before
        .iter()
        .map(|(p, _)| p)
        .find(|p| p.starts_with("shard=1/"))
        .unwrap()
        .clone();
    std::fs::remove_file(out.join(&part)).unwrap();
    let c = coordinator(&cfg).await.unwrap();
    assert_eq!(c.shared.state.lock().unwrap().counts().pending, 1);
    work(&c).await;
    let m = finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    for f in &m.files {
        assert!(
            out.join(&f.path).is_file(),
            "{} is listed and present",
            f.path
        );
    }
    let got: Vec<String> = output_rows(&out).into_iter().map(|r| r.0).collect();
    assert_eq!(sorted(got), sorted(ids));
}

/// A committed file changed in place after `_SUCCESS` (one byte, same
/// size: only its digest tells) is found when the job runs again: the
/// finished output loses `_SUCCESS`, the shard is written anew, and the
/// output is whole again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_file_changed_in_place_is_found_and_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, ids) = job(dir.path(), "flip", 30, 10, "");
    let out = dir.path().join("out");
    let storage = Storage::open(&cfg.job.output).unwrap();
    let c = coordinator(&cfg).await.unwrap();
    work(&c).await;
    let m = finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    let part = out.join(&m.files[1].path);
    let mut bytes = std::fs::read(&part).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&part, &bytes).unwrap();
    let e = paraforge_core::dataset::open(&out).unwrap_err().to_string();
    assert!(e.contains("SHA-256"), "readers refuse it: {e}");

    let c = coordinator(&cfg).await.unwrap();
    assert_eq!(c.shared.state.lock().unwrap().counts().pending, 1);
    assert!(
        !out.join("_SUCCESS").exists(),
        "an output with a damaged file is not finished"
    );
    work(&c).await;
    finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    let got: Vec<String> = output_rows(&out).into_iter().map(|r| r.0).collect();
    assert_eq!(sorted(got), sorted(ids));
}

/// A worker killed while a local store was writing a file leaves the
/// store's staging file (`NAME#N`), which the store's listing hides: the
/// job's end deletes those of its own attempts, leaving nothing outside
/// the manifest, and leaves a name that is not its own alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writes_staging_file_is_removed_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = job(dir.path(), "staging", 20, 10, "");
    let out = dir.path().join("out");
    let storage = Storage::open(&cfg.job.output).unwrap();
    let c = coordinator(&cfg).await.unwrap();
    work(&c).await;
    let leftovers = [
        "shard=0/part-t00000001.parquet#3",
        "_rejects/shard=1/rejects-t00000002.jsonl#1",
        "_tmp/shard=1/lease=00000002/part.parquet#17",
    ];
    for f in leftovers {
        let p = out.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"half a file").unwrap();
    }
    let foreign = out.join("shard=0/notes.txt#1");
    std::fs::write(&foreign, b"someone else's").unwrap();
    finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    for f in leftovers {
        assert!(!out.join(f).exists(), "{f} is left");
    }
    assert!(
        foreign.exists(),
        "a name the job did not write is left alone"
    );
    std::fs::remove_file(&foreign).unwrap();
    paraforge_core::dataset::open(&out).expect("the output reads as finished");
}

/// One corpus, one model: a worker given another model (one config byte
/// changed) stops naming both digests and commits nothing; a job whose
/// model files change between runs refuses to resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_or_a_resume_with_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cfg, ids) = job(dir.path(), "one-model", 20, 10, "");
    let copy = |to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(&cfg.model.as_ref().unwrap().dir).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    };
    let (model, other) = (dir.path().join("model"), dir.path().join("other"));
    copy(&model);
    copy(&other);
    let g = other.join("generation_config.json");
    let text = std::fs::read_to_string(&g).unwrap() + "\n";
    std::fs::write(&g, text).unwrap();
    cfg.model.as_mut().unwrap().dir = model.display().to_string();
    let c = coordinator(&cfg).await.unwrap();
    let o = |name: &str, model_dir: Option<PathBuf>| WorkerOptions {
        coordinator: format!("http://{}", c.grpc_addr),
        name: name.into(),
        connect_attempts: 5,
        access: Default::default(),
        device: None,
        model_dir,
    };
    let e = run_worker(
        o("other", Some(other.clone())),
        Arc::new(AtomicBool::new(false)),
    )
    .await
    .unwrap_err()
    .to_string();
    let (job_model, theirs) = (
        paraforge_core::model_digest::model_digest(&model).unwrap(),
        paraforge_core::model_digest::model_digest(&other).unwrap(),
    );
    assert!(
        e.contains(&job_model) && e.contains(&theirs),
        "both digests named: {e}"
    );
    assert_eq!(c.shared.state.lock().unwrap().counts().committed, 0);
    work(&c).await;
    let storage = Storage::open(&cfg.job.output).unwrap();
    finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    let got: Vec<String> = output_rows(&dir.path().join("out"))
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(sorted(got), sorted(ids));

    // The model's files replaced between two runs of the job.
    std::fs::copy(&g, model.join("generation_config.json")).unwrap();
    let e = coordinator(&cfg).await.err().expect("a changed model");
    assert!(
        matches!(e, RunError::ModelChanged { .. }) && e.to_string().contains(&theirs),
        "{e}"
    );
}

/// `[filters]` that drop most of the input (here the two languages
/// swapped) fail the job naming `filters.max_drop_rate`, instead of
/// ending with a corpus of a tenth of its pairs.
#[test]
fn filters_that_drop_most_lines_fail_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cfg, _) = job(dir.path(), "swapped", 40, 20, "");
    cfg.filters.source_lang = Some("eng".into());
    cfg.filters.reference_lang = Some("ces".into());
    cfg.bins = None;
    let o = paraforge_run(dir.path(), cfg);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the job succeeded: {err}");
    assert!(err.contains("filters.max_drop_rate"), "{err}");
    assert!(!dir.path().join("out/_SUCCESS").exists());
}

/// An output path that is a regular file gets an error that says so (it
/// was a redb error about the state file).
#[tokio::test]
async fn an_output_that_is_a_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cfg, _) = job(dir.path(), "file-out", 10, 10, "");
    let f = dir.path().join("plain-file");
    std::fs::write(&f, "x").unwrap();
    cfg.job.output = f.display().to_string();
    let e = coordinator(&cfg).await.err().unwrap();
    assert!(matches!(e, RunError::OutputNotDirectory(_)), "{e}");
}

/// Input in the wrong format rejects every line: the job must fail (exit
/// non-zero, no `_SUCCESS`), not end "successfully" with no pairs.
#[test]
fn a_job_that_rejects_too_much_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = job(dir.path(), "rejects", 30, 10, "");
    // The same pairs as two-column lines: not CzEng 1.6.
    let (rows, _) = sample_lines(30);
    let two: Vec<String> = rows
        .iter()
        .map(|r| r.split('\t').skip(2).collect::<Vec<_>>().join("\t"))
        .collect();
    std::fs::write(dir.path().join("input.tsv"), two.join("\n") + "\n").unwrap();
    let o = paraforge_run(dir.path(), cfg);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "a job that rejected every line succeeded: {err}"
    );
    assert!(
        err.contains("job.max_reject_rate") || err.contains("no pairs"),
        "{err}"
    );
    assert!(!dir.path().join("out/_SUCCESS").exists());
}

/// A para_score encoder that fails at run time on some sentences (a
/// transformer whose embedding table is shorter than its tokenizer's
/// vocabulary: it passes the load probe) fails every shard that meets one,
/// and the job ends non-zero without `_SUCCESS`, instead of committing
/// pairs whose para_score is null as if they had been scored.
#[test]
fn a_para_score_encoder_failing_at_run_time_fails_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cfg, _) = job(dir.path(), "encoder-fails", 20, 10, "max_attempts = 1");
    let model = paraforge_tests::repo_root().join("tests/data/mismatched-sentence-encoder");
    cfg.scoring.model = Some(model.display().to_string());
    cfg.bins = None;
    let o = paraforge_run(dir.path(), cfg);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the job succeeded: {err}");
    assert!(
        err.contains("para_score encoder failed on") && err.contains("no _SUCCESS written"),
        "{err}"
    );
    assert!(!dir.path().join("out/_SUCCESS").exists());
    assert!(!dir.path().join("out/_manifest.json").exists());
}

/// Every row of a committed output, all columns that carry content, keyed
/// and sorted by id (f32 scores compared bit for bit).
fn all_rows(out: &Path) -> Vec<String> {
    use arrow_array::{Array, Float32Array, StringArray};
    use paraforge_core::dataset::dataset_files;
    use paraforge_core::schema::{col, column, PairReader};
    let texts = [col::ID, col::SOURCE, col::REFERENCE, col::TRANSLATION];
    let scores = [
        col::TRANSLATION_SCORE,
        col::PARA_SCORE,
        col::UNIGRAM_OVERLAP,
        col::BIGRAM_OVERLAP,
        col::TRIGRAM_OVERLAP,
        col::SENTENCE_BLEU,
    ];
    let mut rows = Vec::new();
    for f in dataset_files(out).unwrap() {
        for b in PairReader::open(&f, &[]).unwrap() {
            let b = b.unwrap();
            for i in 0..b.num_rows() {
                let mut r = Vec::new();
                for c in texts {
                    r.push(
                        column::<StringArray>(&b, c, &f)
                            .unwrap()
                            .value(i)
                            .to_string(),
                    );
                }
                for c in scores {
                    let a = column::<Float32Array>(&b, c, &f).unwrap();
                    r.push(if a.is_null(i) {
                        "null".into()
                    } else {
                        format!("{:08x}", a.value(i).to_bits())
                    });
                }
                rows.push(r.join("\t"));
            }
        }
    }
    rows.sort();
    rows
}

/// The same job gives the same corpus however it is sharded, batched or
/// spread over workers: the bundled demo model at beam 12 on real held-out
/// pairs, shards of 40 with two workers and batches of 16 against one shard
/// with one worker and batches of 5. (With the old per-batch dynamic int8
/// graphs, about a quarter of the translations changed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_corpus_does_not_depend_on_shards_batches_or_workers() {
    let n = 80;
    let mut outputs = Vec::new();
    for (per, workers, batch) in [(40, 2, 16), (n, 1, 5)] {
        let dir = tempfile::tempdir().unwrap();
        // With repeated sources dropped: line 51's source also comes first
        // as line 21 (so the copy is kept and line 51 dropped), and line 6's
        // again at the end, in another shard.
        let (mut rows, _) = sample_lines(n);
        let src = |l: &str| l.split('\t').nth(2).unwrap().to_string();
        let early = format!("rep-1\t1.0\t{}\tAn earlier copy.", src(&rows[50]));
        let late = format!("rep-2\t1.0\t{}\tA later copy.", src(&rows[5]));
        rows.insert(20, early);
        rows.push(late);
        std::fs::write(dir.path().join("input.tsv"), rows.join("\n") + "\n").unwrap();
        let mut cfg = config(dir.path(), "invariance", per, "", "beam = 12");
        cfg.filters.dedup_sources = true;
        cfg.model.as_mut().unwrap().dir =
            paraforge_tests::model("demo-cs-en").display().to_string();
        cfg.model.as_mut().unwrap().batch_size = Some(batch);
        cfg.model.as_mut().unwrap().max_new_tokens = None;
        let c = coordinator(&cfg).await.unwrap();
        let ws: Vec<_> = (0..workers)
            .map(|i| {
                let o = WorkerOptions {
                    coordinator: format!("http://{}", c.grpc_addr),
                    name: format!("w{i}"),
                    connect_attempts: 5,
                    access: Default::default(),
                    device: None,
                    model_dir: None,
                };
                tokio::spawn(run_worker(o, Arc::new(AtomicBool::new(false))))
            })
            .collect();
        for w in ws {
            w.await.unwrap().unwrap();
        }
        let storage = Storage::open(&cfg.job.output).unwrap();
        finalize(&c.shared, &storage).await.unwrap();
        c.stop().await;
        outputs.push(all_rows(&dir.path().join("out")));
    }
    assert_eq!(outputs[0].len(), n);
    let ids: Vec<&str> = outputs[0]
        .iter()
        .map(|r| r.split('\t').next().unwrap())
        .collect();
    assert!(ids.contains(&"rep-1") && !ids.contains(&"rep-2"), "{ids:?}");
    let differ = outputs[0]
        .iter()
        .zip(&outputs[1])
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(differ, 0, "rows that differ: {differ} of {n}");
}

/// Two different pairs under one id pass (the pairs may be fine) but are
/// reported with the id and both lines.
#[test]
fn a_repeated_pair_id_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, _) = sample_lines(12);
    let mut rows = rows;
    // Line 9 takes line 3's id.
    let id3 = rows[2].split('\t').next().unwrap().to_string();
    let rest: Vec<&str> = rows[8].splitn(2, '\t').collect();
    rows[8] = format!("{id3}\t{}", rest[1]);
    std::fs::write(dir.path().join("input.tsv"), rows.join("\n") + "\n").unwrap();
    let o = paraforge_run(
        dir.path(),
        config(dir.path(), "dup-ids", 20, "", "beam = 1"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("a pair id appears twice") && err.contains(&id3) && err.contains("line=9"),
        "{err}"
    );
}

/// `model.beam_candidates = k` keeps the k best hypotheses of every pair:
/// k rows per pair, ranked 1..k in the beam's order, each with its own
/// translation score and scores, and rank 1 the row a one-candidate job
/// writes. Checked against the translator's own n-best list and the scorer
/// run here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beam_candidates_keep_the_k_best_hypotheses_as_ranked_rows() {
    use arrow_array::{Float32Array, Int32Array, StringArray};
    use paraforge_core::dataset::dataset_files;
    use paraforge_core::schema::{col, column, PairReader};
    use paraforge_nmt::{GenerateOptions, LoadOptions, Translator};

    let (n, k) = (12, 3);
    let mut outputs = Vec::new();
    for candidates in [k, 1] {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, _) = job(dir.path(), "kbest", n, 5, "");
        let mut cfg = cfg;
        cfg.model.as_mut().unwrap().beam = 4;
        cfg.model.as_mut().unwrap().beam_candidates = candidates;
        let c = coordinator(&cfg).await.unwrap();
        work(&c).await;
        let storage = Storage::open(&cfg.job.output).unwrap();
        let m = finalize(&c.shared, &storage).await.unwrap();
        c.stop().await;
        assert_eq!(
            (m.pairs, m.beam_candidates),
            ((n * candidates) as u64, candidates as u64)
        );
        // (id, rank) -> (translation, translation_score, trigram_overlap)
        let mut rows = std::collections::BTreeMap::new();
        let out = dir.path().join("out");
        for f in dataset_files(&out).unwrap() {
            for b in PairReader::open(&f, &[col::CANDIDATE_RANK]).unwrap() {
                let b = b.unwrap();
                let id = column::<StringArray>(&b, col::ID, &f).unwrap();
                let rank = column::<Int32Array>(&b, col::CANDIDATE_RANK, &f).unwrap();
                let text = column::<StringArray>(&b, col::TRANSLATION, &f).unwrap();
                let ts = column::<Float32Array>(&b, col::TRANSLATION_SCORE, &f).unwrap();
                let tri = column::<Float32Array>(&b, col::TRIGRAM_OVERLAP, &f).unwrap();
                for i in 0..b.num_rows() {
                    let key = (id.value(i).to_string(), rank.value(i));
                    let v = (text.value(i).to_string(), ts.value(i), tri.value(i));
                    assert!(rows.insert(key, v).is_none(), "a (pair, rank) twice");
                }
            }
        }
        outputs.push(rows);
    }
    let (kbest, one) = (&outputs[0], &outputs[1]);
    assert_eq!(kbest.len(), n * k);

    let pairs = paraforge_tests::sample_pairs(n);
    let mut t = Translator::load(
        &paraforge_tests::model("tiny-cs-en"),
        &LoadOptions::default(),
    )
    .unwrap();
    let o = GenerateOptions {
        num_beams: 4,
        nbest: k,
        max_new_tokens: Some(16),
        ..GenerateOptions::default()
    };
    let cs: Vec<&str> = pairs.iter().map(|p| p.1.as_str()).collect();
    let tr = t.translate(&cs, &o).unwrap();
    let mut scorer = paraforge_core::Scorer::new(None);
    let mut distinct = 0;
    for ((id, _, en), tr) in pairs.iter().zip(&tr) {
        assert_eq!(tr.nbest.len(), k);
        for (r, h) in tr.nbest.iter().enumerate() {
            let (text, score, tri) = &kbest[&(id.clone(), r as i32 + 1)];
            assert_eq!((text, *score), (&h.text, h.score), "{id} rank {}", r + 1);
            assert_eq!(*tri, scorer.score(en, &h.text).trigram_overlap);
        }
        assert_eq!(one[&(id.clone(), 1)], kbest[&(id.clone(), 1)], "{id}");
        distinct += usize::from(tr.nbest[0].text != tr.nbest[k - 1].text);
    }
    assert!(distinct > 0, "the candidates all equal the best one");
}

/// Pairs translated already (`input.format = "pairs"`, as users rescore
/// and filter an existing corpus) run the whole job without a model and
/// score every pair exactly as the translating job did: the translating
/// job's output, written out as a pairs file with its scores, comes back
/// with the same text and the same scores bit for bit; the manifest says
/// no model translated it, and lines with a bad score or no translation
/// are rejected by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn already_translated_pairs_score_as_the_translating_job_did() {
    use arrow_array::{Array, Float32Array, Int32Array, StringArray};
    use paraforge_core::dataset::dataset_files;
    use paraforge_core::schema::{col, column, PairReader};

    let dir = tempfile::tempdir().unwrap();
    let (mut cfg, _) = job(dir.path(), "translated", 60, 25, "");
    let scorer = paraforge_tests::model("scorer-trigram");
    cfg.scoring.model = Some(scorer.display().to_string());
    let c = coordinator(&cfg).await.unwrap();
    work(&c).await;
    let storage = Storage::open(&cfg.job.output).unwrap();
    let m = finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    let model = m.model.expect("a translating job names its model");
    let tiny = paraforge_tests::model("tiny-cs-en");
    assert_eq!(
        model.sha256,
        paraforge_core::model_digest::model_digest(&tiny).unwrap()
    );

    let translated = dir.path().join("out");
    let mut lines = Vec::new();
    for f in dataset_files(&translated).unwrap() {
        for b in PairReader::open(&f, &[]).unwrap() {
            let b = b.unwrap();
            let text = |c| column::<StringArray>(&b, c, &f).unwrap();
            let (id, src, r, t) = (
                text(col::ID),
                text(col::SOURCE),
                text(col::REFERENCE),
                text(col::TRANSLATION),
            );
            let score = column::<Float32Array>(&b, col::TRANSLATION_SCORE, &f).unwrap();
            for i in 0..b.num_rows() {
                // Rust prints the shortest text that reads back to the same f32.
                lines.push(format!(
                    "{}\t{}\t{}\t{}\t{}",
                    id.value(i),
                    src.value(i),
                    r.value(i),
                    t.value(i),
                    score.value(i)
                ));
            }
        }
    }
    assert_eq!(lines.len(), 60);
    lines.insert(10, "bad-1\tx\tA reference.\tA translation.\tabc".into());
    lines.insert(20, "bad-2\tx\tA reference.\t\t-1.5".into());
    let pairs = dir.path().join("pairs");
    std::fs::create_dir(&pairs).unwrap();
    std::fs::write(pairs.join("pairs.tsv"), lines.join("\n") + "\n").unwrap();
    let toml = format!(
        "[job]\nname = \"pairs\"\noutput = \"{}\"\nshard_pairs = 25\n\n[input]\npaths = [\"{}\"]\nformat = \"pairs\"\nid_column = 0\nsource_column = 1\nreference_column = 2\ntranslation_column = 3\ntranslation_score_column = 4\n\n[scoring]\nmodel = \"{}\"\n",
        pairs.join("out").display(),
        pairs.join("pairs.tsv").display(),
        scorer.display()
    );
    let out = paraforge_run(
        &pairs,
        JobConfig::parse(&toml, Path::new("pairs.toml")).unwrap(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(all_rows(&pairs.join("out")), all_rows(&translated));

    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(pairs.join("out").join("_manifest.json")).unwrap())
            .unwrap();
    assert!(manifest["model"].is_null(), "{manifest}");
    assert_eq!(manifest["pairs"], 60);
    assert_eq!(manifest["rejects_by_reason"]["bad_score"], 1, "{manifest}");
    assert_eq!(manifest["rejects_by_reason"]["empty_translation"], 1);
    // No model counted the source's tokens.
    for f in dataset_files(&pairs.join("out")).unwrap() {
        for b in PairReader::open(&f, &[]).unwrap() {
            let b = b.unwrap();
            let n = column::<Int32Array>(&b, col::SOURCE_LEN, &f).unwrap();
            assert_eq!(n.null_count(), b.num_rows());
        }
    }
}

/// `paraforge plan` reports the plan a run would serve (lines, shards,
/// repeated sources, the input's fingerprint) and writes nothing.
#[test]
fn plan_reports_the_shards_and_repeated_sources_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut rows, _) = sample_lines(50);
    let src = |l: &str| l.split('\t').nth(2).unwrap().to_string();
    rows.push(format!("rep-1\t1.0\t{}\tA copy.", src(&rows[3])));
    std::fs::write(dir.path().join("input.tsv"), rows.join("\n") + "\n").unwrap();
    let mut cfg = config(dir.path(), "plan", 20, "", "beam = 2");
    cfg.filters.dedup_sources = true;
    let toml = dir.path().join("job.toml");
    std::fs::write(&toml, cfg.to_toml()).unwrap();
    let toml = toml.display().to_string();
    let out = paraforge_tests::paraforge_ok(&["plan", "--json", "--config", toml.as_str()]);
    let plan: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(plan["lines"], 51, "{plan}");
    assert_eq!(plan["shards"], 3);
    assert_eq!(plan["repeated_sources_dropped"], 1);
    assert_eq!(plan["inputs"][0]["xxh3"].as_str().unwrap().len(), 32);
    assert!(!dir.path().join("out").exists());
}

/// `[scoring] bleu = "nakov"` fills `sentence_bleu` with BLEU+1 of Nakov
/// et al. (2012) for every row, and the config in the manifest says so; the
/// default stays sacrebleu's.
#[test]
fn nakov_bleu_fills_the_sentence_bleu_column_when_asked() {
    use arrow_array::{Float32Array, StringArray};
    use paraforge_core::bleu::{sentence_bleu_with, Smoothing};
    use paraforge_core::dataset::dataset_files;
    use paraforge_core::schema::{col, column, PairReader};

    let dir = tempfile::tempdir().unwrap();
    let input = paraforge_tests::repo_root().join("data/sample/czeng16-heldout.cs-en.tsv");
    let lines: Vec<String> = std::fs::read_to_string(&input)
        .unwrap()
        .lines()
        .take(40)
        .map(String::from)
        .collect();
    std::fs::write(dir.path().join("pairs.tsv"), lines.join("\n") + "\n").unwrap();
    let toml = format!(
        "[job]\nname = \"nakov\"\noutput = \"{}\"\n\n[input]\npaths = [\"{}\"]\nformat = \"pairs\"\nid_column = 0\ntranslation_column = 2\nreference_column = 3\n\n[scoring]\nbleu = \"nakov\"\n",
        dir.path().join("out").display(),
        dir.path().join("pairs.tsv").display(),
    );
    let out = paraforge_run(
        dir.path(),
        JobConfig::parse(&toml, Path::new("nakov.toml")).unwrap(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut rows, mut differ) = (0, 0);
    for f in dataset_files(&dir.path().join("out")).unwrap() {
        for b in PairReader::open(&f, &[]).unwrap() {
            let b = b.unwrap();
            let r = column::<StringArray>(&b, col::REFERENCE, &f).unwrap();
            let t = column::<StringArray>(&b, col::TRANSLATION, &f).unwrap();
            let bleu = column::<Float32Array>(&b, col::SENTENCE_BLEU, &f).unwrap();
            for i in 0..b.num_rows() {
                let (r, t) = (r.value(i), t.value(i));
                let nakov = sentence_bleu_with(t, r, Smoothing::Nakov) as f32;
                assert_eq!(bleu.value(i), nakov, "{t:?} / {r:?}");
                differ +=
                    usize::from(nakov != sentence_bleu_with(t, r, Smoothing::Sacrebleu) as f32);
                rows += 1;
            }
        }
    }
    assert_eq!(rows, 40);
    assert!(
        differ > 30,
        "the two BLEUs should differ on most pairs: {differ}"
    );
    let manifest = std::fs::read_to_string(dir.path().join("out/_manifest.json")).unwrap();
    assert!(manifest.contains("bleu = \\\"nakov\\\""), "{manifest}");
}

/// (id, reference, translation, para_score) of every row of a local dataset.
fn scored_rows(out: &Path) -> Vec<(String, String, String, Option<f32>)> {
    use arrow_array::{Array, Float32Array, StringArray};
    use paraforge_core::schema::{col, column, PairReader};
    let mut rows = Vec::new();
    for f in paraforge_core::dataset::dataset_files(out).unwrap() {
        let cols = [col::ID, col::REFERENCE, col::TRANSLATION, col::PARA_SCORE];
        for b in PairReader::open(&f, &cols).unwrap() {
            let b = b.unwrap();
            let s = |name| column::<StringArray>(&b, name, &f).unwrap();
            let (id, r, t) = (s(col::ID), s(col::REFERENCE), s(col::TRANSLATION));
            let p = column::<Float32Array>(&b, col::PARA_SCORE, &f).unwrap();
            for i in 0..b.num_rows() {
                rows.push((
                    id.value(i).to_string(),
                    r.value(i).to_string(),
                    t.value(i).to_string(),
                    (!p.is_null(i)).then(|| p.value(i)),
                ));
            }
        }
    }
    rows
}

/// An English-to-Czech job with `[scoring] bootstrap` on the first `limit`
/// sample lines, output in `dir/out`.
fn bootstrap_job(dir: &Path, limit: usize) -> PathBuf {
    let root = paraforge_tests::repo_root();
    let text = format!(
        r#"[job]
name = "boot"
output = "{out}"
shard_pairs = 100
lease_seconds = 30

[input]
paths = ["{input}"]
format = "tsv"
id_column = 0
source_column = 3
reference_column = 2
limit = {limit}

[model]
dir = "{model}"
threads = 1
beam = 2
batch_size = 16
max_new_tokens = 48

[filters]
source_lang = "eng"
reference_lang = "ces"

[scoring]
bootstrap = "trigram"
bootstrap_epochs = 3

[bins]

[coordinator]
listen = "127.0.0.1:0"
metrics = "127.0.0.1:0"

[workers]
local = 1
"#,
        out = dir.join("out").display(),
        input = root.join("data/sample/czeng16-heldout.cs-en.tsv").display(),
        model = paraforge_tests::model("demo-en-cs").display(),
    );
    let toml = dir.join("job.toml");
    std::fs::write(&toml, text).unwrap();
    toml
}

/// `[scoring] bootstrap` in one `paraforge run`: a Czech job killed while
/// its bootstrap trains leaves the translations finished and no scored
/// corpus anyone reads; run again, it scores every pair with the fold
/// model that never saw it (recomputed here from the kept models) and bins
/// the scored corpus. The translations' own para_score stays null. A job
/// too small for its folds is refused by count before translating.
#[test]
fn a_bootstrap_job_scores_its_own_language_and_survives_a_kill() {
    use paraforge_core::folds::fold_of;
    use paraforge_core::Scorer;
    let dir = tempfile::tempdir().unwrap();
    let toml = bootstrap_job(dir.path(), 300);
    let run = || {
        let mut c = std::process::Command::new(paraforge_bin());
        c.args(["run", "--config"])
            .arg(&toml)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    // Killed once fold 0's model is trained (its card is in place) and
    // fold 1's trains: the claim's staging directory holds both.
    let staged = dir
        .path()
        .join(".out-scored.staging/_scorers/fold-0/README.md");
    let mut child = run().spawn().unwrap();
    let t = std::time::Instant::now();
    while !staged.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before its bootstrap could be killed"
        );
        assert!(t.elapsed() < Duration::from_secs(300), "no bootstrap");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (out, scored) = (dir.path().join("out"), dir.path().join("out-scored"));
    assert!(
        out.join("_SUCCESS").exists(),
        "the translations are finished"
    );
    assert!(!scored.join("_SUCCESS").exists());
    let o = paraforge_tests::paraforge_cmd(&[
        "bin".as_ref(),
        "--data".as_ref(),
        scored.as_os_str(),
        "--out".as_ref(),
        dir.path().join("b").as_os_str(),
    ]);
    assert!(!o.status.success(), "bin read what a killed bootstrap left");

    let o = run().output().unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        said.contains("bootstrap: 300 pairs scored by 2 cross-fitted models"),
        "{said}"
    );
    assert!(dir.path().join("out-bins/_SUCCESS").exists(), "{said}");
    assert!(!dir.path().join(".out-scored.staging").exists());
    assert!(scored_rows(&out).iter().all(|r| r.3.is_none()));
    let models: Vec<_> = (0..2)
        .map(|i| {
            let d = scored.join(format!("_scorers/fold-{i}"));
            paraforge_scorer::load_encoder(Some(&d), None)
                .unwrap()
                .unwrap()
        })
        .collect();
    let rows = scored_rows(&scored);
    assert_eq!(rows.len(), 300);
    let mut other_differs = 0;
    for (id, reference, translation, para) in &rows {
        let k = fold_of(id, 2) as usize;
        let own = Scorer::new(Some(models[k].as_ref())).score(reference, translation);
        assert_eq!(own.para_score, *para, "{id}");
        let other = Scorer::new(Some(models[1 - k].as_ref())).score(reference, translation);
        other_differs += usize::from(other.para_score != *para);
    }
    assert!(other_differs > 250, "{other_differs}");

    // Too few lines for two folds of 100 training pairs: refused by count,
    // nothing translated.
    let small = tempfile::tempdir().unwrap();
    let toml = bootstrap_job(small.path(), 150);
    let o = std::process::Command::new(paraforge_bin())
        .args(["run", "--config"])
        .arg(&toml)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains("scoring.bootstrap: the job plans 150 input lines")
            && e.contains("at least 200 pairs"),
        "{e}"
    );
    assert!(!small.path().join("out/_SUCCESS").exists());
    assert!(
        paraforge_core::dataset::dataset_files(&small.path().join("out"))
            .map_or(true, |f| f.is_empty())
    );
}
