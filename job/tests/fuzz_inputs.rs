//! Property tests (proptest) over arbitrary bytes for the bitext readers,
//! in every format and compression, and over arbitrary text for the config
//! loader: nothing panics, every line comes back as a pair or a reject, and
//! byte ranges cut anywhere still partition the lines.

use std::io::Write;
use std::path::{Path, PathBuf};

use paraforge_job::bitext::{BitextReader, Format, Range, ReadOptions, Record};
use paraforge_job::config::JobConfig;
use proptest::prelude::*;

/// Lines built from the pieces dirty corpora are made of.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"\t".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\0".to_vec()),
        Just(b"\xff\xfe".to_vec()),
        Just(b"\xef\xbb\xbf".to_vec()),
        Just("žluťoučký kůň".as_bytes().to_vec()),
        Just(b"1.0".to_vec()),
        Just(b" ".to_vec()),
        "[a-zA-Z .,!?]{0,12}".prop_map(|s| s.into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..8)
            .prop_map(|v| v.into_iter().filter(|&b| b != b'\n').collect()),
    ];
    proptest::collection::vec(piece, 0..10).prop_map(|ps| ps.concat())
}

fn file_bytes() -> impl Strategy<Value = (Vec<Vec<u8>>, bool)> {
    (proptest::collection::vec(line(), 0..40), any::<bool>())
}

fn join(lines: &[Vec<u8>], final_newline: bool) -> Vec<u8> {
    let mut out = lines.join(&b'\n');
    if final_newline && !lines.is_empty() {
        out.push(b'\n');
    }
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    if name.ends_with(".gz") {
        let mut e = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap();
    } else if name.ends_with(".zst") {
        let mut e = zstd::stream::write::Encoder::new(f, 1).unwrap();
        e.write_all(bytes).unwrap();
        e.finish().unwrap();
    } else {
        f.write_all(bytes).unwrap();
    }
    p
}

fn read(path: &Path, format: Format, opts: ReadOptions) -> Vec<Record> {
    BitextReader::open(path, format, opts)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

/// Lines as the reader sees them (a missing final newline still ends a line).
fn line_count(bytes: &[u8]) -> usize {
    if bytes.is_empty() {
        0
    } else {
        bytes.iter().filter(|&&b| b == b'\n').count() + usize::from(*bytes.last().unwrap() != b'\n')
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_line_is_a_pair_or_a_reject((lines, nl) in file_bytes(), ext in 0usize..3, max_chars in 1usize..40) {
        let dir = tempfile::tempdir().unwrap();
        let bytes = join(&lines, nl);
        let name = ["c.tsv", "c.tsv.gz", "c.tsv.zst"][ext];
        let p = write(dir.path(), name, &bytes);
        let opts = ReadOptions { max_chars, ..ReadOptions::default() };
        for format in [
            Format::Czeng16,
            Format::Tsv { id: None, source: 1, reference: 0 },
            Format::Tsv { id: Some(2), source: 0, reference: 1 },
        ] {
            let recs = read(&p, format.clone(), opts.clone());
            prop_assert_eq!(recs.len(), line_count(&bytes), "{:?}", format);
            for r in &recs {
                match r {
                    Record::Pair(p) => {
                        prop_assert!(!p.source.is_empty() && !p.reference.is_empty());
                        prop_assert!(p.source.chars().count() <= max_chars);
                        prop_assert!(!p.source.bytes().any(|b| b < 0x20 && b != b'\t'));
                    }
                    Record::Reject(j) => prop_assert!(j.line >= 1 && j.file.ends_with(name)),
                }
            }
        }
        // CzEng 2.0 skips blank lines between documents; the rest are counted.
        // Blank is the reader's definition: valid UTF-8 that is only Unicode
        // white space after one BOM (so a lone vertical tab is blank, which
        // `u8::is_ascii_whitespace` would not say).
        let recs = read(&p, Format::Czeng20, opts);
        let blank = lines
            .iter()
            .filter(|l| {
                std::str::from_utf8(l).is_ok_and(|t| t.strip_prefix('\u{feff}').unwrap_or(t).trim().is_empty())
            })
            .count();
        prop_assert!(recs.len() <= line_count(&bytes) && recs.len() + blank >= line_count(&bytes));
    }

    #[test]
    fn byte_ranges_cut_anywhere_partition_the_lines((lines, nl) in file_bytes(), cuts in proptest::collection::vec(any::<u16>(), 0..6)) {
        let dir = tempfile::tempdir().unwrap();
        let bytes = join(&lines, nl);
        let p = write(dir.path(), "c.tsv", &bytes);
        let whole = read(&p, Format::Czeng16, ReadOptions::default());
        let n = bytes.len() as u64;
        let mut points: Vec<u64> = cuts.iter().map(|&c| if n == 0 { 0 } else { c as u64 % (n + 1) }).collect();
        points.push(0);
        points.push(n);
        points.sort_unstable();
        points.dedup();
        let mut got = Vec::new();
        for w in points.windows(2) {
            let opts = ReadOptions { range: Some(Range::bytes(w[0], w[1], 1, 0)), ..ReadOptions::default() };
            got.extend(read(&p, Format::Czeng16, opts).into_iter().map(|r| match r {
                Record::Pair(p) => (p.id, p.source),
                Record::Reject(j) => (format!("reject:{}", j.reason), j.text),
            }));
        }
        let want: Vec<(String, String)> = whole.into_iter().map(|r| match r {
            Record::Pair(p) => (p.id, p.source),
            Record::Reject(j) => (format!("reject:{}", j.reason), j.text),
        }).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn aligned_files_of_any_lengths_never_panic(
        (a, anl) in file_bytes(),
        (b, bnl) in file_bytes(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let cs = write(dir.path(), "c.cs", &join(&a, anl));
        let en = write(dir.path(), "c.en.gz", &join(&b, bnl));
        let recs = read(&cs, Format::Aligned { reference: en }, ReadOptions::default());
        let (la, lb) = (line_count(&join(&a, anl)), line_count(&join(&b, bnl)));
        prop_assert!(recs.len() >= la.min(lb));
        if la != lb {
            prop_assert!(recs.iter().any(|r| matches!(r, Record::Reject(j) if j.reason.to_string().contains("different numbers"))));
        }
    }

    #[test]
    fn the_config_loader_never_panics(text in "\\PC{0,400}") {
        let _ = JobConfig::parse(&text, Path::new("fuzz.toml"));
    }

    #[test]
    fn config_values_of_the_wrong_kind_are_errors_naming_a_key(
        key in prop_oneof![
            Just("shard_pairs"), Just("lease_seconds"), Just("max_attempts"), Just("beam"),
            Just("batch_size"), Just("max_new_tokens"), Just("threads"), Just("output"), Just("name"),
        ],
        value in prop_oneof![
            Just("-1".to_string()), Just("0".to_string()), Just("\"x\"".to_string()),
            Just("[]".to_string()), Just("1e99".to_string()), Just("true".to_string()),
            "[0-9]{1,25}".prop_map(|s| s),
        ],
    ) {
        let base = "[job]\nname = \"t\"\noutput = \"out\"\nshard_pairs = 10\nlease_seconds = 60\nmax_attempts = 3\n[input]\npaths = [\"a.tsv\"]\nformat = \"czeng16\"\n[model]\ndir = \"m\"\nbeam = 12\nbatch_size = 16\nmax_new_tokens = 64\nthreads = 2\n";
        let text: String = base
            .lines()
            .map(|l| if l.starts_with(&format!("{key} = ")) { format!("{key} = {value}") } else { l.to_string() })
            .collect::<Vec<_>>()
            .join("\n");
        if let Err(e) = JobConfig::parse(&text, Path::new("fuzz.toml")) {
            let msg = e.to_string();
            prop_assert!(msg.contains("fuzz.toml"), "{}", msg);
            prop_assert!(msg.contains(key) || msg.contains("line"), "{}", msg);
        }
    }
}

/// The case proptest found: a CzEng 2.0 line of one vertical tab is a blank
/// document separator (Unicode white space), skipped; a line with text is not.
#[test]
fn a_czeng20_line_of_only_a_vertical_tab_is_a_separator() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "c.tsv", b"\x0b\n\x0bx\n");
    let recs = read(&p, Format::Czeng20, ReadOptions::default());
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert!(matches!(&recs[0], Record::Reject(j) if j.line == 2));
}
