//! `[filters] dedup_sources`: which lines of a job repeat an earlier
//! source, decided once when the job is planned.
//!
//! "Earlier" is input order (files as the config lists them, lines in file
//! order), so the first occurrence is kept however the job is sharded or
//! spread over workers. Every pair's source is hashed (xxh3-128) and the
//! hash and the pair's place are spilled to one of [`PARTITIONS`] files on
//! local disk by the hash's top bits (`paraforge_core::repeats`, as `bin
//! --dedup` past its budget); each partition is then sorted on its own.
//! Memory holds one partition and the line numbers to drop, never the pairs.

use std::path::Path;

use paraforge_core::repeats::SpilledKeys;
use paraforge_job::bitext::{BitextReader, ReadOptions, Record};
use paraforge_job::config::JobConfig;

use crate::shard::{PlanError, ShardSpec};

/// Spill files (the partition is the hash's top bits): one holds about
/// 24 bytes x pairs / 64, 19 MB for CzEng's 51.4M.
const PARTITIONS: usize = 64;

/// A pair's place in input order as one number: file index above, line
/// below (2^40 lines a file, 2^24 files).
const LINE_BITS: u32 = 40;

fn ordinal(file: usize, line: u64) -> u64 {
    ((file as u64) << LINE_BITS) | (line & ((1 << LINE_BITS) - 1))
}

/// What the pass found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupReport {
    pub pairs: u64,
    pub duplicates: u64,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PlanError + '_ {
    move |source| PlanError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Fills every shard's `drop_lines` with its lines whose source occurred
/// earlier in the job. `shards` are the plan's, in file and line order.
pub fn mark_duplicates(
    cfg: &JobConfig,
    shards: &mut [ShardSpec],
) -> Result<DedupReport, PlanError> {
    let tmp = std::env::temp_dir();
    let mut spill = SpilledKeys::new(PARTITIONS).map_err(io_err(&tmp))?;
    let mut pairs = 0u64;
    for (i, input) in cfg.input.paths.iter().enumerate() {
        // The worker's reader with the worker's options, so that a line is
        // a pair here exactly when it is one there.
        let path = paraforge_job::storage::local_path(input).unwrap_or(Path::new(input));
        let opts = ReadOptions {
            max_chars: cfg.input.max_chars,
            ..ReadOptions::default()
        };
        for rec in BitextReader::open(path, cfg.format(i), opts)? {
            let Record::Pair(p) = rec? else {
                continue;
            };
            let h = twox_hash::XxHash3_128::oneshot(p.source_side().as_bytes());
            spill.push(ordinal(i, p.line), h).map_err(io_err(&tmp))?;
            pairs += 1;
        }
    }
    // (file index, line) of every later occurrence.
    let mut drops: Vec<(u32, u64)> = Vec::new();
    spill
        .repeats(|o| drops.push(((o >> LINE_BITS) as u32, o & ((1 << LINE_BITS) - 1))))
        .map_err(io_err(&tmp))?;
    drops.sort_unstable();
    for s in shards.iter_mut() {
        let f = s.file_index as u32;
        let (lo, hi) = (s.range.first_line, s.range.first_line + s.range.lines);
        let from = drops.partition_point(|&d| d < (f, lo));
        let to = drops.partition_point(|&d| d < (f, hi));
        s.drop_lines = drops[from..to].iter().map(|&(_, l)| l).collect();
    }
    Ok(DedupReport {
        pairs,
        duplicates: drops.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan;

    fn config(paths: &[&Path], per: u64) -> JobConfig {
        let list = paths
            .iter()
            .map(|p| format!("{:?}", p.display().to_string()))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!(
            "[job]\nname = \"t\"\noutput = \"out\"\nshard_pairs = {per}\n[input]\npaths = [{list}]\nformat = \"czeng16\"\n[model]\ndir = \"m\"\n[filters]\ndedup_sources = true\n"
        );
        JobConfig::parse(&text, Path::new("t.toml")).unwrap()
    }

    /// Real lines repeated within and across files (one gzip): the later
    /// copies are marked, the first kept, whatever the shard size.
    #[test]
    fn later_copies_are_marked_in_input_order_whatever_the_shards() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let sample =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sample/czeng16-heldout.cs-en.tsv");
        let text = std::fs::read_to_string(sample).unwrap();
        let real: Vec<&str> = text.lines().take(300).collect();
        let mut a: Vec<String> = real[..200].iter().map(|l| l.to_string()).collect();
        // Line 150 repeats line 10's source with another id and reference;
        // line 151 is a malformed line (not a pair, never a duplicate).
        let src10 = real[9].split('\t').nth(2).unwrap();
        a.insert(149, format!("dup-a\t1.0\t{src10}\tAnother reference."));
        a.insert(150, "broken line".into());
        let mut b: Vec<String> = real[200..].iter().map(|l| l.to_string()).collect();
        // File b repeats a's line 5 and its own line 2.
        b.push(real[4].to_string());
        b.push(real[201].to_string());
        let (pa, pb) = (dir.path().join("a.tsv"), dir.path().join("b.tsv.gz"));
        std::fs::write(&pa, a.join("\n") + "\n").unwrap();
        let mut e = flate2::write::GzEncoder::new(
            std::fs::File::create(&pb).unwrap(),
            flate2::Compression::fast(),
        );
        e.write_all((b.join("\n") + "\n").as_bytes()).unwrap();
        e.finish().unwrap();
        // The sample's own repeats, found independently.
        let mut seen = std::collections::HashSet::new();
        let mut want: Vec<(usize, u64)> = Vec::new();
        for (f, lines) in [(0, &a), (1, &b)] {
            for (n, l) in lines.iter().enumerate() {
                let c: Vec<&str> = l.split('\t').collect();
                if c.len() == 4 && !seen.insert(c[2].to_string()) {
                    want.push((f, n as u64 + 1));
                }
            }
        }
        assert!(want.contains(&(0, 150)) && want.contains(&(1, 101)) && want.contains(&(1, 102)));
        for per in [7, 50, 1000] {
            let cfg = config(&[&pa, &pb], per);
            let mut shards = plan(&cfg).unwrap();
            let r = mark_duplicates(&cfg, &mut shards).unwrap();
            let got: Vec<(usize, u64)> = shards
                .iter()
                .flat_map(|s| s.drop_lines.iter().map(move |&l| (s.file_index, l)))
                .collect();
            assert_eq!(got, want, "shards of {per}");
            assert_eq!(r.duplicates, want.len() as u64);
            assert_eq!(r.pairs, 301 + 2);
            for s in &shards {
                assert!(s
                    .drop_lines
                    .iter()
                    .all(|&l| l >= s.range.first_line && l < s.range.first_line + s.range.lines));
            }
        }
    }
}
