//! Never report success on incomplete or wrong output, tested through
//! the `paraforge` binary and the engine's public API: the input is never
//! the output, a failed run leaves no partial output, compressed input is
//! decompressed, options have upper bounds, and a legacy 8-bit encoding is
//! named once instead of failing every line silently.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use paraforge_nmt::{GenerateOptions, LoadOptions, NmtError, Translator};
use paraforge_tests::{model, paraforge_bin, paraforge_ok};

const CZECH: &str = "Dobrý den.\nMuž jede na kole.\nKočka spí na stole.\n";

/// Runs `paraforge` and kills it after `secs`: a guard that is missing
/// shows up as a failed assertion instead of a test that eats the machine.
fn paraforge(args: &[&str], secs: u64) -> Output {
    let mut child = Command::new(paraforge_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting paraforge");
    let t = Instant::now();
    while child.try_wait().expect("waiting for paraforge").is_none() {
        if t.elapsed() > Duration::from_secs(secs) {
            child.kill().expect("killing paraforge");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child
        .wait_with_output()
        .expect("reading paraforge's output");
    assert!(
        t.elapsed() <= Duration::from_secs(secs),
        "paraforge {args:?} still ran after {secs} s (killed)"
    );
    o
}

/// `paraforge translate` with the tiny model, quick settings and `rest`.
fn translate(rest: &[&str], secs: u64) -> Output {
    let m = model("tiny-cs-en");
    let mut args = vec![
        "translate",
        "--model",
        m.to_str().unwrap(),
        "--max-new-tokens",
        "8",
    ];
    if !rest.contains(&"--threads") {
        args.extend_from_slice(&["--threads", "1"]);
    }
    args.extend_from_slice(rest);
    paraforge(&args, secs)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Names in `dir` other than `keep`: a leftover temporary file shows here.
fn strays(dir: &Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect()
}

#[test]
fn translate_refuses_to_write_over_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, CZECH).unwrap();
    let link = dir.path().join("link.txt");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    let hard = dir.path().join("hard.txt");
    std::fs::hard_link(&input, &hard).unwrap();
    let i = input.to_str().unwrap();
    for out in [&input, &link, &hard] {
        let o = translate(&["--beam", "1", "-o", out.to_str().unwrap(), i], 60);
        assert!(!o.status.success(), "-o {} succeeded", out.display());
        let e = stderr(&o);
        assert!(e.contains("is the input"), "{e}");
        assert_eq!(std::fs::read_to_string(&input).unwrap(), CZECH);
    }
    // The other way round: the input named through the link.
    let o = translate(&["--beam", "1", "-o", i, link.to_str().unwrap()], 60);
    assert!(!o.status.success());
    assert_eq!(std::fs::read_to_string(&input).unwrap(), CZECH);
}

#[test]
fn translate_replaces_its_output_only_when_it_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    std::fs::write(&out, "earlier output\n").unwrap();
    // Every line fails (Windows-1250 Czech), so nothing was translated:
    // an error, after the output was written, and the earlier output stays.
    let input = dir.path().join("cp1250.txt");
    std::fs::write(
        &input,
        b"Dobr\xfd den.\nP\xf8\xedli\x9a \x9elu\x9ctou\xe8k\xfd k\xf9\xf2.\n",
    )
    .unwrap();
    let o = translate(
        &[
            "--beam",
            "1",
            "-o",
            out.to_str().unwrap(),
            "--overwrite",
            input.to_str().unwrap(),
        ],
        60,
    );
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("UTF-8") || stderr(&o).contains("8-bit"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "earlier output\n");
    assert_eq!(
        strays(dir.path(), &["out.txt", "cp1250.txt"]),
        Vec::<String>::new()
    );

    // A good run replaces it, told to; untold, it refuses.
    let input = dir.path().join("in.txt");
    std::fs::write(&input, CZECH).unwrap();
    let good = |extra: &[&str]| {
        let mut args = vec![
            "--beam",
            "1",
            "-o",
            out.to_str().unwrap(),
            input.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        translate(&args, 60)
    };
    let o = good(&[]);
    assert!(
        !o.status.success() && stderr(&o).contains("--overwrite"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "earlier output\n");
    let o = good(&["--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert_eq!(
        strays(dir.path(), &["out.txt", "cp1250.txt", "in.txt"]),
        Vec::<String>::new()
    );
}

#[test]
fn translate_decompresses_gz_and_zst_input() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("in.txt");
    std::fs::write(&plain, CZECH).unwrap();
    let gz = dir.path().join("in.txt.gz");
    let mut e = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    e.write_all(CZECH.as_bytes()).unwrap();
    e.finish().unwrap();
    let zst = dir.path().join("in.txt.zst");
    std::fs::write(&zst, zstd::encode_all(CZECH.as_bytes(), 3).unwrap()).unwrap();
    let run = |p: &Path| {
        let o = translate(&["--beam", "1", p.to_str().unwrap()], 60);
        assert!(o.status.success(), "{}: {}", p.display(), stderr(&o));
        let err = stderr(&o);
        (String::from_utf8(o.stdout).unwrap(), err)
    };
    let (want, _) = run(&plain);
    assert_eq!(want.lines().count(), 3, "{want}");
    for p in [&gz, &zst] {
        let (got, err) = run(p);
        assert_eq!(got, want, "{}", p.display());
        assert!(!err.contains("UTF-8"), "{}: {err}", p.display());
    }
}

/// Every input line appears in --nbest output, an empty one as one empty row.
#[test]
fn translate_nbest_keeps_every_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "Dobrý den.\n\nJak se máš?\n").unwrap();
    let o = translate(
        &["--beam", "2", "--nbest", "2", input.to_str().unwrap()],
        60,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(lines, ["1", "1", "2", "3", "3"], "{out}");
}

#[test]
fn translate_bounds_beam_threads_batch_size_and_nbest() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "Dobrý den.\n").unwrap();
    let i = input.to_str().unwrap();
    for (args, names) in [
        (&["--beam", "10000"][..], ["--beam", "10000", "256"]),
        (&["--beam", "0"][..], ["--beam", "0", "at least 1"]),
        (
            &["--threads", "100000"][..],
            ["--threads", "100000", "cores"],
        ),
        (
            &["--batch-size", "1000000"][..],
            ["--batch-size", "1000000", "1024"],
        ),
        (
            &["--batch-size", "0"][..],
            ["--batch-size", "0", "at least 1"],
        ),
        (
            &["--beam", "2", "--nbest", "5"][..],
            ["--nbest", "5", "--beam (2)"],
        ),
        (
            &["--streams", "0"][..],
            ["--streams", "0", "between 1 and 64"],
        ),
        (
            &["--streams", "65"][..],
            ["--streams", "65", "between 1 and 64"],
        ),
        (
            &["--early-stopping", "soon"][..],
            ["--early-stopping", "soon", "true, false or never"],
        ),
    ] {
        let mut a = args.to_vec();
        a.push(i);
        let o = translate(&a, 20);
        let e = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded: {e}");
        for n in names {
            assert!(e.contains(n), "{args:?}: {n:?} not in {e}");
        }
    }
    // Threads are bounded in all: per stream x streams.
    let t = paraforge_job::config::max_threads().to_string();
    let o = translate(&["--threads", &t, "--streams", "2", i], 20);
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains(&format!("--threads {t} x --streams 2")) && e.contains("cores"),
        "{e}"
    );
    // The largest allowed values still work.
    let o = translate(
        &["--beam", "256", "--nbest", "256", "--batch-size", "1024", i],
        120,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 256);
}

/// `paraforge translate --timing` with `args` on the tiny model over the
/// first `lines` parity sentences: the output and the timing line.
fn translate_timed(lines: usize, args: &[&str]) -> (String, serde_json::Value) {
    let text = std::fs::read_to_string(paraforge_tests::data("parity-cs.txt")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (input, out) = (dir.path().join("in.txt"), dir.path().join("out.txt"));
    std::fs::write(
        &input,
        text.lines().take(lines).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let m = model("tiny-cs-en");
    let mut all = vec![
        "translate",
        "--model",
        m.to_str().unwrap(),
        "--threads",
        "1",
        "--timing",
    ];
    all.extend_from_slice(args);
    all.extend([input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let o = paraforge(&all, 60);
    let e = stderr(&o);
    assert!(o.status.success(), "{args:?}: {e}");
    let line = e.lines().last().unwrap_or_default();
    let v = serde_json::from_str(line).unwrap_or_else(|_| panic!("{e}"));
    (std::fs::read_to_string(out).unwrap(), v)
}

/// `--early-stopping` reaches the search: `true` stops a sentence as soon
/// as --beam hypotheses are finished, `never` keeps going longest. The
/// hidden `--timing` line counts the decoder rows run.
#[test]
fn translate_early_stopping_changes_how_long_the_search_runs() {
    let rows = |rule: &str| -> u64 {
        let (_, v) = translate_timed(20, &["--max-new-tokens", "32", "--early-stopping", rule]);
        v["decoder_rows"].as_u64().unwrap()
    };
    let (t, f, n) = (rows("true"), rows("false"), rows("never"));
    assert!(
        t < f && f < n,
        "decoder rows: true {t}, false {f}, never {n}"
    );
}

/// The benchmark's hidden `--warmup N` translates the first N lines once
/// before the timed run: the output and the timed counts are those of a
/// run without it.
#[test]
fn translate_warmup_leaves_the_output_and_the_timed_counts_alone() {
    let run = |warmup: &str| translate_timed(12, &["--max-new-tokens", "16", "--warmup", warmup]);
    let (cold, warm) = (run("0"), run("5"));
    assert_eq!(cold.0, warm.0, "output");
    assert_eq!(warm.1["sentences"], 12);
    assert_eq!(warm.1["warmup_sentences"], 5, "the warm-up ran");
    assert_eq!(cold.1["warmup_sentences"], 0);
    for k in ["decoder_calls", "decoder_rows"] {
        assert_eq!(cold.1[k], warm.1[k], "{k}: the warm-up was counted");
    }
}

#[test]
fn the_engine_refuses_a_beam_wider_than_the_vocabulary() {
    let mut t = Translator::load(
        &model("tiny-cs-en"),
        &LoadOptions {
            threads: 1,
            ..LoadOptions::default()
        },
    )
    .expect("test model");
    let vocab = t.config().target_vocab_size();
    let o = GenerateOptions {
        num_beams: vocab + 1,
        max_new_tokens: Some(2),
        ..GenerateOptions::default()
    };
    let e = t
        .translate(&["Dobrý den."], &o)
        .expect_err("a beam wider than the vocabulary");
    assert!(
        matches!(e, NmtError::BeamExceedsVocabulary { beam, vocab: v, .. } if beam == vocab + 1 && v == vocab),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(&(vocab + 1).to_string()) && msg.contains(&vocab.to_string()),
        "{msg}"
    );
}

#[test]
fn translate_names_a_legacy_encoding_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("mixed.txt");
    // 15 Windows-1250 lines and one ASCII line that translates.
    let mut bytes = Vec::new();
    for _ in 0..15 {
        bytes.extend_from_slice(b"Dobr\xfd den, \xe8lov\xecku.\n");
    }
    bytes.extend_from_slice(b"Ahoj.\n");
    std::fs::write(&input, bytes).unwrap();
    let o = translate(&["--beam", "1", input.to_str().unwrap()], 60);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 16);
    assert_eq!(e.matches("iconv -f cp1250 -t utf-8").count(), 1, "{e}");
    assert!(e.contains("Windows-1250"), "{e}");
    // Per-line reports stop after the first ten, then one count.
    assert_eq!(e.matches("mixed.txt:").count(), 10, "{e}");
    assert!(e.contains("15 of the 16 lines"), "{e}");
}

/// An output that is a device or a pipe is written in place: renaming a
/// finished temporary file over it (as for a regular file) replaced
/// `/dev/null` itself with a regular file. Tested on a FIFO, which is as
/// special as `/dev/null` and safe to lose.
#[test]
fn translate_writes_into_a_pipe_in_place() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, CZECH).unwrap();
    let fifo = dir.path().join("out.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a path in our own temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap_or_default())
    };
    let o = translate(
        &[
            "--beam",
            "1",
            input.to_str().unwrap(),
            "-o",
            fifo.to_str().unwrap(),
        ],
        60,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "the pipe was replaced by a {kind:?}");
    assert_eq!(reader.join().unwrap().lines().count(), 3);
}

/// `run --gpus` and `worker --device cuda:N` on a machine whose ONNX
/// Runtime has no CUDA provider fail at once, naming the device, before a
/// coordinator starts or the output is claimed. Where the runtime does have
/// CUDA, a GPU index no machine has (4095) is refused the same way: on a
/// one-GPU H100, `run --gpus 0,1` used to start the job, lose the cuda:1
/// worker at model load and report success on cuda:0 alone.
#[test]
fn gpus_that_cannot_run_are_refused_by_name_before_the_job_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = dir.path().join("job.toml");
    let demo = paraforge_tests::repo_root().join("pipeline-configs/demo.toml");
    let text = std::fs::read_to_string(&demo)
        .unwrap()
        .replace("\"out/demo\"", &format!("{:?}", out.display().to_string()));
    std::fs::write(&cfg, text).unwrap();
    let o = paraforge(
        &["run", "--config", cfg.to_str().unwrap(), "--gpus", "0,4095"],
        120,
    );
    let e = stderr(&o);
    assert!(!o.status.success(), "--gpus 0,4095 ran: {e}");
    assert!(
        !out.exists(),
        "the output was touched before the device check"
    );
    if e.contains("no CUDA execution provider") {
        assert!(e.contains("--gpus cuda:0"), "{e}");
    } else {
        // A CUDA runtime: GPU 0 may exist, 4095 does not; a library without
        // a usable driver fails on cuda:0 already.
        assert!(
            e.contains("--gpus cuda:4095") || e.contains("--gpus cuda:0"),
            "{e}"
        );
    }
    // Without --gpus, the config's model.device is checked the same way.
    let cuda_cfg = dir.path().join("cuda.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("device = \"cpu\""));
    std::fs::write(
        &cuda_cfg,
        text.replace("device = \"cpu\"", "device = \"cuda:4095\""),
    )
    .unwrap();
    let o = paraforge(&["run", "--config", cuda_cfg.to_str().unwrap()], 120);
    let e = stderr(&o);
    assert!(!o.status.success(), "model.device cuda:4095 ran: {e}");
    assert!(e.contains("model.device cuda:4095"), "{e}");
    assert!(!out.exists(), "the output was touched before the check");
    let o = paraforge(
        &[
            "worker",
            "--coordinator",
            "http://127.0.0.1:9",
            "--device",
            "cuda:3",
        ],
        60,
    );
    let e = stderr(&o);
    assert!(!o.status.success());
    assert!(e.contains("--device cuda:3") && e.contains("CUDA"), "{e}");
    let o = paraforge(
        &[
            "worker",
            "--coordinator",
            "http://127.0.0.1:9",
            "--device",
            "tpu",
        ],
        60,
    );
    assert!(
        stderr(&o).contains("--device tpu: unknown device"),
        "{}",
        stderr(&o)
    );
}

/// Pairs of common words as one Parquet file, `dir/data/part-0.parquet`.
fn pairs_dataset(dir: &Path) -> std::path::PathBuf {
    use paraforge_core::schema::{schema, PairFileWriter};
    use paraforge_core::{PairRow, RowsBuilder, Scorer};
    let rows = [
        ("a man plays a guitar", "a man is playing the guitar"),
        ("a woman slices an onion", "a woman is cutting an onion"),
        ("the cat sleeps", "a cat is sleeping"),
        ("a dog runs in the park", "the dog is running in a park"),
    ];
    let d = dir.join("data");
    std::fs::create_dir_all(&d).unwrap();
    let mut b = RowsBuilder::default();
    for (i, (r, t)) in rows.iter().enumerate() {
        b.push(&PairRow {
            id: format!("p{i}"),
            source: "s".into(),
            reference: r.to_string(),
            translation: t.to_string(),
            candidate_rank: 1,
            translation_score: Some(-0.5),
            source_len: Some(1),
            truncated: false,
            scores: Scorer::new(None).score(r, t),
        });
    }
    let f = d.join("part-0.parquet");
    let mut w = PairFileWriter::create(&f, schema(), &[]).unwrap();
    w.write(&b.finish()).unwrap();
    w.close().unwrap();
    f
}

/// `paraforge train`'s sizes and epochs have upper bounds, checked before
/// anything is read or allocated: each error names the option and its
/// limit (before, `--word-dim 100000000` aborted on an allocation failure
/// and `--epochs` near u64::MAX overflowed).
#[test]
fn train_bounds_dimensions_layers_and_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let data = pairs_dataset(dir.path());
    let out = dir.path().join("m");
    for (opt, value, limit) in [
        ("--word-dim", "100000000", "8192"),
        ("--hidden", "10000000", "8192"),
        ("--trigram-dim", "100000000", "8192"),
        ("--layers", "1000000000", "64"),
        ("--epochs", "18446744073709551615", "10000"),
        ("--batch-size", "100000000000", "1000000"),
        ("--shuffle-buffer", "100000000000", "10000000"),
        // Finite, and a meaningless model before (rc 0).
        ("--margin", "1e30", "at most 2"),
        ("--lr", "1e30", "at most 1"),
    ] {
        let mut args = vec![
            "train",
            "--model",
            "lstm",
            "--min-word-count",
            "1",
            "--no-dev",
            "--data",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            opt,
            value,
        ];
        if opt != "--word-dim" {
            args.extend(["--word-dim", "8"]);
        }
        let o = paraforge(&args, 60);
        let e = stderr(&o);
        assert!(
            o.status.code().is_some(),
            "{opt} {value}: killed by a signal: {e}"
        );
        assert!(!o.status.success(), "{opt} {value} succeeded");
        assert!(e.contains(opt) && e.contains(limit), "{opt} {value}: {e}");
        assert!(!out.exists(), "{opt} {value}: a model was written");
    }
}

/// `train`, `export-vectors` and `lm-train` leave an existing `--out` alone
/// unless told `--overwrite`, and never write over (or into, or around)
/// their own inputs, even then; a replaced output leaves no temporary file.
#[test]
fn outputs_never_replace_existing_files_or_inputs_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let data_file = pairs_dataset(dir.path());
    let d = data_file.parent().unwrap().to_path_buf();
    let data_bytes = std::fs::read(&data_file).unwrap();
    let train = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--model",
            "trigram",
            "--trigram-dim",
            "8",
            "--min-trigram-count",
            "1",
            "--epochs",
            "1",
            "--no-dev",
            "--data",
            data_file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        paraforge(&args, 120)
    };
    // Another dataset's Parquet file, a TSV and a MarianMT directory.
    let parquet = dir.path().join("other.parquet");
    std::fs::write(&parquet, &data_bytes).unwrap();
    let tsv = dir.path().join("pairs.tsv");
    std::fs::write(&tsv, "a\tb\n").unwrap();
    let marian = dir.path().join("opus-mt");
    std::fs::create_dir_all(&marian).unwrap();
    std::fs::write(marian.join("config.json"), "{\"model_type\": \"marian\"}").unwrap();
    for out in [&parquet, &tsv, &marian] {
        let o = train(out, &[]);
        let e = stderr(&o);
        assert!(!o.status.success(), "--out {} was replaced", out.display());
        assert!(
            e.contains(out.to_str().unwrap()) && e.contains("--overwrite"),
            "{e}"
        );
    }
    assert_eq!(std::fs::read(&parquet).unwrap(), data_bytes);
    assert_eq!(std::fs::read_to_string(&tsv).unwrap(), "a\tb\n");
    assert!(marian.join("config.json").is_file());
    // Told to, it replaces a model, never a file of another kind; a
    // replaced model leaves nothing beside it but its checkpoint and card.
    let o = train(&tsv, &["--overwrite"]);
    assert!(!o.status.success(), "the TSV was replaced by a model");
    assert!(
        stderr(&o).contains("is a text file, not a model"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&tsv).unwrap(), "a\tb\n");
    let model = dir.path().join("m0.pfe");
    assert!(train(&model, &[]).status.success());
    let o = train(&model, &["--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    paraforge_core::Model::load(&model).unwrap();
    assert_eq!(
        strays(
            dir.path(),
            &[
                "data",
                "other.parquet",
                "pairs.tsv",
                "m0.pfe",
                "m0.pfe.ckpt",
                "m0.pfe.README.md",
                "opus-mt"
            ]
        ),
        Vec::<String>::new()
    );
    assert!(dir.path().join("m0.pfe.README.md").is_file());
    // The data itself, or the directory that holds it: never.
    for out in [data_file.clone(), d.clone()] {
        let o = train(&out, &["--overwrite"]);
        let e = stderr(&o);
        assert!(!o.status.success(), "--out {} succeeded", out.display());
        assert!(e.contains("--data"), "{e}");
    }
    assert_eq!(std::fs::read(&data_file).unwrap(), data_bytes);
    assert_eq!(strays(&d, &["part-0.parquet"]), Vec::<String>::new());

    // export-vectors onto its own model, even with --overwrite: refused.
    let glove = paraforge_tests::repo_root().join("data/vectors/glove.6B.50d.top25k.txt.gz");
    let m = dir.path().join("word.pfe");
    paraforge_ok(&[
        "train".as_ref(),
        "--model".as_ref(),
        "word".as_ref(),
        "--epochs".as_ref(),
        "0".as_ref(),
        "--no-dev".as_ref(),
        "--init-vectors".as_ref(),
        glove.as_os_str(),
        "--data".as_ref(),
        data_file.as_os_str(),
        "--out".as_ref(),
        m.as_os_str(),
    ]);
    let model_bytes = std::fs::read(&m).unwrap();
    let export = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "export-vectors",
            "--model",
            m.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        paraforge(&args, 60)
    };
    let o = export(&m, &["--overwrite"]);
    assert!(!o.status.success(), "export-vectors wrote over its model");
    assert!(stderr(&o).contains("--model"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&m).unwrap(), model_bytes);
    let v = dir.path().join("vectors.txt");
    assert!(export(&v, &[]).status.success());
    let o = export(&v, &[]);
    assert!(!o.status.success(), "vectors.txt was replaced");
    assert!(stderr(&o).contains("--overwrite"), "{}", stderr(&o));
    assert!(export(&v, &["--overwrite"]).status.success());

    // lm-train onto its input.
    let text = dir.path().join("refs.txt");
    std::fs::write(&text, "a man plays\nthe cat sleeps\n").unwrap();
    let t = text.to_str().unwrap();
    let o = paraforge(&["lm-train", t, "-o", t, "--overwrite"], 60);
    assert!(!o.status.success(), "lm-train wrote over its input");
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "a man plays\nthe cat sleeps\n"
    );
    // train-classifier onto a directory that holds something.
    let o = paraforge(
        &[
            "train-classifier",
            "--data",
            data_file.to_str().unwrap(),
            "--out",
            marian.to_str().unwrap(),
        ],
        60,
    );
    assert!(
        !o.status.success(),
        "train-classifier replaced {}",
        marian.display()
    );
    assert!(stderr(&o).contains("--overwrite"), "{}", stderr(&o));
    assert!(marian.join("config.json").is_file());
}

/// A training option the chosen encoder does not read is refused, naming
/// the option and the encoder, before anything is read: before, `--model
/// word --negatives mix` trained with max negatives and recorded nothing
/// of it.
#[test]
fn train_refuses_an_option_its_encoder_does_not_use() {
    let dir = tempfile::tempdir().unwrap();
    let data = pairs_dataset(dir.path());
    let out = dir.path().join("m");
    for (model, opt, value) in [
        ("word", "--negatives", "mix"),
        ("word", "--lambda-w", "0.001"),
        ("trigram", "--scramble", "0.3"),
        ("word", "--trigram-dim", "8"),
        ("trigram", "--min-word-count", "1"),
        ("lstm", "--layers", "2"),
        ("lstm", "--precision", "bf16"),
        ("lstm", "--lambda-kl", "0.1"),
        // Shuffled words are not the leaves of their parse.
        ("tree-rnn", "--scramble", "0.3"),
        ("lstm", "--parse-cache", "trees.jsonl"),
        // Read only with --min-word-count: --init-vectors fixes the words.
        ("word", "--max-words", "10"),
    ] {
        let o = paraforge(
            &[
                "train",
                "--model",
                model,
                "--no-dev",
                "--data",
                data.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                opt,
                value,
            ],
            60,
        );
        let e = stderr(&o);
        assert!(!o.status.success(), "{model} {opt} succeeded");
        assert!(
            e.contains(&format!("{opt} is not used by --model {model}")),
            "{model} {opt}: {e}"
        );
        assert!(!out.exists(), "{model} {opt}: a model was written");
    }
}

/// tree-rnn's `--parse-cache`: the first run writes the trees it parsed,
/// a second run (another seed) reads them and parses nothing, and a damaged
/// file is refused naming its line before anything is trained.
#[test]
fn tree_rnn_reads_the_trees_an_earlier_run_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let data = pairs_dataset(dir.path());
    let cache = dir.path().join("trees.jsonl");
    let train_with = |cache: &Path, seed: &str, out: &str| {
        let out = dir.path().join(out);
        let o = paraforge(
            &[
                "train",
                "--model",
                "tree-rnn",
                "--no-dev",
                "--epochs",
                "1",
                "--min-word-count",
                "1",
                "--seed",
                seed,
                "--data",
                data.to_str().unwrap(),
                "--parse-cache",
                cache.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            120,
        );
        (o, out)
    };
    let train = |seed: &str, out: &str| train_with(&cache, seed, out);
    let (o, _) = train("1", "m1");
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("trees: 8 sentences parsed"), "{out}");
    let lines = std::fs::read_to_string(&cache).unwrap().lines().count();
    assert_eq!(lines, 1 + 8, "a header and the 8 sentences' trees");

    let (o, _) = train("2", "m2");
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("trees: 0 sentences parsed"), "{out}");
    assert!(
        stderr(&o).contains("8 parse trees read from"),
        "{}",
        stderr(&o)
    );

    let text = std::fs::read_to_string(&cache).unwrap();
    std::fs::write(&cache, text.replacen("[[", "[[9,", 1)).unwrap();
    let (o, m3) = train("3", "m3");
    assert!(!o.status.success());
    assert!(stderr(&o).contains("line 2"), "{}", stderr(&o));
    assert!(!m3.exists(), "a model was written");

    // A file that cannot be written (its directory is missing) fails the
    // run at its start, not after an epoch of parsing.
    std::fs::remove_file(&cache).unwrap();
    std::fs::create_dir(&cache).unwrap();
    let (o, m4) = train_with(&cache.join("missing").join("trees.jsonl"), "4", "m4");
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--parse-cache"), "{}", stderr(&o));
    assert!(!m4.exists(), "a model was written");
}

/// `eval-transfer --fine-tune --vectors` reads the vectors once, for the
/// frozen runs and the model it fine-tunes alike: given through a named
/// pipe that can be read once, it finishes (it read them twice before, and
/// waited for ever on the second open).
#[test]
fn eval_transfer_fine_tune_reads_its_vectors_once() {
    let dir = tempfile::tempdir().unwrap();
    paraforge_tests::sick_slice(dir.path(), [200, 50, 100]);
    let fifo = dir.path().join("glove.txt.gz");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let glove = paraforge_tests::repo_root().join("data/vectors/glove.6B.50d.top25k.txt.gz");
    let writer = {
        let fifo = fifo.clone();
        // Opening blocks until paraforge opens the pipe to read.
        std::thread::spawn(move || std::fs::write(&fifo, std::fs::read(glove).unwrap()))
    };
    let o = paraforge(
        &[
            "eval-transfer",
            "--vectors",
            fifo.to_str().unwrap(),
            "--tasks",
            dir.path().to_str().unwrap(),
            "--fine-tune",
            "--fine-tune-epochs",
            "1",
        ],
        90,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("supervised"));
    writer.join().unwrap().unwrap();
}

/// A command whose reader has gone (`paraforge eval-sts ... | head -1`)
/// ends by SIGPIPE, as other Unix tools do, not by a panic in `println!`
/// (exit 101 before): the read end is closed before the command prints.
#[test]
fn a_closed_stdout_ends_a_command_by_sigpipe_not_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let glove = paraforge_tests::repo_root().join("data/vectors/glove.6B.50d.top25k.txt.gz");
    let mut child = Command::new(paraforge_bin())
        .args(["eval-sts", "--vectors", glove.to_str().unwrap()])
        .current_dir(paraforge_tests::repo_root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.signal(), Some(13), "{:?}: {err}", o.status);
}

/// A lone Parquet file of four pairs whose texts end in `tag`: the same row
/// count as [`pairs_dataset`]'s, other content.
fn pairs_file(path: &Path, tag: &str) {
    use paraforge_core::schema::{schema, PairFileWriter};
    use paraforge_core::{PairRow, RowsBuilder, Scorer};
    let mut b = RowsBuilder::default();
    for i in 0..4 {
        let (r, t) = (
            format!("a man plays {tag} {i}"),
            format!("a man is playing {tag} {i}"),
        );
        b.push(&PairRow {
            id: format!("q{i}"),
            source: "s".into(),
            reference: r.clone(),
            translation: t.clone(),
            candidate_rank: 1,
            translation_score: Some(-0.5),
            source_len: Some(1),
            truncated: false,
            scores: Scorer::new(None).score(&r, &t),
        });
    }
    let mut w = PairFileWriter::create(path, schema(), &[]).unwrap();
    w.write(&b.finish()).unwrap();
    w.close().unwrap();
}

/// `train --resume` goes on only on the data and init vectors the
/// checkpoint was made on, by content: a checkpoint of 4 pairs resumed on
/// 4 other pairs said "resumed after epoch 1" and exit 0 before. The
/// refusal names the input that differs; the same data resumes.
#[test]
fn train_resumes_only_on_the_same_data_and_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    let b = dir.path().join("b.parquet");
    pairs_file(&a, "guitar");
    pairs_file(&b, "violin");
    let vectors = |name: &str, x: f32| {
        let p = dir.path().join(name);
        let words = ["a", "man", "plays", "is", "playing", "guitar", "violin"];
        let text: String = words
            .iter()
            .enumerate()
            .map(|(i, w)| format!("{w} {x} {} 0.5\n", i as f32 * 0.1))
            .collect();
        std::fs::write(&p, text).unwrap();
        p
    };
    let (v1, v2) = (vectors("v1.txt", 0.1), vectors("v2.txt", 0.2));
    let ckpt = dir.path().join("ckpt");
    let train = |data: &Path, v: &Path, epochs: &str, resume: bool, out: &str| {
        let (data, v) = (data.display().to_string(), v.display().to_string());
        let ckpt = ckpt.display().to_string();
        let out = dir.path().join(out).display().to_string();
        let mut args = vec![
            "train",
            "--model",
            "word",
            "--no-dev",
            "--epochs",
            epochs,
            "--batch-size",
            "2",
            "--megabatch",
            "1",
            "--data",
            &data,
            "--init-vectors",
            &v,
            "--checkpoint",
            &ckpt,
            "--out",
            &out,
        ];
        if resume {
            args.push("--resume");
        }
        paraforge(&args, 120)
    };
    let o = train(&a, &v1, "1", false, "m1.pfe");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = train(&b, &v1, "2", true, "m2.pfe");
    assert!(!o.status.success(), "resumed on other data");
    assert!(
        stderr(&o).contains("the training data (--data) differs by content"),
        "{}",
        stderr(&o)
    );
    let o = train(&a, &v2, "2", true, "m3.pfe");
    assert!(!o.status.success(), "resumed from other vectors");
    assert!(
        stderr(&o).contains("--init-vectors differs by content"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("NeuralKey") && !stderr(&o).contains("RunKey"));
    let o = train(&a, &v1, "2", true, "m4.pfe");
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("resumed after epoch 1"), "{said}");
}

/// Random and adversarial lines through every path that reaches Link
/// Grammar (`parse`, the tree encoder in `embed`, a job scoring with a
/// tree-rnn model): none may abort. A 40,000-character word corrupted the
/// library's heap (rc 134) in each before.
#[test]
fn adversarial_lines_never_abort_the_parser_or_the_tree_encoder() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let data = pairs_dataset(dir.path());
    let tree = dir.path().join("tree");
    let o = paraforge(
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
            data.to_str().unwrap(),
            "--out",
            tree.to_str().unwrap(),
        ],
        120,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mut lines = vec![
        // Past the ~32,700 characters that broke the library, within the
        // job's input bound below.
        format!("{} .", "a".repeat(39_000)),
        // Over the parser's 60 tokens; the tree is evaluated a level per
        // step, so 5,000 tokens cost this test a minute.
        "a ".repeat(300),
        "ctrl \u{7}\u{1b}[31m red".to_string(),
        "((((( ]]]] (S (NP) ))) [[".to_string(),
        "!!!!verbosity=9 !limit=100000".to_string(),
        "a man plays a guitar .".to_string(),
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    for _ in 0..20 {
        let n = rng.random_range(1..3_000);
        lines.push(
            (0..n)
                .map(|_| char::from_u32(rng.random_range(0x20..0x3000)).unwrap_or('x'))
                .collect(),
        );
    }
    let input = dir.path().join("adversarial.txt");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let o = paraforge(&["parse", input.to_str().unwrap()], 300);
    assert_eq!(
        o.status.code(),
        Some(1),
        "parse: {:?} {}",
        o.status,
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("line 1: not parsed: 39002 bytes, over the parser's limit of 2000"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        lines.len()
    );
    let npy = dir.path().join("e.npy");
    let o = paraforge(
        &[
            "embed",
            "--model",
            tree.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--out",
            npy.to_str().unwrap(),
        ],
        300,
    );
    assert!(o.status.success(), "embed: {:?} {}", o.status, stderr(&o));
    // A job whose scorer is the tree encoder, with the long line inside
    // its input's bound (the whole process died before, every retry too).
    let pairs = dir.path().join("pairs.tsv");
    let rows: Vec<String> = lines
        .iter()
        .take(4)
        .enumerate()
        .map(|(i, l)| format!("p{i}\t{}\ta man is playing .", l.replace('\t', " ")))
        .collect();
    std::fs::write(&pairs, rows.join("\n") + "\n").unwrap();
    let toml = dir.path().join("job.toml");
    std::fs::write(
        &toml,
        format!(
            "[job]\nname = \"long\"\noutput = \"{}\"\n\n[input]\npaths = [\"{}\"]\nformat = \"pairs\"\nid_column = 0\nreference_column = 1\ntranslation_column = 2\nmax_chars = 40000\n\n[scoring]\nmodel = \"{}\"\n\n[coordinator]\nlisten = \"127.0.0.1:0\"\nmetrics = \"127.0.0.1:0\"\n",
            dir.path().join("out").display(),
            pairs.display(),
            tree.display()
        ),
    )
    .unwrap();
    let o = paraforge(&["run", "--config", toml.to_str().unwrap()], 300);
    assert!(o.status.success(), "run: {:?} {}", o.status, stderr(&o));
    assert!(dir.path().join("out/_SUCCESS").is_file());
}

/// Every reader of text lines holds at most 1 MiB of a line and names the
/// line past it: one 300 MB line made `lm-train` peak at 1.48 GB and write
/// a 900 MB model (exit 0), and the vectors readers read it whole. Vector
/// rows of the wrong width and repeated words are said, not skipped in
/// silence; a Parquet file given as a PPDB file is named as such.
#[test]
fn readers_bound_their_lines_and_say_what_they_skip() {
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("long.txt");
    std::fs::write(
        &long,
        format!("a short line\n{}\nanother\n", "x".repeat(2 << 20)),
    )
    .unwrap();
    let arpa = dir.path().join("lm.arpa");
    let o = paraforge(
        &[
            "lm-train",
            long.to_str().unwrap(),
            "-o",
            arpa.to_str().unwrap(),
        ],
        60,
    );
    assert!(!o.status.success(), "lm-train read a 2 MiB line");
    assert!(
        stderr(&o).contains("line 2: 2097153 bytes, more than the 1048576 a line may hold"),
        "{}",
        stderr(&o)
    );
    assert!(!arpa.exists());
    let data = pairs_dataset(dir.path());
    let out = dir.path().join("m.pfe");
    let train = |vectors: &Path| {
        paraforge(
            &[
                "train",
                "--model",
                "word",
                "--epochs",
                "0",
                "--no-dev",
                "--data",
                data.to_str().unwrap(),
                "--init-vectors",
                vectors.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--overwrite",
            ],
            60,
        )
    };
    let vectors = dir.path().join("v.txt");
    std::fs::write(
        &vectors,
        format!(
            "man 0.1 0.2\n{} 0.1 0.2\ncat 0.3 0.4\n",
            "x".repeat(2 << 20)
        ),
    )
    .unwrap();
    let o = train(&vectors);
    assert!(!o.status.success(), "the vectors' 2 MiB line was read");
    assert!(
        stderr(&o).contains("line 2") && stderr(&o).contains("a line may hold"),
        "{}",
        stderr(&o)
    );
    std::fs::write(
        &vectors,
        "man 0.1 0.2\nman 0.5 0.5\nthe 0.1\ncat 0.3 0.4\na 0.1 0.1\n",
    )
    .unwrap();
    let o = train(&vectors);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("wrong_dimension=1") && e.contains("repeated_words=1"),
        "{e}"
    );
    let lexicon = dir.path().join("lexicon.parquet");
    std::fs::copy(&data, &lexicon).unwrap();
    let o = paraforge(
        &[
            "train",
            "--model",
            "paragram-words",
            "--data",
            lexicon.to_str().unwrap(),
            "--init-vectors",
            vectors.to_str().unwrap(),
            "--out",
            dir.path().join("p.txt").to_str().unwrap(),
        ],
        60,
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("a Parquet file, not a PPDB text file"),
        "{}",
        stderr(&o)
    );
}

/// `eval-specificity` on a small fixture: the Length baseline's News
/// accuracy and Yelp Spearman as computed by hand (threshold 2.5 from
/// training: 2 of 3 test sentences right; lengths rank Yelp's ratings
/// exactly), a model's and vectors' rows present, and a directory without
/// any set refused naming the flag.
#[test]
fn eval_specificity_scores_the_fixture_as_computed_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let w = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    w(
        "news-train.sentences.txt",
        "a man\na man is\na man is here now\na man is here now again\n",
    );
    w("news-train.labels.txt", "1\n1\n2\n2\n");
    w(
        "news-test.sentences.txt",
        "a dog\nthe old dog sleeps in the sun\nthe dog runs\n",
    );
    w("news-test.labels.txt", "1\n-1\n-1\n");
    w(
        "yelp.sentences.txt",
        "good\nthe soup was cold and the waiter rude\nnice place\n",
    );
    w("yelp.scores.txt", "0.1\n0.9\n0.5\n");
    let glove = paraforge_tests::repo_root().join("data/vectors/glove.6B.50d.top25k.txt.gz");
    let out = paraforge_ok(&[
        "eval-specificity".as_ref(),
        "--data".as_ref(),
        dir.path().as_os_str(),
        "--baseline".as_ref(),
        "length".as_ref(),
        "--baseline".as_ref(),
        "majority".as_ref(),
        "--model".as_ref(),
        model("scorer-trigram").as_os_str(),
        "--vectors".as_ref(),
        glove.as_os_str(),
        "--wordsum".as_ref(),
        model("scorer-trigram").as_os_str(),
    ]);
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("| {name}")))
            .unwrap_or_else(|| panic!("no {name} row in\n{out}"))
            .to_string()
    };
    // Training lengths 2, 3, 5, 6: the cut falls at 4; the test's "the dog
    // runs" (3 tokens, specific) is called general.
    assert_eq!(row("Length"), "| Length | 66.7 | 100.0 |");
    assert_eq!(row("Majority"), "| Majority | 33.3 | - |");
    assert!(row("scorer-trigram (").contains(", norm) |"), "{out}");
    assert!(
        row("glove.6B.50d.top25k.txt.gz (norm, sum)").contains('|'),
        "{out}"
    );
    // The sum of a mean's rows: on Yelp, where the rating rises with the
    // length, it ranks the ratings exactly, where the mean's norm does not.
    let wordsum = row("scorer-trigram (trigram, wordsum, norm)");
    assert!(wordsum.ends_with(" | 100.0 |"), "{out}");
    assert_ne!(
        wordsum.rsplit('|').nth(1),
        row("scorer-trigram (trigram, norm)").rsplit('|').nth(1),
        "{out}"
    );
    // The entailment analysis: equal-length pairs by judgement, a row per
    // model ("a small dog" and "a dog" differ in length: left out).
    w(
        "sick.txt",
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n1\tthe enormous black dog runs\tthe dog runs in parks\t4\tENTAILMENT\n2\ta small dog\ta dog\t4\tENTAILMENT\n3\ta cat sleeps\ta dog eats\t2\tNEUTRAL\n",
    );
    let out = paraforge_ok(&[
        "eval-specificity".as_ref(),
        "--data".as_ref(),
        dir.path().as_os_str(),
        "--model".as_ref(),
        model("scorer-trigram").as_os_str(),
        "--entailment".as_ref(),
        dir.path().join("sick.txt").as_os_str(),
    ]);
    assert!(
        out.contains(
            "| model | ENTAILMENT (1 pairs) | NEUTRAL (1 pairs) | CONTRADICTION (0 pairs) |"
        ),
        "{out}"
    );
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("| scorer-trigram (trigram, norm) | ") && last.ends_with(" | - |"),
        "{out}"
    );
    // A model that is not one table's mean has no such sum.
    let o = paraforge_tests::paraforge_cmd(&[
        "eval-specificity".as_ref(),
        "--data".as_ref(),
        dir.path().as_os_str(),
        "--wordsum".as_ref(),
        paraforge_tests::data("tiny-sentence-encoder").as_os_str(),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--wordsum takes a `train --model word`"),
        "{}",
        stderr(&o)
    );

    let empty = tempfile::tempdir().unwrap();
    let o = paraforge_tests::paraforge_cmd(&[
        "eval-specificity".as_ref(),
        "--data".as_ref(),
        empty.path().as_os_str(),
        "--baseline".as_ref(),
        "length".as_ref(),
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("--data") && e.contains("no specificity set"),
        "{e}"
    );
}
