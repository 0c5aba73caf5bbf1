//! Fault injection on real processes over loopback: workers killed with
//! SIGKILL, the coordinator killed with SIGKILL and restarted on its state
//! file, a worker paused past its lease and resumed, and an output store
//! that refuses writes for a while. After each round the output is checked
//! against the input: every valid pair exactly once, every reject counted,
//! every committed file's checksum and row count as the manifest says, no
//! file outside the manifest.
//!
//!
//! Faults that must not be survived but refused: the input changed between
//! two runs (the coordinator must exit non-zero at start, and resume once
//! the input is restored), and a second job started on the same output (it
//! must exit non-zero and change nothing). Rounds with a single attempt per
//! shard end incomplete when a fault costs a lease: the coordinator must
//! then exit non-zero without `_SUCCESS`, and running it again must finish.
//!
//! `faults_short` (in `make test`) injects each fault once; `make soak`
//! runs `soak` for PARAFORGE_SOAK_ROUNDS (default 200) randomized rounds.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use paraforge_core::schema::PairReader;
use paraforge_tests::procs::{coordinator, free_ports, worker, Proc};
use paraforge_tests::{job_toml, output_rows, sample_lines};
use rand::{Rng, SeedableRng};
use sha2::Digest;

const LEASE_SECONDS: u64 = 5;
const DIRTY: usize = 4;
/// Lines added that the job's `[filters]` drop (two copies, one of
/// numbers only, a repeated source); the sample has real ones too.
const FILTERED: usize = 4;
const FILTERS: &str = "drop_copies = true\nmin_letter_ratio = 0.3\ndedup_sources = true\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fault {
    KillWorker,
    KillCoordinator,
    PauseWorker,
    BlockStorage,
    ChangeInput,
    SecondJob,
    ForgeCompletion,
    /// A worker started with `--model-dir` naming another model.
    OtherModel,
    // After `_SUCCESS`, on the finished output:
    /// A committed part file damaged in place (same size).
    DamagePart,
    /// `rescore` SIGKILLed at a random moment, then run again.
    KillRescore,
    /// `filter` SIGKILLed at a random moment, then run again.
    KillFilter,
    /// `rescore --bootstrap` (the step of a job's `[scoring] bootstrap`)
    /// SIGKILLed at a random moment, training or scoring, then run again.
    KillBootstrap,
    /// Two `rescore` runs into one output at once.
    TwoRescores,
    /// A writer's output aimed at an input or into the finished output,
    /// with or without `--overwrite`.
    OutputAtInput,
    /// `train --resume` on a checkpoint of the output, given other data.
    ResumeOtherData,
    /// A job scoring with a tree-rnn model, one input line past the
    /// ~32,700 characters that broke Link Grammar's heap.
    LongLineTree,
}

/// What is done to a round's finished output.
const AFTER: [Fault; 8] = [
    Fault::DamagePart,
    Fault::KillRescore,
    Fault::KillFilter,
    Fault::KillBootstrap,
    Fault::TwoRescores,
    Fault::OutputAtInput,
    Fault::ResumeOtherData,
    Fault::LongLineTree,
];

const ALL: [Fault; 8] = [
    Fault::OtherModel,
    Fault::ForgeCompletion,
    Fault::KillWorker,
    Fault::KillCoordinator,
    Fault::PauseWorker,
    Fault::BlockStorage,
    Fault::ChangeInput,
    Fault::SecondJob,
];

/// A client with the job's access (this job has no token) forges
/// completions: under a listed worker's id without its secret, for every
/// shard and many tokens; and under its own registration, for shards it
/// does not hold and for one it holds but claiming 100 pairs and no files.
/// Every one must be refused; the round's output check then shows that
/// none of them counted.
fn forge_completions(url: &str, shards: usize) -> usize {
    use paraforge_rpc::proto::coordinator_client::CoordinatorClient;
    use paraforge_rpc::proto::{self as pb, lease_shard_response};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let Ok(mut c) = CoordinatorClient::connect(url.to_string()).await else {
            return 0;
        };
        let Ok(s) = c.job_status(pb::JobStatusRequest {}).await else {
            return 0;
        };
        let victim = s.into_inner().workers.first().map(|w| w.worker_id.clone());
        let Ok(me) = c
            .register_worker(pb::RegisterWorkerRequest {
                name: "forger".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            })
            .await
        else {
            return 0;
        };
        let me = me.into_inner();
        let mut tried = 0;
        let mut complete = |id: String, secret: String, shard: u64, token: u64| {
            tried += 1;
            pb::CompleteShardRequest {
                worker_id: id,
                worker_secret: secret,
                shard_id: shard,
                lease_token: token,
                files: vec![],
                totals: Some(pb::Progress {
                    pairs_written: 100,
                    rejects: 0,
                    lines_read: 100,
                }),
                metrics: None,
            }
        };
        let mut forged = Vec::new();
        for shard in 0..shards as u64 {
            for token in 1..8 {
                if let Some(v) = &victim {
                    forged.push(complete(v.clone(), "0".repeat(32), shard, token));
                    forged.push(complete(v.clone(), me.worker_secret.clone(), shard, token));
                }
                forged.push(complete(
                    me.worker_id.clone(),
                    me.worker_secret.clone(),
                    shard,
                    token,
                ));
            }
        }
        if let Ok(r) = c
            .lease_shard(pb::LeaseShardRequest {
                worker_id: me.worker_id.clone(),
                worker_secret: me.worker_secret.clone(),
                model_sha256: me.model_sha256.clone(),
            })
            .await
        {
            if let Some(lease_shard_response::Result::Lease(l)) = r.into_inner().result {
                let id = l.shard.map_or(0, |s| s.shard_id);
                forged.push(complete(
                    me.worker_id.clone(),
                    me.worker_secret.clone(),
                    id,
                    l.lease_token,
                ));
            }
        }
        for req in forged {
            if let Ok(r) = c.complete_shard(req).await {
                assert!(!r.into_inner().accepted, "a forged completion was accepted");
            }
        }
        tried
    })
}

/// Seconds a round may take (PARAFORGE_SOAK_ROUND_LIMIT, default 600).
fn round_limit() -> u64 {
    std::env::var("PARAFORGE_SOAK_ROUND_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600)
}

/// The coordinator's status as text, for a round that went wrong.
fn job_status(url: &str) -> String {
    use paraforge_rpc::proto::coordinator_client::CoordinatorClient;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match CoordinatorClient::connect(url.to_string()).await {
            Ok(mut c) => match c
                .job_status(paraforge_rpc::proto::JobStatusRequest {})
                .await
            {
                Ok(s) => format!("{:?}", s.into_inner()),
                Err(e) => format!("status refused: {e}"),
            },
            Err(e) => format!("no coordinator at {url}: {e}"),
        }
    })
}

/// Starts `paraforge coordinator` on a config expected to be refused at
/// start; returns what it said on standard error.
fn refused(config: &Path) -> String {
    let o = std::process::Command::new(paraforge_tests::paraforge_bin())
        .args(["coordinator", "--config"])
        .arg(config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success(),
        "{} was not refused: {err}",
        config.display()
    );
    err
}

/// The job: `lines` sample pairs plus four dirty lines and four that its
/// `[filters]` drop, shards of 50, at most `attempts` leases per shard.
/// Returns the config, the ids the output must hold and the rejects by
/// reason its manifest must count (both worked out here: the sample's own
/// repeats and copies by a plain pass, the rules by the filter code), and
/// the number of shards.
fn write_job(
    dir: &Path,
    lines: usize,
    attempts: u32,
) -> (PathBuf, Vec<String>, BTreeMap<String, u64>, usize) {
    let (mut rows, _) = sample_lines(lines);
    rows.insert(7, "no tabs at all".into());
    rows.insert(60, "f1\t1.0\tHome page\thome  page".into());
    rows.insert(100, "d2\t1.0\t\tempty source".into());
    rows.insert(
        220,
        "f2\t1.0\t2014 - 2015: 12,5 %\t2014 - 2015: 12.5 %".into(),
    );
    rows.insert(301, "d3\t1.0\tjen tři sloupce".into());
    rows.insert(450, "d4\t1.0\tčesky\t".into());
    rows.insert(470, "f3\t1.0\tKontakt\tKontakt".into());
    // A real source again, with another id and reference.
    let again = rows[30].split('\t').nth(2).unwrap().to_string();
    rows.insert(600, format!("f4\t1.0\t{again}\tThe same source once more."));
    let filter = paraforge_job::filters::PreFilter::new(&toml::from_str(FILTERS).unwrap()).unwrap();
    let (mut ids, mut by) = (Vec::new(), BTreeMap::<String, u64>::new());
    let mut seen = std::collections::HashSet::new();
    for l in &rows {
        let c: Vec<&str> = l.split('\t').collect();
        let code = match c.as_slice() {
            [_, _, s, r] if !s.is_empty() && !r.is_empty() => {
                if !seen.insert(s.to_string()) {
                    Some("duplicate")
                } else {
                    filter.check(s, r).map(|why| why.code())
                }
            }
            [_, _, "", _] => Some("empty_source"),
            [_, _, _, ""] => Some("empty_reference"),
            _ => Some("columns"),
        };
        match code {
            Some(code) => *by.entry(code.to_string()).or_default() += 1,
            None => ids.push(c[0].to_string()),
        }
    }
    let input = dir.join("input.tsv");
    std::fs::write(&input, rows.join("\n") + "\n").unwrap();
    let shards = (lines + DIRTY + FILTERED).div_ceil(50);
    let [grpc, pages] = free_ports();
    let text = job_toml(
        "faults",
        &input.display().to_string(),
        &dir.join("out").display().to_string(),
        &format!("shard_pairs = 50\nlease_seconds = {LEASE_SECONDS}\nmax_attempts = {attempts}"),
        "beam = 4\nbatch_size = 16\nmax_new_tokens = 24",
        &format!(
            "[filters]\n{FILTERS}\n[coordinator]\nlisten = \"127.0.0.1:{grpc}\"\nmetrics = \"127.0.0.1:{pages}\"",
        ),
    );
    let cfg = dir.join("job.toml");
    std::fs::write(&cfg, text).unwrap();
    (cfg, ids, by, shards)
}

/// Starts the coordinator again on the same state file and port (the
/// workers reconnect), and workers until three run: those told `done`
/// before have left, and a restart that retries a failed shard needs some.
fn restart(
    cfg: &Path,
    url: &str,
    workers: &mut Vec<Proc>,
    spawn: &mut impl FnMut(&str) -> Proc,
) -> Proc {
    let (c, u) = coordinator(cfg);
    assert_eq!(u, url);
    workers.retain_mut(|w| w.exited().is_none());
    while workers.len() < 3 {
        workers.push(spawn(url));
    }
    c
}

/// Runs one job while injecting `plan` (or random faults when `plan` is
/// empty, from `seed`); checks the output; returns the faults injected.
fn round(seed: u64, plan: &[Fault], lines: usize) -> (HashMap<Fault, usize>, usize) {
    let (plan, plan_after): (Vec<Fault>, Vec<Fault>) =
        plan.iter().partition(|f| !AFTER.contains(f));
    let dir = tempfile::tempdir().unwrap();
    // One round in four allows a single attempt per shard, so that a lost
    // lease fails the run.
    let attempts = if plan.is_empty() && seed % 4 == 3 {
        1
    } else {
        100
    };
    let (cfg, ids, by_reason, shards) = write_job(dir.path(), lines, attempts);
    let input = dir.path().join("input.tsv");
    let out = dir.path().join("out");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut coord, url) = coordinator(&cfg);
    let mut next_name = 0;
    let mut spawn = |url: &str| {
        next_name += 1;
        worker(url, &format!("w{next_name}"))
    };
    let mut workers: Vec<Proc> = (0..3).map(|_| spawn(&url)).collect();
    let mut injected: HashMap<Fault, usize> = HashMap::new();
    let mut plan: Vec<Fault> = plan.iter().rev().copied().collect();
    let random = plan.is_empty() && plan_after.is_empty();
    let plan_given = !random;
    let started = Instant::now();
    let mut restarted = false;
    let mut incomplete_runs = 0;
    loop {
        // A plan is injected back to back, so that every fault lands while
        // the job still runs; random rounds space them out.
        let pause = if plan_given {
            200
        } else {
            rng.random_range(300..1500)
        };
        std::thread::sleep(Duration::from_millis(pause));
        if let Some(st) = coord.exited() {
            if st.success() {
                break;
            }
            // Only a single-attempt round may end incomplete, and then with
            // nothing that says success; running it again resumes it.
            let (_, said) = coord.wait(Duration::from_secs(1));
            assert!(
                attempts == 1,
                "seed {seed}: the coordinator failed: {st} {said}"
            );
            assert!(
                !out.join("_SUCCESS").exists() && !out.join("_manifest.json").exists(),
                "seed {seed}: an incomplete run left a success marker"
            );
            incomplete_runs += 1;
            coord = restart(&cfg, &url, &mut workers, &mut spawn);
            continue;
        }
        if started.elapsed() > Duration::from_secs(round_limit()) {
            let alive = workers.iter_mut().filter_map(|w| w.exited()).count();
            let alive = workers.len() - alive;
            panic!(
                "seed {seed}: the job did not finish ({alive} worker processes alive, {injected:?}, {incomplete_runs} incomplete runs); status: {}",
                job_status(&url)
            );
        }
        let fault = if random {
            if injected.values().sum::<usize>() >= 6 {
                continue;
            }
            ALL[rng.random_range(0..ALL.len())]
        } else {
            match plan.pop() {
                Some(f) => f,
                None => continue,
            }
        };
        workers.retain_mut(|w| w.exited().is_none());
        match fault {
            Fault::KillWorker if !workers.is_empty() => {
                let i = rng.random_range(0..workers.len());
                workers[i].signal("KILL");
                let _ = workers[i].wait(Duration::from_secs(10));
                workers.swap_remove(i);
                workers.push(spawn(&url));
            }
            Fault::KillCoordinator => {
                coord.signal("KILL");
                let _ = coord.wait(Duration::from_secs(10));
                std::thread::sleep(Duration::from_millis(300));
                coord = restart(&cfg, &url, &mut workers, &mut spawn);
                restarted = true;
            }
            Fault::PauseWorker if !workers.is_empty() => {
                let i = rng.random_range(0..workers.len());
                workers[i].signal("STOP");
                std::thread::sleep(Duration::from_secs(LEASE_SECONDS + 2));
                workers[i].signal("CONT");
            }
            Fault::BlockStorage => {
                // A plain file where a shard's directory must go makes every
                // write to that shard fail (even for root) until it is gone.
                let mut blockers = Vec::new();
                for s in 0..shards {
                    let p = out.join(format!("shard={s}"));
                    if !p.exists() && std::fs::write(&p, b"blocked").is_ok() {
                        blockers.push(p);
                    }
                }
                std::thread::sleep(Duration::from_millis(2500));
                for p in blockers {
                    std::fs::remove_file(p).unwrap();
                }
            }
            Fault::ChangeInput => {
                // Stop the job, add lines at the top of its input, run it
                // again: refused, naming the input. Restored: it resumes.
                coord.signal("KILL");
                let _ = coord.wait(Duration::from_secs(10));
                let original = std::fs::read(&input).unwrap();
                let mut changed = b"x1\t1.0\tnova veta\tnew line\n".to_vec();
                changed.extend_from_slice(&original);
                std::fs::write(&input, &changed).unwrap();
                let err = refused(&cfg);
                assert!(
                    err.contains("changed since the job was planned")
                        && err.contains(&input.display().to_string()),
                    "seed {seed}: {err}"
                );
                assert!(!out.join("_SUCCESS").exists());
                std::fs::write(&input, &original).unwrap();
                coord = restart(&cfg, &url, &mut workers, &mut spawn);
                restarted = true;
            }
            Fault::SecondJob => {
                // Another job (its own name and state) on the same output,
                // on addresses of its own: the job's coordinator holds its.
                let text: String = std::fs::read_to_string(&cfg)
                    .unwrap()
                    .lines()
                    .map(|l| {
                        if l.starts_with("metrics = ") {
                            "metrics = \"127.0.0.1:0\"\n".to_string()
                        } else {
                            format!("{l}\n")
                        }
                    })
                    .collect();
                let other = dir.path().join("other.toml");
                let state = dir.path().join("other.redb");
                std::fs::write(
                    &other,
                    text.replacen("name = \"faults\"", "name = \"intruder\"", 1)
                        .replace(
                            "[coordinator]",
                            &format!("[coordinator]\nstate = \"{}\"", state.display()),
                        )
                        .replace(&url.replace("http://", ""), "127.0.0.1:0"),
                )
                .unwrap();
                let err = refused(&other);
                assert!(
                    err.contains("belongs to job \"faults\""),
                    "seed {seed}: {err}"
                );
                assert!(!state.exists(), "seed {seed}: the refused job left a state");
            }
            Fault::ForgeCompletion => {
                if forge_completions(&url, shards) == 0 {
                    continue;
                }
            }
            Fault::OtherModel => {
                // The job's model with one config file's bytes changed.
                let other = dir.path().join("other-model");
                if !other.exists() {
                    std::fs::create_dir_all(&other).unwrap();
                    for e in std::fs::read_dir(paraforge_tests::model("tiny-cs-en")).unwrap() {
                        let p = e.unwrap().path();
                        std::fs::copy(&p, other.join(p.file_name().unwrap())).unwrap();
                    }
                    let g = other.join("generation_config.json");
                    let mut text = std::fs::read_to_string(&g).unwrap();
                    text.push('\n');
                    std::fs::write(&g, text).unwrap();
                }
                let (ok, err) = command(
                    &[
                        "worker",
                        "--coordinator",
                        &url,
                        "--name",
                        "other-model",
                        "--connect-attempts",
                        "3",
                        "--model-dir",
                        &other.display().to_string(),
                    ],
                    Duration::from_secs(120),
                );
                if err.contains("unreachable") {
                    continue; // the job ended first
                }
                assert!(
                    !ok && err.contains("digest") && err.contains("model.dir"),
                    "seed {seed}: a worker with another model was not refused: {err}"
                );
            }
            _ => continue,
        }
        *injected.entry(fault).or_default() += 1;
    }
    // Workers that missed the coordinator's last seconds would retry it
    // for minutes; the job is over, so stop them.
    for w in &mut workers {
        if w.exited().is_none() {
            w.signal("KILL");
        }
        let _ = w.wait(Duration::from_secs(30));
    }

    check_output(seed, &out, &ids, &by_reason, shards);
    if restarted {
        eprintln!("seed {seed}: the output held across coordinator restarts");
    }
    let after: Vec<Fault> = if plan_given {
        plan_after.to_vec()
    } else {
        AFTER
            .iter()
            .copied()
            .filter(|_| rng.random_bool(0.5))
            .collect()
    };
    for fault in after {
        aftermath(seed, fault, dir.path(), &cfg, &ids, &mut rng);
        *injected.entry(fault).or_default() += 1;
        check_output(seed, &out, &ids, &by_reason, shards);
    }
    (injected, incomplete_runs)
}

/// The finished output against the input: every valid pair exactly once,
/// rejects counted by reason, every listed file's checksum, rows and model
/// digest as the manifest says, no attempt's file outside it.
fn check_output(
    seed: u64,
    out: &Path,
    ids: &[String],
    by_reason: &BTreeMap<String, u64>,
    shards: usize,
) {
    let model_sha =
        &paraforge_core::model_digest::model_digest(&paraforge_tests::model("tiny-cs-en")).unwrap();
    // Every valid pair exactly once.
    let mut got: Vec<String> = output_rows(out).into_iter().map(|r| r.0).collect();
    got.sort();
    let mut want = ids.to_vec();
    want.sort();
    assert_eq!(got, want, "seed {seed}");
    // The manifest: rejects counted, checksums and row counts right.
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("_manifest.json")).unwrap()).unwrap();
    assert_eq!(m["rejects"], by_reason.values().sum::<u64>(), "seed {seed}");
    // Counted once per line, whichever attempt committed it.
    assert_eq!(
        m["rejects_by_reason"],
        serde_json::json!(by_reason),
        "seed {seed}"
    );
    // The lines the round put in are among them, whatever the sample holds.
    assert!(
        by_reason["columns"] >= 2 && by_reason["duplicate"] >= 1 && by_reason["copy"] >= 1,
        "seed {seed}: {by_reason:?}"
    );
    assert_eq!(m["shards_committed"], shards as u64, "seed {seed}");
    let mut listed = Vec::new();
    for f in m["files"]
        .as_array()
        .unwrap()
        .iter()
        .chain(m["rejects_files"].as_array().unwrap())
    {
        let rel = f["path"].as_str().unwrap();
        let bytes = std::fs::read(out.join(rel)).unwrap();
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&bytes)),
            f["sha256"].as_str().unwrap(),
            "seed {seed}: {rel}"
        );
        if rel.ends_with(".parquet") {
            let r = PairReader::open(&out.join(rel), &["id"]).unwrap();
            assert_eq!(r.num_rows() as u64, f["rows"].as_u64().unwrap(), "{rel}");
            // Every shard translated by the job's one model.
            assert_eq!(
                r.metadata().get("paraforge.model_sha256"),
                Some(model_sha),
                "seed {seed}: {rel}"
            );
        } else {
            let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
            assert_eq!(lines, f["rows"].as_u64().unwrap(), "{rel}");
        }
        listed.push(rel.to_string());
    }
    // No attempt's file is left outside the manifest.
    let mut on_disk = Vec::new();
    for top in ["", "_rejects/"] {
        for e in std::fs::read_dir(out.join(top)).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("shard=") && e.path().is_dir() {
                for f in std::fs::read_dir(e.path()).unwrap() {
                    on_disk.push(format!(
                        "{top}{name}/{}",
                        f.unwrap().file_name().to_string_lossy()
                    ));
                }
            }
        }
    }
    on_disk.sort();
    listed.sort();
    assert_eq!(on_disk, listed, "seed {seed}: files outside the manifest");
    assert!(out.join("_SUCCESS").is_file());
}

/// Runs `paraforge ARGS` to its end (at most `limit`); whether it
/// succeeded, and what it said on standard error.
fn command(args: &[&str], limit: Duration) -> (bool, String) {
    let mut child = spawn(args);
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (st.success(), err);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("paraforge {args:?} did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn(args: &[&str]) -> std::process::Child {
    std::process::Command::new(paraforge_tests::paraforge_bin())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The ids of a finished dataset, read (and verified) as every reader does.
fn dataset_ids(dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = output_rows(dir).into_iter().map(|r| r.0).collect();
    ids.sort();
    ids
}

/// id -> para_score (as bits: NaN-safe) of every row of a dataset.
fn para_scores(dir: &Path) -> BTreeMap<String, Option<u32>> {
    use arrow_array::{Array, Float32Array, StringArray};
    use paraforge_core::schema::{col, column};
    let mut out = BTreeMap::new();
    for f in paraforge_core::dataset::dataset_files(dir).unwrap() {
        for b in PairReader::open(&f, &[col::ID, col::PARA_SCORE]).unwrap() {
            let b = b.unwrap();
            let id = column::<StringArray>(&b, col::ID, &f).unwrap();
            let p = column::<Float32Array>(&b, col::PARA_SCORE, &f).unwrap();
            for i in 0..b.num_rows() {
                let v = (!p.is_null(i)).then(|| p.value(i).to_bits());
                out.insert(id.value(i).to_string(), v);
            }
        }
    }
    out
}

/// One fault on the finished output of a round, and its check: damage is
/// refused by every reader and repaired by running the job again; a killed
/// or concurrent command leaves either nothing a reader takes or a
/// complete dataset, and running it again completes it.
fn aftermath(seed: u64, fault: Fault, dir: &Path, cfg: &Path, ids: &[String], rng: &mut impl Rng) {
    let out = dir.join("out");
    let out_s = out.display().to_string();
    let vectors = paraforge_tests::repo_root()
        .join("data/vectors/glove.6B.50d.top25k.txt.gz")
        .display()
        .to_string();
    let freq = paraforge_tests::repo_root()
        .join("data/freq/enwiki_vocab_top50k.txt")
        .display()
        .to_string();
    let mut want = ids.to_vec();
    want.sort();
    let limit = Duration::from_secs(round_limit());
    let fresh = |name: &str| {
        let p = dir.join(format!("{name}-{}", rng_name()));
        p.display().to_string()
    };
    match fault {
        Fault::DamagePart => {
            let m: serde_json::Value =
                serde_json::from_slice(&std::fs::read(out.join("_manifest.json")).unwrap())
                    .unwrap();
            let files = m["files"].as_array().unwrap();
            let rel = files[rng.random_range(0..files.len())]["path"]
                .as_str()
                .unwrap()
                .to_string();
            let p = out.join(&rel);
            let mut bytes = std::fs::read(&p).unwrap();
            let i = rng.random_range(4..bytes.len() - 8);
            bytes[i] ^= 0x5a;
            std::fs::write(&p, &bytes).unwrap();
            for cmd in ["bin", "rescore", "filter", "report"] {
                let target = fresh(cmd);
                let mut args = vec![cmd, "--data", &out_s, "--out", &target];
                match cmd {
                    "rescore" => args.extend(["--vectors", &vectors]),
                    "filter" => args.extend(["--max", "trigram_overlap=2"]),
                    "report" => args.extend(["--freq", &freq]),
                    _ => {}
                }
                let (ok, err) = command(&args, limit);
                assert!(
                    !ok && err.contains(&rel) && err.contains("SHA-256"),
                    "seed {seed}: {cmd} read a damaged file: {err}"
                );
                assert!(
                    !Path::new(&target).join("_SUCCESS").exists(),
                    "seed {seed}: {cmd} wrote a dataset from damaged input"
                );
            }
            // Running the job again finds the damage and writes the shard again.
            let (mut c, url) = coordinator(cfg);
            let mut w = worker(&url, "repair");
            let (st, said) = c.wait(limit);
            assert!(
                st.success(),
                "seed {seed}: the repairing run failed: {said}"
            );
            w.signal("KILL");
            let _ = w.wait(Duration::from_secs(30));
        }
        Fault::KillRescore | Fault::KillFilter | Fault::KillBootstrap => {
            let (cmd, extra): (&str, &[&str]) = match fault {
                Fault::KillRescore => ("rescore", &["--vectors", &vectors]),
                Fault::KillFilter => ("filter", &["--max", "trigram_overlap=2"]),
                _ => (
                    "rescore",
                    &["--bootstrap", "trigram", "--bootstrap-epochs", "1"],
                ),
            };
            let target = fresh(cmd);
            let mut args = vec![cmd, "--data", &out_s, "--out", &target];
            args.extend(extra);
            // How long a whole run takes, to kill the next one anywhere in it.
            let t = Instant::now();
            let base = fresh("base");
            let mut base_args = args.clone();
            base_args[4] = base.as_str();
            let (ok, err) = command(&base_args, limit);
            assert!(ok, "seed {seed}: {err}");
            let full = t.elapsed().as_millis() as u64;
            let mut child = spawn(&args);
            std::thread::sleep(Duration::from_millis(rng.random_range(0..full.max(1) + 1)));
            let _ = child.kill();
            let _ = child.wait();
            let finished = Path::new(&target).join("_SUCCESS").exists();
            if !finished {
                let (ok, err) =
                    command(&["bin", "--data", &target, "--out", &fresh("bins")], limit);
                assert!(!ok, "seed {seed}: bin read what a killed {cmd} left: {err}");
            }
            let (ok, err) = command(&args, limit);
            if finished {
                assert!(!ok && err.contains("--overwrite"), "seed {seed}: {err}");
            } else {
                assert!(ok, "seed {seed}: {cmd} after a killed {cmd}: {err}");
            }
            assert_eq!(dataset_ids(Path::new(&target)), want, "seed {seed}: {cmd}");
            // Not only every row: every score as an uninterrupted run gave
            // it (for the bootstrap: by the same fold's model).
            assert_eq!(
                para_scores(Path::new(&target)),
                para_scores(Path::new(&base)),
                "seed {seed}: {cmd} {extra:?}"
            );
        }
        Fault::TwoRescores => {
            let target = fresh("twice");
            let args = [
                "rescore",
                "--data",
                &out_s,
                "--vectors",
                &vectors,
                "--out",
                &target,
            ];
            let mut a = spawn(&args);
            let mut b = spawn(&args);
            let (sa, sb) = (a.wait().unwrap(), b.wait().unwrap());
            let mut said = String::new();
            for c in [&mut a, &mut b] {
                if let Some(mut e) = c.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut said);
                }
            }
            assert_eq!(
                u8::from(sa.success()) + u8::from(sb.success()),
                1,
                "seed {seed}: two rescores into one output: {said}"
            );
            assert!(
                said.contains("another paraforge run is writing it")
                    || said.contains("--overwrite"),
                "seed {seed}: {said}"
            );
            assert_eq!(dataset_ids(Path::new(&target)), want, "seed {seed}");
        }
        Fault::OutputAtInput => {
            let scorer = paraforge_tests::model("scorer-trigram").join("model.pfe");
            let scorer = scorer.display().to_string();
            let sts = paraforge_tests::repo_root()
                .join("data/sts")
                .display()
                .to_string();
            let text = dir.join("lines.txt");
            std::fs::write(&text, "Dobrý den.\n").unwrap();
            let text = text.display().to_string();
            let tiny = paraforge_tests::model("tiny-cs-en").display().to_string();
            let m: serde_json::Value =
                serde_json::from_slice(&std::fs::read(out.join("_manifest.json")).unwrap())
                    .unwrap();
            let part = out
                .join(m["files"][0]["path"].as_str().unwrap())
                .display()
                .to_string();
            let inside = [
                out.join("_manifest.json").display().to_string(),
                part,
                out.join("report").display().to_string(),
                out_s.clone(),
            ];
            let target = inside[rng.random_range(0..inside.len())].clone();
            let mut args: Vec<&str> = match rng.random_range(0..5) {
                0 => vec![
                    "eval-sts", "--model", &scorer, "--sts", &sts, "--json", &target,
                ],
                1 => vec![
                    "report", "--data", &out_s, "--freq", &freq, "--out", &target,
                ],
                2 => vec![
                    "filter",
                    "--data",
                    &out_s,
                    "--max",
                    "trigram_overlap=2",
                    "--out",
                    &target,
                ],
                3 => vec!["translate", "--model", &tiny, &text, "-o", &target],
                // Its own input, whatever else it is.
                _ => vec![
                    "eval-sts", "--model", &scorer, "--sts", &sts, "--json", &scorer,
                ],
            };
            if rng.random_bool(0.5) {
                args.push("--overwrite");
            }
            let before =
                std::fs::read(paraforge_tests::model("scorer-trigram").join("model.pfe")).unwrap();
            let (ok, err) = command(&args, limit);
            assert!(
                !ok,
                "seed {seed}: {args:?} wrote into an input or a finished output"
            );
            assert!(
                err.contains("refused even with --overwrite")
                    || err.contains("is the input")
                    || err.contains("lies inside")
                    || err.contains("must not be an input")
                    || err.contains("--overwrite replaces only"),
                "seed {seed}: {args:?}: {err}"
            );
            assert_eq!(
                std::fs::read(paraforge_tests::model("scorer-trigram").join("model.pfe")).unwrap(),
                before,
                "seed {seed}: the scorer changed"
            );
        }
        Fault::ResumeOtherData => {
            let ckpt = fresh("ckpt");
            let train = |data: &str, resume: bool, epochs: &str, name: &str| {
                let target = fresh(name);
                let mut args = vec![
                    "train",
                    "--model",
                    "trigram",
                    "--no-dev",
                    "--epochs",
                    epochs,
                    "--max-pairs",
                    "200",
                    "--data",
                    data,
                    "--checkpoint",
                    &ckpt,
                    "--out",
                    &target,
                ];
                if resume {
                    args.push("--resume");
                }
                command(&args, limit)
            };
            let (ok, err) = train(&out_s, false, "1", "m1");
            assert!(ok, "seed {seed}: {err}");
            let other = fresh("other");
            let (ok, err) = command(
                &[
                    "filter",
                    "--data",
                    &out_s,
                    "--max",
                    "trigram_overlap=0.9",
                    "--out",
                    &other,
                ],
                limit,
            );
            assert!(ok, "seed {seed}: {err}");
            let (ok, err) = train(&other, true, "2", "m2");
            assert!(
                !ok && err.contains("the training data (--data)"),
                "seed {seed}: resumed on other data: {err}"
            );
            let (ok, err) = train(&out_s, true, "2", "m3");
            assert!(ok, "seed {seed}: the same data did not resume: {err}");
        }
        Fault::LongLineTree => {
            let tree = tree_model(dir, &out_s, limit);
            let pairs = dir.join(format!("long-{}.tsv", rng_name()));
            let long = "a".repeat(rng.random_range(32_000..39_000));
            std::fs::write(
                &pairs,
                format!(
                    "p0\t{long} .\ta man is playing .\np1\ta man plays .\ta man is playing .\n"
                ),
            )
            .unwrap();
            let job = dir.join(format!("long-{}", rng_name()));
            let toml = dir.join(format!("long-{}.toml", rng_name()));
            std::fs::write(
                &toml,
                format!(
                    "[job]\nname = \"long\"\noutput = \"{}\"\n\n[input]\npaths = [\"{}\"]\nformat = \"pairs\"\nid_column = 0\nreference_column = 1\ntranslation_column = 2\nmax_chars = 40000\n\n[scoring]\nmodel = \"{}\"\n\n[coordinator]\nlisten = \"127.0.0.1:0\"\nmetrics = \"127.0.0.1:0\"\n",
                    job.display(),
                    pairs.display(),
                    tree.display()
                ),
            )
            .unwrap();
            let (ok, err) = command(&["run", "--config", toml.to_str().unwrap()], limit);
            assert!(
                ok,
                "seed {seed}: a long line through a tree-rnn scorer: {err}"
            );
            assert_eq!(dataset_ids(&job), ["p0", "p1"], "seed {seed}");
        }
        _ => unreachable!("{fault:?} is not done to a finished output"),
    }
}

/// A tree-rnn model of the round's output (initial weights: only its
/// parser matters here), made once per round directory.
fn tree_model(dir: &Path, data: &str, limit: Duration) -> PathBuf {
    let tree = dir.join("tree-model");
    if !tree.join("config.json").is_file() {
        let (ok, err) = command(
            &[
                "train",
                "--model",
                "tree-rnn",
                "--no-dev",
                "--epochs",
                "0",
                "--min-word-count",
                "1",
                "--data",
                data,
                "--out",
                tree.to_str().unwrap(),
            ],
            limit,
        );
        assert!(ok, "{err}");
    }
    tree
}

/// A name no earlier step of the round used.
fn rng_name() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn faults_short() {
    let (injected, _) = round(
        1,
        &[
            Fault::OtherModel,
            Fault::KillWorker,
            Fault::KillCoordinator,
            Fault::BlockStorage,
            Fault::ChangeInput,
            Fault::SecondJob,
            Fault::ForgeCompletion,
            Fault::PauseWorker,
            Fault::DamagePart,
            Fault::KillRescore,
            Fault::KillFilter,
            Fault::KillBootstrap,
            Fault::TwoRescores,
            Fault::OutputAtInput,
            Fault::ResumeOtherData,
            Fault::LongLineTree,
        ],
        3000,
    );
    eprintln!("injected and survived: {injected:?}");
    assert!(
        injected.len() == ALL.len() + AFTER.len(),
        "the job finished before every fault could be injected: {injected:?}"
    );
}

#[test]
#[ignore = "long: run by `make soak`"]
fn soak() {
    let rounds: u64 = std::env::var("PARAFORGE_SOAK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let lines = std::env::var("PARAFORGE_SOAK_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let mut total: HashMap<Fault, usize> = HashMap::new();
    let mut incomplete = 0;
    // PARAFORGE_SOAK_FIRST=N starts at round N (to replay one seed).
    let first: u64 = std::env::var("PARAFORGE_SOAK_FIRST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for r in first..first + rounds {
        let t = Instant::now();
        let (inj, inc) = round(1000 + r, &[], lines);
        for (k, v) in &inj {
            *total.entry(*k).or_default() += v;
        }
        incomplete += inc;
        eprintln!(
            "round {}/{rounds}: {inj:?}, {inc} incomplete run(s) refused, survived in {:.0?}",
            r + 1,
            t.elapsed()
        );
    }
    let n: usize = total.values().sum();
    eprintln!("soak: {rounds} rounds, {n} faults injected and survived or refused: {total:?}; {incomplete} incomplete runs exited non-zero without _SUCCESS and were resumed; 0 pairs lost or duplicated");
}
