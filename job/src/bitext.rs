//! Bitext readers (docs/DEFINITIONS.md section 1): CzEng 1.6 plaintext, CzEng 2.0,
//! two aligned files, and generic TSV; plain, `.gz` or `.zst`. A line that
//! does not parse is never fatal: it comes back as a [`Reject`] with its
//! file, line and reason, so that the caller counts it and writes it to a
//! rejects file.
//!
//! Plain files can be read from a byte range (`start..end`): the reader
//! skips to the first line that starts at or after `start` and reads every
//! line that starts before `end`, so ranges cut anywhere partition the lines
//! exactly. That is how shards of one big file are read.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::storage::ObjectReader;

/// The layout of a bitext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// `id TAB filter_score TAB source TAB reference`.
    Czeng16,
    /// `id TAB adq_score TAB cs_lang_score TAB en_lang_score TAB source TAB
    /// reference`; blank lines separate documents and are skipped.
    Czeng20,
    /// Columns (0-based) of a TSV file; without an id column the id is
    /// `<file name>:<line>`.
    Tsv {
        id: Option<usize>,
        source: usize,
        reference: usize,
    },
    /// Line i of the source file translates line i of the reference file.
    Aligned { reference: PathBuf },
    /// Pairs translated already: columns (0-based) of a TSV file. Without
    /// an id column the id is `<file name>:<line>`; without a source
    /// column the source is empty; without a score column
    /// `translation_score` is null.
    Pairs {
        id: Option<usize>,
        source: Option<usize>,
        reference: usize,
        translation: usize,
        score: Option<usize>,
    },
}

/// A pair read from the bitext.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub id: String,
    pub source: String,
    pub reference: String,
    /// 1-based line number in the (source) file.
    pub line: u64,
    /// The translation an input of pairs holds (none: the job translates).
    pub given: Option<Given>,
}

/// A translation read from the input rather than made by a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Given {
    pub translation: String,
    /// The model's score of it, where the input has one.
    pub score: Option<f32>,
}

impl Pair {
    /// The side `[filters]` rules and `dedup_sources` read as the source:
    /// the translation of a pair that has one (it is what the reference is
    /// compared with; the source column of such an input is optional).
    pub fn source_side(&self) -> &str {
        self.given
            .as_ref()
            .map_or(self.source.as_str(), |g| g.translation.as_str())
    }
}

use crate::reject::not_utf8;
pub use crate::reject::{looks_legacy_8bit, Reject, RejectReason, LEGACY_HINT};

/// One item of the bitext.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Pair(Pair),
    Reject(Reject),
}

#[derive(Debug, thiserror::Error)]
pub enum BitextError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: byte ranges need an uncompressed file")]
    RangeOnCompressed { path: PathBuf },
    /// The file ended inside a planned range: it is shorter than when the
    /// job was planned (truncated, replaced, or a partial copy).
    #[error("{path}: the file ended after {found} of the {expected} lines planned from line {first_line}; it is shorter than when the job was planned")]
    Truncated {
        path: PathBuf,
        first_line: u64,
        expected: u64,
        found: u64,
    },
    /// A planned byte range no longer holds the lines it held.
    #[error("{path}: bytes {start}..{end} hold {found} lines, {expected} were planned from line {first_line}; the file changed since the job was planned")]
    RangeChanged {
        path: PathBuf,
        start: u64,
        end: u64,
        first_line: u64,
        expected: u64,
        found: u64,
    },
}

/// Reading options.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Longest side, in characters, before the line is rejected.
    pub max_chars: usize,
    /// The part of the file to read; `None` reads it all.
    pub range: Option<Range>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_chars: 2000,
            range: None,
        }
    }
}

/// Bytes a line may have beyond its two sides' characters: ids, scores,
/// separators, extra TSV columns and the white space trimmed around a side.
pub const LINE_SLACK_BYTES: usize = 64 << 10;

/// The longest line, in bytes without its newline, that a reader holds in
/// memory for `max_chars`: two sides of `max_chars` characters of at most
/// 4 UTF-8 bytes each, plus [`LINE_SLACK_BYTES`]. A longer line could only
/// become a pair if its other columns or padding outgrew the slack; it is
/// rejected (`line_too_long`) and skipped to its newline unread, so that
/// one huge line (a broken export, a binary file) costs no more memory than
/// a normal one.
pub fn max_line_bytes(max_chars: usize) -> usize {
    max_chars.saturating_mul(8).saturating_add(LINE_SLACK_BYTES)
}

/// The one bounded line reader, shared with every other reader.
pub use paraforge_core::text::{read_line_limited, LineRead};

/// The part of one input file a shard holds: the one type for a shard's
/// range, from planning through the lease (`proto::Range`, converted in
/// `proto.rs`) to the reader. Line numbers in records are always those of
/// the whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Range {
    /// 1-based number of the range's first line.
    pub first_line: u64,
    /// Lines in the range; 0 reads to the end of the file.
    pub lines: u64,
    /// Where those lines lie in a plain file, `[start, end)`, read by
    /// seeking. `None`: the file is read from its start, skipping
    /// `first_line - 1` lines (compressed or aligned files).
    pub bytes: Option<(u64, u64)>,
}

impl Range {
    /// Lines `first_line .. first_line + lines`, read from the file's start.
    pub fn lines(first_line: u64, lines: u64) -> Range {
        Range {
            first_line,
            lines,
            bytes: None,
        }
    }

    /// Bytes `[start, end)` of a plain file, holding `lines` lines from
    /// `first_line`.
    pub fn bytes(start: u64, end: u64, first_line: u64, lines: u64) -> Range {
        Range {
            first_line,
            lines,
            bytes: Some((start, end)),
        }
    }

    /// Lines to skip from the file's start before the range (0 when the
    /// range is found by seeking).
    fn skip(&self) -> u64 {
        match self.bytes {
            Some(_) => 0,
            None => self.first_line.saturating_sub(1),
        }
    }
}

/// Opens a local path or object-store URL for reading through
/// object_store.
fn open_object(path: &Path) -> Result<ObjectReader, BitextError> {
    let io = |source| BitextError::Io {
        path: path.to_path_buf(),
        source,
    };
    let location = path.to_str().ok_or_else(|| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path is not valid UTF-8",
        ))
    })?;
    ObjectReader::open(location).map_err(io)
}

/// Opens a file (a local path or an `s3://`/`gs://` URL) for reading,
/// decompressing `.gz` and `.zst`.
pub fn open_text(path: &Path) -> Result<Box<dyn BufRead + Send>, BitextError> {
    let io = |source| BitextError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = open_object(path)?;
    paraforge_core::text::decompress(path, f).map_err(io)
}

/// Streams the records of a bitext.
pub struct BitextReader {
    path: PathBuf,
    name: String,
    format: Format,
    opts: ReadOptions,
    src: Box<dyn BufRead + Send>,
    reference: Option<Box<dyn BufRead + Send>>,
    /// Bytes left in the range (u64::MAX without one).
    remaining: u64,
    /// Lines left to take (u64::MAX without a limit).
    left: u64,
    /// Lines of the range read so far, blank ones included.
    lines_read: u64,
    /// The range whose line count is still to be checked (ranges with a
    /// planned count only); taken once it is checked.
    expect: Option<Range>,
    line: u64,
    /// [`max_line_bytes`] of the options' `max_chars`.
    limit: usize,
    buf: Vec<u8>,
    rbuf: Vec<u8>,
}

impl BitextReader {
    pub fn open(
        path: &Path,
        format: Format,
        opts: ReadOptions,
    ) -> Result<BitextReader, BitextError> {
        let io = |source| BitextError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut remaining = u64::MAX;
        let bytes = opts.range.and_then(|r| r.bytes);
        let skip = opts.range.map_or(0, |r| r.skip());
        // A seek starts counting at the range's first line; a skip counts
        // the skipped lines from the file's start.
        let line = match (bytes, opts.range) {
            (Some(_), Some(r)) => r.first_line.saturating_sub(1),
            _ => 0,
        };
        let src: Box<dyn BufRead + Send> = match bytes {
            None => open_text(path)?,
            Some((start, end)) => {
                if paraforge_core::text::is_compressed(path) {
                    return Err(BitextError::RangeOnCompressed {
                        path: path.to_path_buf(),
                    });
                }
                let mut f = open_object(path)?;
                let mut pos = start;
                if start > 0 {
                    // The line holding byte start-1 belongs to the previous
                    // range (it starts there), unless it ends exactly there.
                    f.seek(SeekFrom::Start(start - 1)).map_err(io)?;
                    let mut r = BufReader::with_capacity(1 << 16, f);
                    let n = r.skip_until(b'\n').map_err(io)?;
                    pos = start - 1 + n as u64;
                    remaining = end.saturating_sub(pos);
                    Box::new(r)
                } else {
                    remaining = end.saturating_sub(pos);
                    Box::new(BufReader::with_capacity(1 << 20, f))
                }
            }
        };
        let mut src = src;
        let mut reference = match &format {
            Format::Aligned { reference } => Some(open_text(reference)?),
            _ => None,
        };
        let mut line = line;
        // Skipped lines are never held, however long.
        for _ in 0..skip {
            if src.skip_until(b'\n').map_err(io)? == 0 {
                break;
            }
            if let Some(r) = reference.as_mut() {
                let rp = match &format {
                    Format::Aligned { reference } => reference.clone(),
                    _ => path.to_path_buf(),
                };
                r.skip_until(b'\n')
                    .map_err(|source| BitextError::Io { path: rp, source })?;
            }
            line += 1;
        }
        let left = match opts.range {
            Some(r) if r.bytes.is_none() && r.lines > 0 => r.lines,
            _ => u64::MAX,
        };
        let limit = max_line_bytes(opts.max_chars);
        Ok(BitextReader {
            left,
            lines_read: 0,
            expect: opts.range.filter(|r| r.lines > 0),
            name: path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            path: path.to_path_buf(),
            format,
            opts,
            src,
            reference,
            remaining,
            line,
            limit,
            buf: Vec::new(),
            rbuf: Vec::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lines read from the range so far, blank ones included: when the
    /// reader is done, the range's planned `lines`.
    pub fn lines_read(&self) -> u64 {
        self.lines_read
    }

    /// At the end of the range or of the file: an error unless the range
    /// held exactly the lines planned. A shard must never end short
    /// because its input changed under the job.
    fn check_range_end(&mut self, at_eof: bool) -> Option<BitextError> {
        let r = self.expect.take()?;
        if self.lines_read == r.lines {
            return None;
        }
        Some(match r.bytes {
            Some((start, end)) if !at_eof || self.lines_read > r.lines => {
                BitextError::RangeChanged {
                    path: self.path.clone(),
                    start,
                    end,
                    first_line: r.first_line,
                    expected: r.lines,
                    found: self.lines_read,
                }
            }
            _ => BitextError::Truncated {
                path: self.path.clone(),
                first_line: r.first_line,
                expected: r.lines,
                found: self.lines_read,
            },
        })
    }

    fn reject(&self, reason: RejectReason, raw: &[u8]) -> Record {
        let cut = &raw[..raw.len().min(1024)];
        Record::Reject(Reject {
            file: self.path.display().to_string(),
            line: self.line,
            reason,
            text: String::from_utf8_lossy(cut).into_owned(),
        })
    }

    /// A pair whose sides are usable, or the reason it is not; `given` is
    /// a pairs input's translation and score.
    fn check(
        &self,
        id: String,
        source: &str,
        reference: &str,
        given: Option<(&str, Option<f32>)>,
    ) -> Record {
        let (s, r) = (source.trim(), reference.trim());
        let t = given.map(|(t, _)| t.trim());
        let raw = || match t {
            Some(t) => format!("{source}\t{reference}\t{t}"),
            None => format!("{source}\t{reference}"),
        };
        if s.is_empty() && t.is_none() {
            return self.reject(RejectReason::EmptySource, raw().as_bytes());
        }
        if r.is_empty() {
            return self.reject(RejectReason::EmptyReference, raw().as_bytes());
        }
        if t.is_some_and(str::is_empty) {
            return self.reject(RejectReason::EmptyTranslation, raw().as_bytes());
        }
        let sides = [("source", s), ("reference", r)]
            .into_iter()
            .chain(t.map(|t| ("translation", t)));
        for (side, text) in sides {
            // ASCII control bytes never occur inside UTF-8 multi-byte chars.
            if let Some(b) = text
                .bytes()
                .find(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
            {
                return self.reject(
                    RejectReason::ControlCharacter {
                        side,
                        code: b as u32,
                    },
                    raw().as_bytes(),
                );
            }
            // Counting chars only matters near the limit: bytes bound chars.
            if text.len() > self.opts.max_chars {
                let chars = text.chars().count();
                if chars > self.opts.max_chars {
                    return self.reject(
                        RejectReason::TooLong {
                            side,
                            chars,
                            max: self.opts.max_chars,
                        },
                        raw().as_bytes(),
                    );
                }
            }
        }
        Record::Pair(Pair {
            id,
            source: s.to_string(),
            reference: r.to_string(),
            line: self.line,
            given: t.zip(given).map(|(t, (_, score))| Given {
                translation: t.to_string(),
                score,
            }),
        })
    }

    fn parse(&self, line: &[u8]) -> Option<Record> {
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(_) => return Some(self.reject(not_utf8(line), line)),
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let cols: Vec<&str> = text.split('\t').collect();
        let wrong = |expected| {
            Some(self.reject(
                RejectReason::ColumnCount {
                    found: cols.len(),
                    expected,
                },
                line,
            ))
        };
        match &self.format {
            Format::Czeng16 => {
                if cols.len() != 4 {
                    return wrong(4);
                }
                Some(self.check(cols[0].to_string(), cols[2], cols[3], None))
            }
            Format::Czeng20 => {
                if text.trim().is_empty() {
                    return None; // document separator
                }
                if cols.len() != 6 {
                    return wrong(6);
                }
                Some(self.check(cols[0].to_string(), cols[4], cols[5], None))
            }
            Format::Tsv {
                id,
                source,
                reference,
            } => {
                let need = columns_needed(&[Some(*source), Some(*reference), *id]);
                if cols.len() < need {
                    return wrong(need);
                }
                let id = self.id_column(&cols, *id);
                Some(self.check(id, cols[*source], cols[*reference], None))
            }
            Format::Pairs {
                id,
                source,
                reference,
                translation,
                score,
            } => {
                let need =
                    columns_needed(&[*id, *source, Some(*reference), Some(*translation), *score]);
                if cols.len() < need {
                    return wrong(need);
                }
                let id = self.id_column(&cols, *id);
                let score = match score {
                    None => None,
                    Some(c) => match cols[*c].trim().parse::<f32>() {
                        Ok(x) if x.is_finite() => Some(x),
                        _ => {
                            let text: String = cols[*c].chars().take(40).collect();
                            return Some(
                                self.reject(RejectReason::BadScore { column: *c, text }, line),
                            );
                        }
                    },
                };
                let source = source.map_or("", |c| cols[c]);
                Some(self.check(
                    id,
                    source,
                    cols[*reference],
                    Some((cols[*translation], score)),
                ))
            }
            Format::Aligned { .. } => unreachable!("aligned files are read in next()"),
        }
    }
}

/// Columns a TSV line needs to hold every column named.
fn columns_needed(named: &[Option<usize>]) -> usize {
    named.iter().flatten().max().map_or(1, |c| c + 1)
}

impl BitextReader {
    /// The id column's text, or `<file name>:<line>` without one.
    fn id_column(&self, cols: &[&str], id: Option<usize>) -> String {
        match id {
            Some(i) => cols[i].to_string(),
            None => format!("{}:{}", self.name, self.line),
        }
    }
}

fn chomp(buf: &mut Vec<u8>) {
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
}

impl BitextReader {
    /// The aligned reference file's next line into `rbuf`, bounded as the
    /// source's is.
    fn read_reference(&mut self) -> Option<std::io::Result<LineRead>> {
        let r = self.reference.as_mut()?;
        Some(read_line_limited(r, &mut self.rbuf, self.limit))
    }

    fn reference_path(&self) -> PathBuf {
        match &self.format {
            Format::Aligned { reference } => reference.clone(),
            _ => self.path.clone(),
        }
    }
}

impl Iterator for BitextReader {
    type Item = Result<Record, BitextError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.remaining == 0 || self.left == 0 {
                return self.check_range_end(false).map(Err);
            }
            let got = match read_line_limited(&mut self.src, &mut self.buf, self.limit) {
                Ok(got) => got,
                Err(source) => {
                    return Some(Err(BitextError::Io {
                        path: self.path.clone(),
                        source,
                    }))
                }
            };
            let (n, too_long) = match got {
                LineRead::Eof => {
                    // The source ended; an aligned reference with lines left is a mismatch.
                    if let Some(Ok(LineRead::Line { .. } | LineRead::TooLong { .. })) =
                        self.read_reference()
                    {
                        self.line += 1;
                        self.reference = None;
                        let raw = std::mem::take(&mut self.rbuf);
                        return Some(Ok(self.reject(RejectReason::Unaligned, &raw)));
                    }
                    return self.check_range_end(true).map(Err);
                }
                LineRead::Line { bytes } => (bytes, false),
                LineRead::TooLong { bytes } => (bytes, true),
            };
            // Every line that starts inside the range is read whole.
            self.remaining = self.remaining.saturating_sub(n);
            self.left -= 1;
            self.lines_read += 1;
            self.line += 1;
            let limit = self.limit;
            let long = move |bytes, reference| RejectReason::LineTooLong {
                bytes,
                max: limit,
                reference,
            };
            if !too_long {
                chomp(&mut self.buf);
            }
            if let Format::Aligned { .. } = self.format {
                let line = std::mem::take(&mut self.buf);
                let rec = match self.read_reference().unwrap_or(Ok(LineRead::Eof)) {
                    Err(source) => {
                        return Some(Err(BitextError::Io {
                            path: self.reference_path(),
                            source,
                        }))
                    }
                    Ok(LineRead::Eof) => self.reject(RejectReason::Unaligned, &line),
                    _ if too_long => self.reject(long(n, false), &line),
                    Ok(LineRead::TooLong { bytes }) => self.reject(long(bytes, true), &line),
                    Ok(LineRead::Line { .. }) => {
                        chomp(&mut self.rbuf);
                        match (std::str::from_utf8(&line), std::str::from_utf8(&self.rbuf)) {
                            (Ok(s), Ok(r)) => {
                                let s = s.strip_prefix('\u{feff}').unwrap_or(s);
                                let r = r.strip_prefix('\u{feff}').unwrap_or(r);
                                self.check(format!("{}:{}", self.name, self.line), s, r, None)
                            }
                            (Err(_), _) => self.reject(not_utf8(&line), &line),
                            (_, Err(_)) => {
                                let reason = not_utf8(&self.rbuf);
                                self.reject(reason, &line)
                            }
                        }
                    }
                };
                self.buf = line;
                return Some(Ok(rec));
            }
            if too_long {
                return Some(Ok(self.reject(long(n, false), &self.buf)));
            }
            if let Some(rec) = self.parse(&self.buf) {
                return Some(Ok(rec));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// `bytes` gzip-compressed into `dir/name`.
    fn write_gz(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        let mut e = flate2::write::GzEncoder::new(
            std::fs::File::create(&p).unwrap(),
            flate2::Compression::default(),
        );
        e.write_all(bytes).unwrap();
        e.finish().unwrap();
        p
    }

    fn read_all(path: &Path, format: Format, opts: ReadOptions) -> (Vec<Pair>, Vec<Reject>) {
        let (mut pairs, mut rejects) = (Vec::new(), Vec::new());
        for r in BitextReader::open(path, format, opts).unwrap() {
            match r.unwrap() {
                Record::Pair(p) => pairs.push(p),
                Record::Reject(r) => rejects.push(r),
            }
        }
        (pairs, rejects)
    }

    const CZENG16: &[u8] = b"a-1\t1.0\tDobry den.\tGood day.\n\
        a-2\t0.9\tjen tri\n\
        a-3\t1.0\t\tNo source.\n\
        a-4\t1.0\tCRLF radek.\tCRLF line.\r\n\
        a-5\t1.0\t\xff\xfe bad\tbad\n\
        \xef\xbb\xbfa-6\t1.0\tBOM.\tBOM.\n\
        a-7\t1.0\tVelmi dlouha veta\tA rather long sentence\n\
        a-8\t1.0\tnul\x00bajt\tNUL.\n";

    #[test]
    fn czeng16_lines_parse_or_are_rejected_with_line_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "c.tsv", CZENG16);
        let opts = ReadOptions {
            max_chars: 20,
            ..ReadOptions::default()
        };
        let (pairs, rejects) = read_all(&p, Format::Czeng16, opts);
        let ids: Vec<&str> = pairs.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["a-1", "a-4", "a-6"]);
        assert_eq!(pairs[1].reference, "CRLF line.");
        assert_eq!(pairs[2].line, 6);
        let why: Vec<(u64, String)> = rejects
            .iter()
            .map(|r| (r.line, r.reason.to_string()))
            .collect();
        assert_eq!(
            why,
            [
                (2, "3 tab-separated columns, expected 4".to_string()),
                (3, "empty source side".into()),
                (5, format!("invalid UTF-8 ({LEGACY_HINT})")),
                (
                    7,
                    "reference side has 22 characters, more than the limit of 20".into()
                ),
                (8, "source side contains control character U+0000".into()),
            ]
        );
        assert!(rejects.iter().all(|r| r.file.ends_with("c.tsv")));
    }

    #[test]
    fn text_in_a_legacy_encoding_is_named_with_how_to_convert_it() {
        let dir = tempfile::tempdir().unwrap();
        // "Příliš žluťoučký kůň" in Windows-1250; a UTF-8 line with one
        // damaged character; UTF-16LE "ab".
        let p = write(
            dir.path(),
            "c.tsv",
            b"a-1\t1\tP\xf8\xedli\x9a \x9elu\x9dou\xe8k\xfd k\xf9\xf2\tHorse.\n\
              a-2\t1\tP\xc5\x99\xc3\xadli\xc5\xa1 \xc5\xbelu\xc5\xa5ou\xc4\x8dk\xc3\xbd k\xc5\xaf\xc5\tHorse.\n\
              a-3\t1\ta\x00b\x00\xff\tab\n",
        );
        let (_, rejects) = read_all(&p, Format::Czeng16, ReadOptions::default());
        let why: Vec<String> = rejects.iter().map(|r| r.reason.to_string()).collect();
        assert_eq!(why.len(), 3, "{why:?}");
        assert!(
            why[0].starts_with("invalid UTF-8 (")
                && why[0].contains("Windows-1250")
                && why[0].contains("iconv -f cp1250 -t utf-8"),
            "{}",
            why[0]
        );
        assert_eq!(why[1], "invalid UTF-8");
        assert_eq!(why[2], "invalid UTF-8");
        let en = write(dir.path(), "c.en", b"Dobr\xfd den.\n");
        let cs = write(dir.path(), "c.cs", b"Hi.\n");
        let (_, rejects) = read_all(
            &cs,
            Format::Aligned { reference: en },
            ReadOptions::default(),
        );
        assert_eq!(rejects[0].reason, RejectReason::LegacyEncoding);
    }

    #[test]
    fn compressed_files_read_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let plain = write(dir.path(), "c.tsv", CZENG16);
        let gz = write_gz(dir.path(), "c.tsv.gz", CZENG16);
        let zst = dir.path().join("c.tsv.zst");
        std::fs::write(&zst, zstd::encode_all(CZENG16, 3).unwrap()).unwrap();
        let want = read_all(&plain, Format::Czeng16, ReadOptions::default());
        for p in [&gz, &zst] {
            let got = read_all(p, Format::Czeng16, ReadOptions::default());
            assert_eq!(got.0, want.0);
            assert_eq!(got.1.len(), want.1.len());
        }
        let e = BitextReader::open(
            &gz,
            Format::Czeng16,
            ReadOptions {
                range: Some(Range::bytes(0, 10, 1, 0)),
                ..Default::default()
            },
        );
        assert!(matches!(e, Err(BitextError::RangeOnCompressed { .. })));
    }

    #[test]
    fn czeng20_tsv_and_aligned_formats() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "c20.tsv", b"d1-1\t0.9\t0.99\t0.98\tAhoj.\tHi.\n\nd2-1\t0.9\t0.9\t0.9\tNa shledanou.\tBye.\nbad\t1\n");
        let (pairs, rejects) = read_all(&p, Format::Czeng20, ReadOptions::default());
        assert_eq!(
            pairs.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
            ["d1-1", "d2-1"]
        );
        assert_eq!(pairs[1].line, 3);
        assert_eq!(rejects.len(), 1);

        let p = write(
            dir.path(),
            "g.tsv",
            b"en one\tx\tcs jedna\nen two\ty\tcs dva\n",
        );
        let f = Format::Tsv {
            id: None,
            source: 2,
            reference: 0,
        };
        let (pairs, _) = read_all(&p, f, ReadOptions::default());
        assert_eq!(pairs[1].id, "g.tsv:2");
        assert_eq!(
            (pairs[1].source.as_str(), pairs[1].reference.as_str()),
            ("cs dva", "en two")
        );

        let cs = write(dir.path(), "corpus.cs", b"Jedna.\nDva.\nTri.\n");
        let en = write(dir.path(), "corpus.en", b"One.\nTwo.\n");
        let (pairs, rejects) = read_all(
            &cs,
            Format::Aligned { reference: en },
            ReadOptions::default(),
        );
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[0].id, "corpus.cs:1");
        assert_eq!(rejects.len(), 1);
        assert_eq!(rejects[0].reason, RejectReason::Unaligned);
    }

    #[test]
    fn line_skip_and_take_partition_compressed_and_aligned_files() {
        let dir = tempfile::tempdir().unwrap();
        let gz = write_gz(dir.path(), "c.tsv.gz", CZENG16);
        let whole = read_all(&gz, Format::Czeng16, ReadOptions::default());
        let mut got = Vec::new();
        for (skip, take) in [(0, 3), (3, 3), (6, 0)] {
            let opts = ReadOptions {
                range: Some(Range::lines(skip + 1, take)),
                ..Default::default()
            };
            got.extend(read_all(&gz, Format::Czeng16, opts).0);
        }
        assert_eq!(got, whole.0, "same pairs, same line numbers");
        let cs = write(dir.path(), "x.cs", b"a\nb\nc\nd\n");
        let en = write(dir.path(), "x.en", b"A\nB\nC\nD\n");
        let opts = ReadOptions {
            range: Some(Range::lines(2, 2)),
            ..Default::default()
        };
        let (pairs, rejects) = read_all(&cs, Format::Aligned { reference: en }, opts);
        let got: Vec<(String, String, u64)> = pairs
            .into_iter()
            .map(|p| (p.source, p.reference, p.line))
            .collect();
        assert_eq!(
            got,
            [("b".into(), "B".into(), 2), ("c".into(), "C".into(), 3)]
        );
        assert!(rejects.is_empty());
    }

    /// A shard whose file shrank or changed after planning fails; it never
    /// ends short as if the file had simply ended.
    #[test]
    fn a_planned_range_the_file_no_longer_holds_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let errors = |p: &Path, range: Range| -> Vec<String> {
            let opts = ReadOptions {
                range: Some(range),
                ..Default::default()
            };
            BitextReader::open(p, Format::Czeng16, opts)
                .unwrap()
                .filter_map(|r| r.err().map(|e| e.to_string()))
                .collect()
        };
        let p = write(dir.path(), "c.tsv", CZENG16);
        let len = CZENG16.len() as u64;
        // As planned: no error, by lines or by bytes.
        assert!(errors(&p, Range::lines(3, 6)).is_empty());
        assert!(errors(&p, Range::bytes(0, len, 1, 8)).is_empty());
        // Planned for 10 lines, the file has 8.
        let e = errors(&p, Range::lines(3, 8));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("ended after 6 of the 8 lines planned from line 3"),
            "{e:?}"
        );
        let e = errors(&p, Range::bytes(0, len + 40, 1, 9));
        assert!(
            e.len() == 1 && e[0].contains("ended after 8 of the 9"),
            "{e:?}"
        );
        // The same bytes now hold other lines.
        let e = errors(&p, Range::bytes(0, len, 1, 7));
        assert!(
            e.len() == 1 && e[0].contains("hold 8 lines, 7 were planned"),
            "{e:?}"
        );
        // Compressed files are read by lines: a truncated one fails too.
        let gz = write_gz(dir.path(), "c.tsv.gz", &CZENG16[..40]);
        let e = errors(&gz, Range::lines(1, 8));
        assert!(
            e.len() == 1 && e[0].contains("shorter than when the job was planned"),
            "{e:?}"
        );
    }

    /// One reason of every kind, so that the codes here and the lists in
    /// `paraforge_core::rejects` (what the coordinator accepts) stay one set.
    fn every_reason() -> Vec<RejectReason> {
        let side = "source";
        vec![
            RejectReason::ColumnCount {
                found: 1,
                expected: 4,
            },
            RejectReason::InvalidUtf8,
            RejectReason::LegacyEncoding,
            RejectReason::EmptySource,
            RejectReason::EmptyReference,
            RejectReason::TooLong {
                side,
                chars: 2,
                max: 1,
            },
            RejectReason::Unaligned,
            RejectReason::ControlCharacter { side, code: 0 },
            RejectReason::TooFewTokens {
                side,
                tokens: 1,
                min: 2,
            },
            RejectReason::TooManyTokens {
                side,
                tokens: 2,
                max: 1,
            },
            RejectReason::LengthRatio {
                source: 1,
                reference: 9,
                max: 2.0,
            },
            RejectReason::Copy,
            RejectReason::FewLetters {
                side,
                letters: 0,
                chars: 1,
                min: 0.5,
            },
            RejectReason::Duplicate,
            RejectReason::Language {
                side,
                expected: "ces",
                detected: "eng",
                confidence: 1.0,
            },
            RejectReason::LineTooLong {
                bytes: 9,
                max: 1,
                reference: false,
            },
            RejectReason::EmptyTranslation,
            RejectReason::BadScore {
                column: 2,
                text: "x".into(),
            },
        ]
    }

    #[test]
    fn reject_codes_here_and_in_core_are_the_same_set() {
        use paraforge_core::rejects::{FILTER_CODES, MALFORMED_CODES};
        let codes: Vec<&str> = every_reason().iter().map(|r| r.code()).collect();
        let unique: std::collections::BTreeSet<&str> = codes.iter().copied().collect();
        assert_eq!(
            unique.len(),
            codes.len(),
            "a code names two reasons: {codes:?}"
        );
        let core: std::collections::BTreeSet<&str> = MALFORMED_CODES
            .iter()
            .chain(FILTER_CODES)
            .copied()
            .collect();
        assert_eq!(
            unique, core,
            "RejectReason::code against core/src/rejects.rs"
        );
        for r in every_reason() {
            let filter = !matches!(
                r,
                RejectReason::ColumnCount { .. }
                    | RejectReason::InvalidUtf8
                    | RejectReason::LegacyEncoding
                    | RejectReason::EmptySource
                    | RejectReason::EmptyReference
                    | RejectReason::EmptyTranslation
                    | RejectReason::BadScore { .. }
                    | RejectReason::TooLong { .. }
                    | RejectReason::Unaligned
                    | RejectReason::ControlCharacter { .. }
                    | RejectReason::LineTooLong { .. }
            );
            assert_eq!(RejectReason::is_filter_code(r.code()), filter, "{r:?}");
            assert_eq!(RejectReason::known_code(r.code()), Some(r.code()));
        }
    }

    /// A line far longer than `max_chars` allows, in every format and
    /// compression and across range starts and skips: rejected with its
    /// line number and the `line_too_long` code, the lines around it read
    /// as usual, and never held in memory whole.
    #[test]
    fn a_line_past_the_byte_limit_is_rejected_without_being_held() {
        let dir = tempfile::tempdir().unwrap();
        let max_chars = 50;
        let limit = max_line_bytes(max_chars);
        // 8 MB: far past the limit, small enough for a test.
        let huge = vec![b'x'; 8 << 20];
        let mut text = b"a-1\t1.0\tJedna.\tOne.\na-2\t1.0\t".to_vec();
        text.extend_from_slice(&huge);
        text.extend_from_slice(b"\tTwo.\na-3\t1.0\tTri.\tThree.\n");
        let plain = write(dir.path(), "c.tsv", &text);
        let gz = write_gz(dir.path(), "c.tsv.gz", &text);
        let zst = dir.path().join("c.tsv.zst");
        std::fs::write(&zst, zstd::encode_all(text.as_slice(), 1).unwrap()).unwrap();
        let second = 20u64; // where line 2 starts
        let inside = second + 1000;
        let open = |p: &Path, format: Format, range: Option<Range>| {
            BitextReader::open(p, format, ReadOptions { max_chars, range }).unwrap()
        };
        let drain = |mut r: BitextReader| {
            let mut recs = Vec::new();
            for rec in r.by_ref() {
                recs.push(rec.unwrap());
            }
            // Never the whole line: about the limit (66 KB), not 8 MB.
            assert!(
                r.buf.capacity() < 1 << 20 && r.rbuf.capacity() < 1 << 20,
                "buffers of {} and {} bytes",
                r.buf.capacity(),
                r.rbuf.capacity()
            );
            recs
        };
        let summary = |recs: &[Record]| -> Vec<(u64, String)> {
            recs.iter()
                .map(|r| match r {
                    Record::Pair(p) => (p.line, p.id.clone()),
                    Record::Reject(j) => (j.line, j.reason.code().to_string()),
                })
                .collect()
        };
        let want = [
            (1, "a-1".to_string()),
            (2, "line_too_long".into()),
            (3, "a-3".into()),
        ];
        for p in [&plain, &gz, &zst] {
            let recs = drain(open(p, Format::Czeng16, None));
            assert_eq!(summary(&recs), want, "{}", p.display());
            let Record::Reject(j) = &recs[1] else {
                unreachable!()
            };
            assert!(j.file.ends_with(p.file_name().unwrap().to_str().unwrap()));
            assert!(j.text.len() <= 1024);
            let why = j.reason.to_string();
            assert!(
                why.contains(&format!("takes {} bytes", huge.len() + 14))
                    && why.contains(&format!("more than the limit of {limit} that"))
                    && why.contains("input.max_chars"),
                "{why}"
            );
        }
        // Skipping over it to a later range, by lines and by bytes.
        for (p, range) in [
            (&gz, Range::lines(3, 1)),
            (&plain, Range::bytes(inside, text.len() as u64, 3, 1)),
        ] {
            let recs = drain(open(p, Format::Czeng16, Some(range)));
            assert_eq!(summary(&recs), [(3, "a-3".to_string())]);
        }
        // A range holding only the long line still counts it.
        let r = open(
            &plain,
            Format::Czeng16,
            Some(Range::bytes(second, inside, 2, 1)),
        );
        assert_eq!(summary(&drain(r)), [(2, "line_too_long".to_string())]);
        // Aligned files: a long line on either side rejects the pair and
        // keeps the two files in step.
        let mut long_cs = b"Jedna.\n".to_vec();
        long_cs.extend_from_slice(&huge);
        long_cs.extend_from_slice(b"\nTri.\n");
        let short = write(dir.path(), "a.cs", b"Jedna.\nDva.\nTri.\n");
        let long = write(dir.path(), "b.cs", &long_cs);
        for (src, reference, from_reference) in [(&long, &short, false), (&short, &long, true)] {
            let format = Format::Aligned {
                reference: reference.clone(),
            };
            let recs = drain(open(src, format, None));
            let lines: Vec<u64> = recs
                .iter()
                .map(|r| match r {
                    Record::Pair(p) => p.line,
                    Record::Reject(j) => {
                        assert!(
                            matches!(j.reason, RejectReason::LineTooLong { reference, .. } if reference == from_reference),
                            "{:?}",
                            j.reason
                        );
                        100 + j.line
                    }
                })
                .collect();
            assert_eq!(lines, [1, 102, 3]);
        }
    }

    #[test]
    fn read_line_limited_keeps_the_limit_and_skips_the_rest() {
        let mut r = std::io::Cursor::new(b"abc\nabcd\nabcde\nab".to_vec());
        let mut buf = Vec::new();
        let mut got = Vec::new();
        loop {
            let l = read_line_limited(&mut r, &mut buf, 4).unwrap();
            if l == LineRead::Eof {
                break;
            }
            got.push((l, String::from_utf8(buf.clone()).unwrap()));
        }
        assert_eq!(
            got,
            [
                (LineRead::Line { bytes: 4 }, "abc\n".to_string()),
                (LineRead::Line { bytes: 5 }, "abcd\n".into()),
                (LineRead::TooLong { bytes: 6 }, "abcde".into()),
                (LineRead::Line { bytes: 2 }, "ab".into()),
            ]
        );
        // Exactly one byte over the limit and no newline: still too long.
        let mut r = std::io::Cursor::new(b"abcde".to_vec());
        assert_eq!(
            read_line_limited(&mut r, &mut buf, 4).unwrap(),
            LineRead::TooLong { bytes: 5 }
        );
    }

    #[test]
    fn byte_ranges_cut_anywhere_partition_the_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "c.tsv", CZENG16);
        let whole = read_all(&p, Format::Czeng16, ReadOptions::default());
        let len = CZENG16.len() as u64;
        for cut in 0..=len {
            let mut got = Vec::new();
            let mut rejected = 0;
            for (a, b) in [(0, cut), (cut, len)] {
                let (pairs, rejects) = read_all(
                    &p,
                    Format::Czeng16,
                    ReadOptions {
                        range: Some(Range::bytes(a, b, 1, 0)),
                        ..Default::default()
                    },
                );
                got.extend(pairs.into_iter().map(|p| p.id));
                rejected += rejects.len();
            }
            let want: Vec<String> = whole.0.iter().map(|p| p.id.clone()).collect();
            assert_eq!(got, want, "cut at {cut}");
            assert_eq!(rejected, whole.1.len(), "cut at {cut}");
        }
    }
}
