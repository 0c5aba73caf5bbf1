//! Text files that may be compressed: `.gz` and `.zst` are decompressed by
//! their extension, anything else is read as it is.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Whether the path names a compressed file (`.gz` or `.zst`).
pub fn is_compressed(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("gz" | "zst")
    )
}

/// Wraps `r`, the bytes of the file at `path`, in the decompressor the
/// path's extension names (`.gz`, `.zst`; none otherwise), buffered.
pub fn decompress<R: Read + Send + 'static>(
    path: &Path,
    r: R,
) -> std::io::Result<Box<dyn BufRead + Send>> {
    let r: Box<dyn Read + Send> = match path.extension().and_then(|e| e.to_str()) {
        Some("gz") => Box::new(flate2::read::MultiGzDecoder::new(r)),
        Some("zst") => Box::new(zstd::stream::read::Decoder::new(r)?),
        _ => Box::new(r),
    };
    Ok(Box::new(BufReader::with_capacity(1 << 20, r)))
}

/// Opens a local file for reading, decompressing `.gz` and `.zst`.
pub fn open_local(path: &Path) -> std::io::Result<Box<dyn BufRead + Send>> {
    let f = std::fs::File::open(path)?;
    if f.metadata()?.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "is a directory, not a file",
        ));
    }
    decompress(path, f)
}

/// What [`read_line_limited`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    /// The input ended before another line.
    Eof,
    /// The buffer holds a whole line; `bytes` were consumed, newline included.
    Line { bytes: u64 },
    /// The line is longer than the limit: the buffer holds its first
    /// `limit + 1` bytes and the rest was consumed without being kept;
    /// `bytes` were consumed in all, newline included.
    TooLong { bytes: u64 },
}

/// Reads the next line into `buf` (replacing what it held) as
/// `read_until(b'\n')` would, but keeps at most `limit` bytes before the
/// newline: `read_until` grows its buffer to the whole line, however long. Every
/// reader of text in paraforge reads lines through it (or [`BoundedLines`]).
pub fn read_line_limited<R: BufRead + ?Sized>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let cap = (limit as u64).saturating_add(1);
    let n = std::io::Read::take(&mut *r, cap).read_until(b'\n', buf)? as u64;
    if n == 0 {
        return Ok(LineRead::Eof);
    }
    if n < cap || buf.last() == Some(&b'\n') {
        return Ok(LineRead::Line { bytes: n });
    }
    let rest = r.skip_until(b'\n')? as u64;
    Ok(LineRead::TooLong { bytes: n + rest })
}

/// The longest line the readers of word vectors, language models, STS and
/// word-similarity sets and PPDB files hold (in bytes, without its
/// newline): a 8,192-dimension vector line is about 100 KB; a file without
/// line breaks is refused at this size instead of being read whole.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// A line longer than a reader's bound: the error names the line and the
/// bound (the path is the caller's to name).
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {bytes} bytes, more than the {limit} a line may hold")]
pub struct LineTooLong {
    pub line: u64,
    pub bytes: u64,
    pub limit: usize,
}

/// `.lines()` with a bound: each line at most `limit` bytes, a longer one
/// an `InvalidData` error carrying [`LineTooLong`] (and the reader stops
/// there), invalid UTF-8 an `InvalidData` error naming the line.
pub struct BoundedLines<R> {
    r: R,
    buf: Vec<u8>,
    line: u64,
    limit: usize,
    done: bool,
}

impl<R: BufRead> BoundedLines<R> {
    pub fn new(r: R, limit: usize) -> BoundedLines<R> {
        BoundedLines {
            r,
            buf: Vec::new(),
            line: 0,
            limit,
            done: false,
        }
    }

    /// The number of the last line returned (1-based).
    pub fn line(&self) -> u64 {
        self.line
    }
}

/// [`BoundedLines`] at [`MAX_LINE_BYTES`].
pub fn bounded_lines<R: BufRead>(r: R) -> BoundedLines<R> {
    BoundedLines::new(r, MAX_LINE_BYTES)
}

impl<R: BufRead> Iterator for BoundedLines<R> {
    type Item = std::io::Result<String>;

    fn next(&mut self) -> Option<std::io::Result<String>> {
        if self.done {
            return None;
        }
        let got = read_line_limited(&mut self.r, &mut self.buf, self.limit);
        self.line += 1;
        let bad = |e: Box<dyn std::error::Error + Send + Sync>| {
            Some(Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
        };
        match got {
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
            Ok(LineRead::Eof) => {
                self.done = true;
                None
            }
            Ok(LineRead::TooLong { bytes }) => {
                self.done = true;
                bad(Box::new(LineTooLong {
                    line: self.line,
                    bytes,
                    limit: self.limit,
                }))
            }
            Ok(LineRead::Line { .. }) => {
                let mut b = std::mem::take(&mut self.buf);
                if b.last() == Some(&b'\n') {
                    b.pop();
                    if b.last() == Some(&b'\r') {
                        b.pop();
                    }
                }
                match String::from_utf8(b) {
                    Ok(s) => Some(Ok(s)),
                    Err(_) => bad(format!("line {}: not valid UTF-8", self.line).into()),
                }
            }
        }
    }
}

/// Opens a local file (see [`open_local`]) as bounded lines.
pub fn open_lines(path: &Path) -> std::io::Result<BoundedLines<Box<dyn BufRead + Send>>> {
    Ok(bounded_lines(open_local(path)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_past_the_bound_is_an_error_naming_it_not_a_whole_read() {
        let text = format!("one\r\ntwo\n{}\nfour\n", "x".repeat(5000));
        let mut it = BoundedLines::new(std::io::Cursor::new(text), 100);
        assert_eq!(it.next().unwrap().unwrap(), "one");
        assert_eq!(it.next().unwrap().unwrap(), "two");
        let e = it.next().unwrap().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(
            e.to_string(),
            "line 3: 5001 bytes, more than the 100 a line may hold"
        );
        assert!(it.next().is_none(), "the reader stops at a line it refused");
        let mut it = BoundedLines::new(std::io::Cursor::new(b"ok\n\xff\xfe\n".to_vec()), 100);
        it.next().unwrap().unwrap();
        assert!(it
            .next()
            .unwrap()
            .unwrap_err()
            .to_string()
            .contains("line 2: not valid UTF-8"));
    }
}
