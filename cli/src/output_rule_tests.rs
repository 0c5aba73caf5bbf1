//! The output rule over the whole CLI: every output flag of every
//! subcommand, found through clap, aimed at an input of the command, a
//! model directory, a finished job output, a path inside one, and an
//! unrelated existing file, with and without `--overwrite`. Each must be
//! refused (and touch nothing) unless the rule lets that artifact replace
//! what is there. A new output flag without a row here fails by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};
use paraforge_core::outputs::Artifact;

use crate::{dispatch, Cli};

/// Option names that name a path a command writes.
const OUTPUT_NAMES: [&str; 5] = ["out", "output", "json", "checkpoint", "parse-cache"];

/// The fixtures every row's arguments refer to (`{NAME}` in a row).
struct Fixture {
    _dir: tempfile::TempDir,
    paths: BTreeMap<&'static str, PathBuf>,
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn fixture() -> Fixture {
    use paraforge_core::schema::{schema, PairFileWriter};
    use paraforge_core::{PairRow, RowsBuilder, Scorer};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut paths = BTreeMap::new();
    let text = d.join("in.txt");
    std::fs::write(&text, "A man is playing a guitar.\nThe cat sleeps.\n").unwrap();
    paths.insert("TEXT", text);
    let vectors = d.join("vectors.txt");
    std::fs::write(&vectors, "man 0.1 0.2\ncat 0.3 0.4\nthe 0.5 0.1\n").unwrap();
    paths.insert("VECTORS", vectors);
    // A model the command reads, and another it does not.
    let model = d.join("scorer");
    copy_dir(&repo("models/scorer-trigram"), &model);
    paths.insert("MODEL", model.join("model.pfe"));
    paths.insert("MODEL_DIR", model);
    let other = d.join("other-model");
    copy_dir(&repo("models/scorer-trigram"), &other);
    paths.insert("OTHER_MODEL", other);
    // A finished dataset the command reads (pairs as a job writes them).
    let data = d.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut scorer = Scorer::new(None);
    let mut b = RowsBuilder::default();
    for i in 0..6 {
        let (a, t) = (
            format!("a man plays guitar {i}"),
            format!("a man plays a guitar {i}"),
        );
        b.push(&PairRow {
            id: format!("p{i}"),
            source: format!("muž hraje {i}"),
            reference: a.clone(),
            translation: t.clone(),
            candidate_rank: 1,
            translation_score: Some(-0.5),
            source_len: Some(4),
            truncated: false,
            scores: scorer.score(&a, &t),
        });
    }
    let mut w = PairFileWriter::create(&data.join("part-00000.parquet"), schema(), &[]).unwrap();
    w.write(&b.finish()).unwrap();
    w.close().unwrap();
    paraforge_core::dataset::testing::seal(&data, paraforge_core::layout::ManifestKind::Job);
    paths.insert("DATA", data);
    // A finished job output the command does not read.
    let done = d.join("done");
    std::fs::create_dir_all(done.join("shard=000000")).unwrap();
    std::fs::write(done.join("shard=000000/part-1.parquet"), "x").unwrap();
    std::fs::write(done.join("_job.json"), "{}").unwrap();
    std::fs::write(done.join("_manifest.json"), r#"{"kind":"job","files":[]}"#).unwrap();
    std::fs::write(done.join("_SUCCESS"), "").unwrap();
    paths.insert("DONE", done);
    let notes = d.join("notes.txt");
    std::fs::write(&notes, "my notes, not paraforge's\n").unwrap();
    paths.insert("NOTES", notes);
    paths.insert("NEW", d.join("new-output"));
    let spec = d.join("specificity");
    std::fs::create_dir(&spec).unwrap();
    std::fs::write(
        spec.join("yelp.sentences.txt"),
        "good\nthe soup was cold\nnice place\n",
    )
    .unwrap();
    std::fs::write(spec.join("yelp.scores.txt"), "0.1\n0.9\n0.5\n").unwrap();
    paths.insert("SPEC", spec);
    paths.insert("STS", repo("data/sts"));
    paths.insert("WORDS", repo("data/words"));
    paths.insert("SICK", repo("data/sts/sick2014"));
    paths.insert("FREQ", repo("data/freq/enwiki_vocab_top50k.txt"));
    Fixture { _dir: dir, paths }
}

/// One output flag: the command line (`{OUT}` where the flag's value
/// goes), what it writes there, and which fixture is one of its inputs.
struct Row {
    command: &'static str,
    flag: &'static str,
    args: &'static str,
    writes: Artifact,
    input: &'static str,
    /// Rows whose target the writer keeps using (checkpoint, parse cache):
    /// an existing one of its own kind is expected, so the rule applies as
    /// if `--overwrite` were always given.
    always_overwrites: bool,
}

const fn row(
    command: &'static str,
    flag: &'static str,
    args: &'static str,
    writes: Artifact,
    input: &'static str,
) -> Row {
    Row {
        command,
        flag,
        args,
        writes,
        input,
        always_overwrites: false,
    }
}

const ROWS: &[Row] = &[
    row(
        "translate",
        "--output",
        "translate --model {MODEL_DIR} {TEXT} --output {OUT}",
        Artifact::Text,
        "TEXT",
    ),
    row(
        "paraphrase",
        "--output",
        "paraphrase --model {MODEL_DIR} {TEXT} --output {OUT}",
        Artifact::Text,
        "TEXT",
    ),
    row(
        "eval-sts",
        "--json",
        "eval-sts --model {MODEL} --sts {STS} --json {OUT}",
        Artifact::Json,
        "MODEL",
    ),
    row(
        "eval-words",
        "--json",
        "eval-words --vectors {VECTORS} --words {WORDS} --json {OUT}",
        Artifact::Json,
        "VECTORS",
    ),
    row(
        "eval-specificity",
        "--json",
        "eval-specificity --data {SPEC} --baseline length --json {OUT}",
        Artifact::Json,
        "SPEC",
    ),
    row(
        "eval-paraphrase",
        "--json",
        "eval-paraphrase --model {MODEL_DIR} --data {DATA} --scorer {MODEL} --json {OUT}",
        Artifact::Json,
        "DATA",
    ),
    row(
        "eval-transfer",
        "--json",
        "eval-transfer --model {MODEL} --tasks {SICK} --json {OUT}",
        Artifact::Json,
        "MODEL",
    ),
    row(
        "export",
        "--out",
        "export --format glove --model {MODEL} --out {OUT}",
        Artifact::Vectors,
        "MODEL",
    ),
    row(
        "export-vectors",
        "--out",
        "export-vectors --model {MODEL} --out {OUT}",
        Artifact::Vectors,
        "MODEL",
    ),
    row(
        "train",
        "--out",
        "train --data {DATA} --model trigram --no-dev --out {OUT}",
        Artifact::Model,
        "DATA",
    ),
    Row {
        always_overwrites: true,
        ..row(
            "train",
            "--checkpoint",
            "train --data {DATA} --model trigram --no-dev --out {NEW} --checkpoint {OUT}",
            Artifact::Checkpoint,
            "DATA",
        )
    },
    Row {
        always_overwrites: true,
        ..row(
            "train",
            "--parse-cache",
            "train --data {DATA} --model tree-rnn --no-dev --out {NEW} --parse-cache {OUT}",
            Artifact::ParseCache,
            "DATA",
        )
    },
    row(
        "train-classifier",
        "--out",
        "train-classifier --data {DATA} --out {OUT}",
        Artifact::Model,
        "DATA",
    ),
    row(
        "lm-train",
        "--out",
        "lm-train {TEXT} --out {OUT}",
        Artifact::Arpa,
        "TEXT",
    ),
    row(
        "embed",
        "--out",
        "embed --model {MODEL} --input {TEXT} --out {OUT}",
        Artifact::Embeddings,
        "TEXT",
    ),
    row(
        "report",
        "--out",
        "report --data {DATA} --freq {FREQ} --out {OUT}",
        Artifact::Report,
        "DATA",
    ),
    row(
        "bin",
        "--out",
        "bin --data {DATA} --out {OUT}",
        Artifact::Dataset,
        "DATA",
    ),
    row(
        "filter",
        "--out",
        "filter --data {DATA} --min para_score=0.1 --out {OUT}",
        Artifact::Dataset,
        "DATA",
    ),
    row(
        "rescore",
        "--out",
        "rescore --data {DATA} --model {MODEL} --out {OUT}",
        Artifact::Dataset,
        "DATA",
    ),
    row(
        "lexicon",
        "--out",
        "lexicon --data {DATA} --out {OUT}",
        Artifact::Dataset,
        "DATA",
    ),
];

/// Every regular file under `dir` (or `dir` itself) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {
                for e in std::fs::read_dir(&p).unwrap() {
                    stack.push(e.unwrap().path());
                }
            }
            Ok(_) => {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
            Err(_) => {}
        }
    }
    out
}

#[test]
fn every_output_flag_of_every_command_follows_the_output_rule() {
    // Every output flag clap knows has a row, and every row a flag.
    let cli = Cli::command();
    let mut flags = Vec::new();
    for sub in cli.get_subcommands() {
        for arg in sub.get_arguments() {
            if let Some(long) = arg.get_long().filter(|l| OUTPUT_NAMES.contains(l)) {
                // `plan --json` prints; it names no path.
                if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
                    continue;
                }
                flags.push((sub.get_name().to_string(), format!("--{long}")));
            }
        }
    }
    let rows: Vec<(String, String)> = ROWS
        .iter()
        .map(|r| (r.command.to_string(), r.flag.to_string()))
        .collect();
    for f in &flags {
        assert!(
            rows.contains(f),
            "{} {}: an output flag without a row in the output rule's table (cli/src/output_rule_tests.rs)",
            f.0,
            f.1
        );
    }
    for r in &rows {
        assert!(flags.contains(r), "{} {}: a row for no flag", r.0, r.1);
    }

    let fx = fixture();
    let p = |k: &str| fx.paths[k].clone();
    let input = |r: &Row| p(r.input);
    type Scenario = (&'static str, fn(&Fixture, &Row) -> PathBuf);
    let scenarios: [Scenario; 6] = [
        ("an input of the command", |f, r| f.paths[r.input].clone()),
        ("a path inside an input", |f, r| {
            let i = &f.paths[r.input];
            if i.is_dir() {
                i.join("x")
            } else {
                i.parent().unwrap().join(i.file_name().unwrap()).join("x")
            }
        }),
        ("a model directory", |f, _| f.paths["OTHER_MODEL"].clone()),
        ("a finished job output", |f, _| f.paths["DONE"].clone()),
        ("a path inside a finished output", |f, _| {
            f.paths["DONE"].join("shard=000000/part-1.parquet")
        }),
        ("an unrelated existing file", |f, _| {
            f.paths["NOTES"].clone()
        }),
    ];
    let mut failures = Vec::new();
    for r in ROWS {
        for (what, target) in &scenarios {
            let out = target(&fx, r);
            for overwrite in [false, true] {
                let overwrite = overwrite || r.always_overwrites;
                // What the rule lets through: only a same-kind artifact
                // over an existing one, with --overwrite.
                let allowed = overwrite
                    && match *what {
                        "a model directory" => r.writes == Artifact::Model,
                        "a finished job output" => r.writes == Artifact::JobOutput,
                        "an unrelated existing file" => r.writes == Artifact::Text,
                        _ => false,
                    };
                if allowed {
                    continue;
                }
                let mut line = r.args.to_string();
                for (k, v) in &fx.paths {
                    line = line.replace(&format!("{{{k}}}"), &v.display().to_string());
                }
                let mut argv: Vec<String> = vec!["paraforge".into()];
                for w in line.split(' ') {
                    argv.push(if w == "{OUT}" {
                        out.display().to_string()
                    } else {
                        w.to_string()
                    });
                }
                if overwrite && !r.always_overwrites {
                    argv.push("--overwrite".into());
                }
                let before = snapshot(fx._dir.path());
                let result = Cli::try_parse_from(&argv)
                    .map_err(|e| anyhow::anyhow!("{e}"))
                    .and_then(|cli| dispatch(cli.command));
                let after = snapshot(fx._dir.path());
                let shown = argv[1..].join(" ");
                match result {
                    Ok(()) => failures.push(format!("{what}: `{shown}` succeeded")),
                    Err(e) => {
                        let text = crate::error_text(&e);
                        let names_it = text.contains(&out.display().to_string())
                            || text.contains(&input(r).display().to_string());
                        if !names_it {
                            failures.push(format!(
                                "{what}: `{shown}` failed for another reason: {text}"
                            ));
                        }
                    }
                }
                if before != after {
                    let changed: Vec<_> = before
                        .keys()
                        .chain(after.keys())
                        .filter(|k| before.get(*k) != after.get(*k))
                        .collect();
                    failures.push(format!("{what}: `{shown}` changed {changed:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
