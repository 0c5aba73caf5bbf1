//! Shard planning: cut each input file into shards of about `shard_pairs`
//! lines. Plain files are cut into byte ranges at line starts (one scan
//! counting newlines), so a worker seeks straight to its shard. Compressed
//! files cannot be entered in the middle: they are cut by line numbers, and
//! a worker decompresses from the start and skips to its lines (an index of
//! restart points would avoid that; for CzEng-size inputs split the files or
//! store them uncompressed). Aligned files are cut by lines for the same
//! reason (two files must stay in step). Inputs are read through
//! object_store, so `s3://` and `gs://` inputs plan like local files.
//!
//! The plan also fingerprints every file a worker will read (size, ETag or
//! modification time, and an xxh3-128 hash of its bytes): shards are byte
//! and line ranges, so a resumed job must refuse an input that changed
//! since it was planned, or it would lose and duplicate pairs.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use paraforge_job::bitext::{open_text, Range};
use paraforge_job::config::{FormatName, JobConfig};
use paraforge_job::storage::ObjectReader;

pub use crate::shard::{InputFingerprint, Plan, PlanError, ShardSpec};

/// Hashes what the plan reads, beside the newline scan.
struct Hasher(twox_hash::XxHash3_128);

impl Hasher {
    fn new() -> Hasher {
        Hasher(twox_hash::XxHash3_128::new())
    }
    fn update(&mut self, b: &[u8]) {
        self.0.write(b);
    }
    fn finish(self, input: &str, r: &ObjectReader) -> InputFingerprint {
        let info = r.info();
        InputFingerprint {
            input: input.to_string(),
            size: info.size,
            e_tag: info.e_tag.clone(),
            modified: info.modified.clone(),
            xxh3: format!("{:032x}", self.0.finish_128()),
        }
    }
}

/// Fingerprints one file (a path or an object-store URL) in one read.
pub fn fingerprint(input: &str) -> Result<InputFingerprint, PlanError> {
    let io = |source| PlanError::Io {
        path: PathBuf::from(input),
        source,
    };
    let mut f = ObjectReader::open(input).map_err(io)?;
    let mut h = Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finish(input, &f))
}

/// Every file the job reads: the inputs and, for aligned inputs, their
/// reference files.
pub fn input_files(cfg: &JobConfig) -> Vec<String> {
    let mut all = cfg.input.paths.clone();
    all.extend(cfg.input.reference_paths.iter().cloned());
    all
}

/// The fingerprints of every file the job reads now.
pub fn fingerprints(cfg: &JobConfig) -> Result<Vec<InputFingerprint>, PlanError> {
    input_files(cfg).iter().map(|p| fingerprint(p)).collect()
}

/// A shard as its lease carries it.
pub fn wire_spec(s: &ShardSpec) -> paraforge_rpc::proto::ShardSpec {
    paraforge_rpc::proto::ShardSpec {
        shard_id: s.shard_id,
        input_url: s.input.clone(),
        range: Some(s.range.into()),
        drop_bitmap: paraforge_rpc::proto::drop_bitmap(s.range.first_line, &s.drop_lines),
    }
}

/// A lease's bytes besides its shard: the token, the attempt, the model
/// digest, field tags and gRPC's frame header, with room to spare.
const LEASE_OVERHEAD: usize = 512;

/// Refuses a plan with a shard whose lease cannot pass the message limit:
/// the coordinator's `coordinator.max_message_bytes`, and the default
/// limit remote workers decode with (they have no setting of their own).
fn check_lease_sizes(cfg: &JobConfig, shards: &[ShardSpec]) -> Result<(), PlanError> {
    use paraforge_job::config::DEFAULT_MAX_MESSAGE_BYTES;
    use prost::Message;
    let configured = cfg.coordinator.max_message_bytes;
    let limit = configured.min(DEFAULT_MAX_MESSAGE_BYTES);
    for s in shards {
        let bytes = wire_spec(s).encoded_len() + LEASE_OVERHEAD;
        if bytes <= limit {
            continue;
        }
        let (who, fix) = if configured < DEFAULT_MAX_MESSAGE_BYTES {
            (
                "coordinator.max_message_bytes allows",
                format!(
                    "lower job.shard_pairs (now {}) or raise coordinator.max_message_bytes (now {configured})",
                    cfg.job.shard_pairs
                ),
            )
        } else {
            (
                "a worker accepts",
                format!(
                    "lower job.shard_pairs (now {}; [filters] dedup_sources sends one bit per line of a shard)",
                    cfg.job.shard_pairs
                ),
            )
        };
        return Err(PlanError::LeaseTooLarge {
            shard: s.shard_id,
            input: s.input.clone(),
            first_line: s.range.first_line,
            lines: s.range.lines,
            bytes,
            limit,
            who,
            fix,
        });
    }
    Ok(())
}

/// Lines in a (possibly compressed) file; a last line without a newline
/// counts. Read in fixed blocks, never a line at a time: one line can be
/// gigabytes long.
fn count_lines(path: &Path) -> Result<u64, PlanError> {
    let mut r = open_text(path)?;
    let (mut lines, mut last) = (0u64, b'\n');
    loop {
        let block = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(PlanError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let Some(&end) = block.last() else {
            return Ok(lines + u64::from(last != b'\n'));
        };
        lines += block.iter().filter(|&&b| b == b'\n').count() as u64;
        last = end;
        let n = block.len();
        r.consume(n);
    }
}

/// Plans the shards of every input file of the job, ids in file order.
pub fn plan(cfg: &JobConfig) -> Result<Vec<ShardSpec>, PlanError> {
    Ok(plan_job(cfg)?.shards)
}

/// Applies the output rule ([`paraforge_core::outputs`]) to `job.output`
/// and `[bins] output` where they are local: neither may be, hold or lie
/// inside a file the job reads (its inputs and models), nor lie inside a
/// dataset, a model or another job's output; the job output may be new,
/// empty or a job's output (this job's, resumed: the claim decides), the
/// bins output new, empty or a dataset (bins are rewritten at the end).
pub fn check_outputs(cfg: &JobConfig) -> Result<(), PlanError> {
    use paraforge_core::outputs::{check, Artifact, Target};
    use paraforge_job::storage::local_path;
    let mut reads: Vec<(&str, &Path)> = Vec::new();
    for p in &cfg.input.paths {
        reads.extend(local_path(p).map(|p| ("input.paths", p)));
    }
    for p in &cfg.input.reference_paths {
        reads.extend(local_path(p).map(|p| ("input.reference_paths", p)));
    }
    if let Some(m) = &cfg.model {
        reads.push(("model.dir", Path::new(&m.dir)));
    }
    let s = &cfg.scoring;
    for (key, p) in [
        ("scoring.model", &s.model),
        ("scoring.vectors", &s.vectors),
        ("scoring.lm", &s.lm),
    ] {
        reads.extend(p.as_deref().and_then(local_path).map(|p| (key, p)));
    }
    let output = local_path(&cfg.job.output);
    if let Some(out) = output {
        let target = Target {
            flag: "job.output",
            path: out,
            writes: Artifact::JobOutput,
        };
        check(target, &reads, true)?;
    }
    // The scored corpus of `[scoring] bootstrap` reads the job's output;
    // the bins read the scored corpus.
    let scored = cfg.bootstrap_output();
    let scored = scored.as_deref().and_then(local_path);
    if let Some(sc) = scored {
        let mut reads = reads.clone();
        reads.extend(output.map(|o| ("job.output", o)));
        let target = Target {
            flag: "scoring.bootstrap_output",
            path: sc,
            writes: Artifact::Dataset,
        };
        check(target, &reads, true)?;
    }
    if let Some(bins) = cfg.bins_output() {
        if let Some(b) = local_path(&bins) {
            let mut reads = reads.clone();
            reads.extend(output.map(|o| ("job.output", o)));
            reads.extend(scored.map(|o| ("scoring.bootstrap_output", o)));
            let target = Target {
                flag: "bins.output",
                path: b,
                writes: Artifact::Dataset,
            };
            check(target, &reads, true)?;
        }
    }
    Ok(())
}

/// Refuses a `scoring.model` whose card names another language than the
/// references it would score: `[filters] reference_lang`, else the
/// translation model's target language (its `tokenizer_config.json`).
/// Either unknown: let through.
pub fn check_scorer_language(cfg: &JobConfig) -> Result<(), PlanError> {
    use paraforge_job::storage::local_path;
    let Some(scorer) = cfg.scoring.model.as_deref().and_then(local_path) else {
        return Ok(());
    };
    // The languages the manifest and card will record, read the same way.
    let l = crate::languages::of_job(&cfg.filters, cfg.model.as_ref().map(|m| m.dir.as_str()));
    paraforge_core::layout::card::check_language(scorer, l.reference.as_deref(), &l.from).map_err(
        |message| PlanError::Language {
            key: "scoring.model",
            message,
        },
    )
}

/// Refuses a `[scoring] bootstrap` whose input has fewer lines than its
/// fold models need pairs: filters only drop more, so nothing translated
/// could change the verdict. (The step counts the kept pairs again.)
fn check_bootstrap_size(cfg: &JobConfig, shards: &[ShardSpec]) -> Result<(), PlanError> {
    if cfg.scoring.bootstrap.is_none() {
        return Ok(());
    }
    let folds = cfg.scoring.folds();
    let needed = paraforge_core::folds::min_corpus(folds);
    // A range of 0 lines reads to the end of its file: not counted here.
    let lines: u64 = shards.iter().map(|s| s.range.lines).sum();
    let open_ended = shards.iter().any(|s| s.range.lines == 0);
    if lines < needed && !open_ended {
        return Err(PlanError::TooFewForBootstrap {
            lines,
            folds,
            needed,
            min: paraforge_core::folds::MIN_TRAIN_PAIRS,
        });
    }
    Ok(())
}

/// What the whole plan must pass: every lease fits its message, and the
/// bootstrap has enough lines.
fn check_shards(cfg: &JobConfig, shards: &[ShardSpec]) -> Result<(), PlanError> {
    check_lease_sizes(cfg, shards)?;
    check_bootstrap_size(cfg, shards)
}

/// Plans the shards and fingerprints every file they are cut from.
pub fn plan_job(cfg: &JobConfig) -> Result<Plan, PlanError> {
    check_outputs(cfg)?;
    check_scorer_language(cfg)?;
    let per = cfg.job.shard_pairs.max(1);
    let mut out = Vec::new();
    let mut prints = Vec::new();
    // input.limit: lines still to plan (u64::MAX without one).
    let mut left = cfg.input.limit.unwrap_or(u64::MAX);
    for (i, input) in cfg.input.paths.iter().enumerate() {
        if left == 0 {
            break;
        }
        let path = PathBuf::from(input);
        let by_lines =
            paraforge_core::text::is_compressed(&path) || cfg.input.format == FormatName::Aligned;
        let mut push = |range| {
            out.push(ShardSpec {
                shard_id: out.len() as u64,
                input: input.clone(),
                file_index: i,
                range,
                drop_lines: Vec::new(),
            })
        };
        if by_lines {
            let lines = count_lines(&path)?;
            if cfg.input.format == FormatName::Aligned {
                let reference = &cfg.input.reference_paths[i];
                let reference_lines = count_lines(Path::new(reference))?;
                if reference_lines != lines {
                    return Err(PlanError::Unaligned {
                        source_path: input.clone(),
                        source_lines: lines,
                        reference: reference.clone(),
                        reference_lines,
                    });
                }
            }
            let lines = lines.min(left);
            left -= lines;
            let mut first = 1;
            while first <= lines {
                let take = per.min(lines - first + 1);
                push(Range::lines(first, take));
                first += take;
            }
        } else {
            let mut f = ObjectReader::open(input).map_err(|source| PlanError::Io {
                path: path.clone(),
                source,
            })?;
            let mut hash = Hasher::new();
            let mut buf = vec![0u8; 1 << 20];
            let (mut pos, mut start, mut first_line, mut in_shard) = (0u64, 0u64, 1u64, 0u64);
            let mut last = b'\n';
            // Past the limit the file is still hashed (its fingerprint is
            // the whole file's) but cut into no more shards.
            let mut done = false;
            loop {
                let n = f.read(&mut buf).map_err(|source| PlanError::Io {
                    path: path.clone(),
                    source,
                })?;
                if n == 0 {
                    break;
                }
                hash.update(&buf[..n]);
                for (j, &b) in buf[..n].iter().enumerate() {
                    if done {
                        break;
                    }
                    if b == b'\n' {
                        in_shard += 1;
                        left -= 1;
                        if in_shard == per || left == 0 {
                            let end = pos + j as u64 + 1;
                            push(Range::bytes(start, end, first_line, in_shard));
                            start = end;
                            first_line += in_shard;
                            in_shard = 0;
                            done = left == 0;
                        }
                    }
                }
                last = buf[n - 1];
                pos += n as u64;
            }
            if !done {
                if last != b'\n' && pos > 0 {
                    in_shard += 1; // a last line without a newline
                    left -= 1;
                }
                if pos > start {
                    push(Range::bytes(start, pos, first_line, in_shard));
                }
            }
            prints.push(hash.finish(input, &f));
        }
    }
    // Compressed and aligned inputs were read decompressed above; their
    // stored bytes (and any reference files) are hashed in a pass of their own.
    for p in input_files(cfg) {
        if !prints.iter().any(|f| f.input == p) {
            prints.push(fingerprint(&p)?);
        }
    }
    if cfg.filters.dedup_sources {
        let r = crate::dedup::mark_duplicates(cfg, &mut out)?;
        tracing::info!(
            pairs = r.pairs,
            duplicates = r.duplicates,
            "sources repeated in the job found; the workers will drop them"
        );
    }
    check_shards(cfg, &out)?;
    Ok(Plan {
        shards: out,
        inputs: prints,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use paraforge_job::bitext::{BitextReader, ReadOptions, Record};

    fn config(paths: &[&Path], per: u64, format: &str, refs: &[&Path]) -> JobConfig {
        let list = |ps: &[&Path]| {
            ps.iter()
                .map(|p| format!("{:?}", p.display().to_string()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let text = format!(
            "[job]\nname = \"t\"\noutput = \"out\"\nshard_pairs = {per}\n[input]\npaths = [{}]\nformat = \"{format}\"\nreference_paths = [{}]\n[model]\ndir = \"m\"\n",
            list(paths),
            list(refs)
        );
        JobConfig::parse(&text, Path::new("t.toml")).unwrap()
    }

    /// `plan` (and a new job) applies the output rule to `job.output` and
    /// `[bins] output`: before, a job could write into its own model
    /// (changing its digest and wedging every rerun), another model, a
    /// non-empty unrelated directory or `.`, and `[bins] output` equal to
    /// the job output failed only after the whole job ran.
    #[test]
    fn outputs_that_would_destroy_or_mix_with_data_are_refused_at_planning() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("in.tsv");
        std::fs::write(&input, "1\t1.0\tAhoj.\tHello.\n").unwrap();
        let model = d.path().join("model");
        std::fs::create_dir(&model).unwrap();
        std::fs::write(model.join("encoder_model.onnx"), "x").unwrap();
        let other = d.path().join("other-model");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("decoder_model.onnx"), "x").unwrap();
        let notes = d.path().join("notes");
        std::fs::create_dir(&notes).unwrap();
        std::fs::write(notes.join("todo.txt"), "x").unwrap();
        let cfg = |output: &Path, extra: &str| {
            let text = format!(
                "[job]\nname = \"t\"\noutput = {:?}\n[input]\npaths = [{:?}]\nformat = \"czeng16\"\n[model]\ndir = {:?}\n[scoring]\nvectors = {:?}\n{extra}",
                output.display().to_string(),
                input.display().to_string(),
                model.display().to_string(),
                input.display().to_string(),
            );
            JobConfig::parse(&text, Path::new("t.toml")).unwrap()
        };
        let refused = |c: JobConfig, says: &str| {
            let e = check_outputs(&c).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(plan_job(&c).is_err());
        };
        refused(cfg(&model, ""), "job.output");
        refused(
            cfg(&model.join("out"), ""),
            "lies inside the input model.dir",
        );
        refused(cfg(&other, ""), "is a model");
        refused(cfg(&other.join("out"), ""), "lies inside a model");
        refused(cfg(&notes, ""), "a directory that is not empty");
        refused(cfg(d.path(), ""), "holds the input");
        let out = d.path().join("out");
        let bins = |b: &Path| format!("[bins]\noutput = {:?}\n", b.display().to_string());
        refused(cfg(&out, &bins(&out)), "bins.output");
        refused(
            cfg(&out, &bins(&out.join("bins"))),
            "lies inside the input job.output",
        );
        refused(cfg(&out, &bins(&model)), "bins.output");
        check_outputs(&cfg(&out, &bins(&d.path().join("out-bins")))).unwrap();
        check_outputs(&cfg(&out, "")).unwrap();

        // The bootstrap's scored corpus, and bins that would land in it.
        let boot = |scored: &Path, extra: &str| {
            let text = format!(
                "[job]\nname = \"t\"\noutput = {:?}\n[input]\npaths = [{:?}]\nformat = \"czeng16\"\n[model]\ndir = {:?}\n[scoring]\nbootstrap = \"trigram\"\nbootstrap_output = {:?}\n{extra}",
                out.display().to_string(),
                input.display().to_string(),
                model.display().to_string(),
                scored.display().to_string(),
            );
            JobConfig::parse(&text, Path::new("t.toml")).unwrap()
        };
        refused(boot(&model.join("scored"), ""), "scoring.bootstrap_output");
        refused(boot(&notes, ""), "scoring.bootstrap_output");
        let scored = d.path().join("scored");
        refused(
            boot(&scored, &bins(&scored.join("bins"))),
            "lies inside the input scoring.bootstrap_output",
        );
        check_outputs(&boot(&scored, &bins(&d.path().join("b")))).unwrap();
    }

    /// Reads a shard as a worker will.
    fn read_shard(cfg: &JobConfig, s: &ShardSpec) -> Vec<Record> {
        let opts = ReadOptions {
            range: Some(s.range),
            ..ReadOptions::default()
        };
        BitextReader::open(Path::new(&s.input), cfg.format(s.file_index), opts)
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn whole(cfg: &JobConfig, i: usize) -> Vec<Record> {
        BitextReader::open(
            Path::new(&cfg.input.paths[i]),
            cfg.format(i),
            ReadOptions::default(),
        )
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    /// The bundled sample as `s.tsv` (less its last `cut` bytes) and whole
    /// as `s.tsv.gz`, in `dir`.
    fn sample_copies(dir: &Path, cut: usize) -> (PathBuf, PathBuf) {
        let sample =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sample/czeng16-heldout.cs-en.tsv");
        let text = std::fs::read(&sample).unwrap();
        let plain = dir.join("s.tsv");
        std::fs::write(&plain, &text[..text.len() - cut]).unwrap();
        let gz = dir.join("s.tsv.gz");
        let mut e = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::fast(),
        );
        std::io::Write::write_all(&mut e, &text).unwrap();
        e.finish().unwrap();
        (plain, gz)
    }

    #[test]
    fn shards_of_plain_gzip_and_aligned_files_read_back_as_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        // A plain copy without a final newline, and a gzip copy.
        let (plain, gz) = sample_copies(dir.path(), 1);
        let cfg = config(&[&plain, &gz], 500, "czeng16", &[]);
        let shards = plan(&cfg).unwrap();
        assert_eq!(shards.len(), 18, "4,068 lines per file in shards of 500");
        assert_eq!(shards.iter().map(|s| s.range.lines).sum::<u64>(), 2 * 4068);
        assert!(shards
            .iter()
            .enumerate()
            .all(|(i, s)| s.shard_id == i as u64));
        for f in 0..2 {
            let got: Vec<Record> = shards
                .iter()
                .filter(|s| s.file_index == f)
                .flat_map(|s| read_shard(&cfg, s))
                .collect();
            assert_eq!(got, whole(&cfg, f), "file {f}");
        }

        let cs = dir.path().join("c.cs");
        let en = dir.path().join("c.en");
        std::fs::write(&cs, "a\nb\nc\nd\ne\n").unwrap();
        std::fs::write(&en, "A\nB\nC\nD\nE\n").unwrap();
        let cfg = config(&[&cs], 2, "aligned", &[&en]);
        let shards = plan(&cfg).unwrap();
        assert_eq!(
            shards.iter().map(|s| s.range.lines).collect::<Vec<_>>(),
            [2, 2, 1]
        );
        let got: Vec<Record> = shards.iter().flat_map(|s| read_shard(&cfg, s)).collect();
        assert_eq!(got, whole(&cfg, 0));

        // A reference with a line too many mispairs every line after it,
        // and the last shard ends before the reader would see the extra
        // line: refused at planning, naming both files.
        std::fs::write(&en, "A\nB\nextra\nC\nD\nE\n").unwrap();
        let e = plan(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("c.cs has 5 lines but its reference file") && e.contains("c.en has 6"),
            "{e}"
        );
    }

    /// `input.limit` plans exactly the first N lines across the files in
    /// order, stopping inside a file and inside a shard, a plain file or a
    /// compressed one, and they read back as exactly those lines.
    #[test]
    fn a_limit_plans_the_first_lines_across_files() {
        let dir = tempfile::tempdir().unwrap();
        let (plain, gz) = sample_copies(dir.path(), 0);
        for (paths, limit, want) in [
            (vec![plain.as_path(), &gz], 1234, vec![(0, 1234)]),
            (
                vec![plain.as_path(), &gz],
                4068 + 700,
                vec![(0, 4068), (1, 700)],
            ),
            (vec![gz.as_path(), &plain], 1001, vec![(0, 1001)]),
            (vec![plain.as_path()], 99_999, vec![(0, 4068)]),
        ] {
            let mut cfg = config(&paths, 500, "czeng16", &[]);
            cfg.input.limit = Some(limit);
            let shards = plan(&cfg).unwrap();
            assert!(shards.iter().all(|s| s.range.lines <= 500));
            for (f, lines) in want.iter().copied() {
                let got: Vec<Record> = shards
                    .iter()
                    .filter(|s| s.file_index == f)
                    .flat_map(|s| read_shard(&cfg, s))
                    .collect();
                let all = whole(&cfg, f);
                assert_eq!(got, all[..lines as usize], "limit {limit}, file {f}");
            }
            assert!(shards
                .iter()
                .all(|s| want.iter().any(|w| w.0 == s.file_index)));
        }
    }

    /// A job whose references are Czech (by `[filters] reference_lang`, or
    /// by the English-to-Czech model's tokenizer config) refuses the
    /// bundled English scorer by key before anything runs; an English job
    /// takes it.
    #[test]
    fn a_scorer_for_another_language_than_the_references_is_refused() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let sample = root.join("data/sample/czeng16-heldout.cs-en.tsv");
        let scorer = root.join("models/scorer-trigram");
        let en_cs = root.join("models/demo-en-cs");
        let cs_en = root.join("models/demo-cs-en");
        for (model, filters, refused) in [
            (&cs_en, "", false),
            (&en_cs, "", true),
            (&cs_en, "reference_lang = \"ces\"", true),
            (&en_cs, "reference_lang = \"eng\"", false),
        ] {
            let text = format!(
                "[job]\nname = \"t\"\noutput = \"out\"\n[input]\npaths = [{:?}]\nformat = \"czeng16\"\n[model]\ndir = {:?}\n[scoring]\nmodel = {:?}\n[filters]\n{filters}\n",
                sample.display().to_string(),
                model.display().to_string(),
                scorer.display().to_string()
            );
            let cfg = JobConfig::parse(&text, Path::new("t.toml")).unwrap();
            let got = check_scorer_language(&cfg);
            assert_eq!(got.is_err(), refused, "{model:?} {filters}: {got:?}");
            if let Err(e) = got {
                let e = e.to_string();
                assert!(
                    e.starts_with("scoring.model: ")
                        && e.contains("\"cs\"")
                        && e.contains("bootstrap"),
                    "{e}"
                );
            }
        }
    }

    /// `[filters] dedup_sources` on a shard of one repeated line: the
    /// dropped lines travel as one bit each, and a shard whose lease still
    /// cannot pass the message limit fails the plan, naming the shard and
    /// the keys to change, instead of being refused at every lease.
    #[test]
    fn every_lease_fits_the_message_limit_or_the_plan_fails() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.tsv");
        std::fs::write(&input, "a\t1\tJedna.\tOne.\n".repeat(20_000)).unwrap();
        let cfg = |per: u64, max: usize| {
            let text = format!(
                "[job]\nname = \"t\"\noutput = \"out\"\nshard_pairs = {per}\n[input]\npaths = [{:?}]\nformat = \"czeng16\"\n[model]\ndir = \"m\"\n[filters]\ndedup_sources = true\n[coordinator]\nmax_message_bytes = {max}\n",
                input.display().to_string()
            );
            JobConfig::parse(&text, Path::new("t.toml")).unwrap()
        };
        // 10,000 dropped lines a shard: 1,250 bytes as bits (20 KB as the
        // varint list leases once carried).
        let plan = plan_job(&cfg(10_000, 2048)).unwrap();
        assert_eq!(plan.shards.len(), 2);
        for s in &plan.shards {
            let wire = wire_spec(s);
            assert!(wire.drop_bitmap.len() <= 1250, "{}", wire.drop_bitmap.len());
            let range = wire.range.unwrap();
            let back = paraforge_rpc::proto::dropped_lines(&range, &wire.drop_bitmap).unwrap();
            assert_eq!(back, s.drop_lines);
            let first = s.range.first_line.max(2);
            assert_eq!(
                back,
                (first..s.range.first_line + 10_000).collect::<Vec<_>>()
            );
        }
        let e = plan_job(&cfg(20_000, 2048)).unwrap_err().to_string();
        assert!(
            e.starts_with("shard 0 (")
                && e.contains("20000 lines from line 1")
                && e.contains("job.shard_pairs (now 20000)")
                && e.contains("coordinator.max_message_bytes (now 2048)"),
            "{e}"
        );
    }

    #[test]
    fn missing_inputs_are_clear_errors() {
        let cfg = config(&[Path::new("/nonexistent/x.tsv")], 10, "czeng16", &[]);
        let e = plan(&cfg).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/x.tsv"), "{e}");
        let mut cfg = cfg;
        cfg.input.paths = vec!["ftp://b/x.tsv".into()];
        assert!(plan(&cfg)
            .unwrap_err()
            .to_string()
            .contains("ftp://b/x.tsv"));
    }
}
