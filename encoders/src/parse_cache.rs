//! The parser's trees kept in a file between runs (`paraforge train
//! --parse-cache`): Link Grammar takes most of a tree network's first
//! epoch (on the 84,612 back-translated pairs, an hour of 2 cores, mostly
//! news sentences that hit the per-sentence time limit), and a second
//! seed, or a run resumed after a kill, would pay it again.
//!
//! The file is JSON lines: a header naming the parser and the limits the
//! trees were made under, then one `{"text", "merges"}` per sentence,
//! sorted by text. Trees change with the library, its dictionary and the
//! limits, so a file made under others is refused rather than mixed in.

use std::io::{BufRead, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::link_grammar::{Parser, MAX_CACHED, MAX_PARSE_SECONDS, MAX_PARSE_TOKENS};
use crate::tree::Tree;

/// Why a parse cache could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ParseCacheError {
    #[error("parse cache {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parse cache {}, line {line}: {what} (the file is damaged: remove it, and its sentences are parsed again)", path.display())]
    Damaged {
        path: PathBuf,
        line: usize,
        what: String,
    },
    #[error("parse cache {}: its trees were made by {found}, this run's are made by {expected} (trees differ between them: remove the file or name another)", path.display())]
    OtherParser {
        path: PathBuf,
        found: String,
        expected: String,
    },
}

const FORMAT: &str = "paraforge-parse-cache";
const VERSION: u32 = 1;
/// A line longer than this is damage: a sentence the parser reads has at
/// most [`MAX_PARSE_TOKENS`] tokens, far below it.
const MAX_LINE: u64 = 1 << 20;

#[derive(Serialize, Deserialize, PartialEq)]
struct Header {
    format: String,
    version: u32,
    /// [`Parser::version`] and the limits, as one string to compare.
    parser: String,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    text: String,
    merges: Vec<[u32; 2]>,
}

/// The parser and limits the trees depend on.
fn made_by(parser: &Parser) -> String {
    format!(
        "{}, at most {MAX_PARSE_TOKENS} tokens and {MAX_PARSE_SECONDS} s a pass",
        parser.version()
    )
}

/// Gives `parser` the trees of the file at `path`; returns how many. A
/// missing file is an empty cache (the first run makes it).
pub fn load(parser: &Parser, path: &Path) -> Result<usize, ParseCacheError> {
    let io = |source| ParseCacheError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(e)),
    };
    let damaged = |line: usize, what: String| ParseCacheError::Damaged {
        path: path.to_path_buf(),
        line,
        what,
    };
    let mut reader = std::io::BufReader::new(file);
    let mut buf = String::new();
    let mut read_line = |buf: &mut String, line: usize| -> Result<bool, ParseCacheError> {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE)
            .read_line(buf)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => damaged(line, "not UTF-8".into()),
                _ => io(e),
            })?;
        if n as u64 == MAX_LINE && !buf.ends_with('\n') {
            return Err(damaged(line, format!("longer than {MAX_LINE} bytes")));
        }
        Ok(n > 0)
    };
    if !read_line(&mut buf, 1)? {
        return Err(damaged(1, "empty: no header".into()));
    }
    let header: Header = serde_json::from_str(&buf)
        .map_err(|e| damaged(1, format!("not a parse cache header: {e}")))?;
    if header.format != FORMAT || header.version != VERSION {
        return Err(damaged(
            1,
            format!(
                "format {:?} version {}, expected {FORMAT:?} version {VERSION}",
                header.format, header.version
            ),
        ));
    }
    let expected = made_by(parser);
    if header.parser != expected {
        return Err(ParseCacheError::OtherParser {
            path: path.to_path_buf(),
            found: header.parser,
            expected,
        });
    }
    let mut trees = Vec::new();
    let mut line = 1;
    loop {
        line += 1;
        if !read_line(&mut buf, line)? {
            break;
        }
        if trees.len() >= MAX_CACHED {
            return Err(damaged(
                line,
                format!("more than {MAX_CACHED} trees, the most a run keeps"),
            ));
        }
        let e: Entry = serde_json::from_str(&buf).map_err(|e| damaged(line, e.to_string()))?;
        // The key is the tokens joined by single spaces, as `Parser::trees`
        // makes it: a tree over another number of tokens would put words
        // out of range.
        let tokens = e.text.split(' ').count();
        let tree = Tree {
            tokens: tokens as u32,
            merges: e.merges,
        };
        if e.text.is_empty() || !tree.is_valid() {
            return Err(damaged(
                line,
                format!("not a binary tree over the {tokens} tokens of {:?}", e.text),
            ));
        }
        trees.push((e.text, tree));
    }
    Ok(parser.keep(trees))
}

/// Writes every tree `parser` keeps to `path` (through a temporary file
/// beside it, renamed: a run killed while writing leaves the previous
/// file, and two runs writing at once each rename a whole file of their
/// own, named by process id, rather than interleave in one); returns how
/// many.
pub fn save(parser: &Parser, path: &Path) -> Result<usize, ParseCacheError> {
    let io = |source| ParseCacheError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut trees = parser.kept();
    trees.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut w = BufWriter::new(std::fs::File::create(&tmp)?);
        let header = Header {
            format: FORMAT.into(),
            version: VERSION,
            parser: made_by(parser),
        };
        serde_json::to_writer(&mut w, &header)?;
        w.write_all(b"\n")?;
        for (text, tree) in &trees {
            serde_json::to_writer(
                &mut w,
                &Entry {
                    text: text.clone(),
                    merges: tree.merges.clone(),
                },
            )?;
            w.write_all(b"\n")?;
        }
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(io)?;
    Ok(trees.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser() -> Parser {
        Parser::new().expect("Link Grammar (apt-get install link-grammar)")
    }

    #[test]
    fn trees_saved_by_one_run_are_not_parsed_again_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trees.jsonl");
        let s = |t: &'static str| t.split(' ').collect::<Vec<&str>>();
        let sents = [s("a man is playing a guitar ."), s("the dog barked loudly")];
        let first = parser();
        // No file yet: an empty cache.
        assert_eq!(load(&first, &path).unwrap(), 0);
        let (trees, _) = first.trees(&sents).unwrap();
        assert_eq!(first.counts().0, 2);
        assert_eq!(save(&first, &path).unwrap(), 2);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );

        let second = parser();
        assert_eq!(load(&second, &path).unwrap(), 2);
        let (again, _) = second.trees(&sents).unwrap();
        assert_eq!(again, trees);
        assert_eq!(
            second.counts().0,
            0,
            "nothing parsed: every tree came from the file"
        );
        // Saved again, the file is the same bytes (sorted by text).
        let before = std::fs::read(&path).unwrap();
        save(&second, &path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    #[test]
    fn a_damaged_or_foreign_file_is_refused_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trees.jsonl");
        let p = parser();
        p.trees(&[vec!["a", "man", "sleeps"]]).unwrap();
        save(&p, &path).unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        let (header, body) = good.split_once('\n').unwrap();
        let refused = |text: &str| {
            std::fs::write(&path, text).unwrap();
            load(&parser(), &path).unwrap_err().to_string()
        };
        // A tree over the wrong number of tokens, or not a tree at all.
        let e = refused(&format!(
            "{header}\n{{\"text\":\"a man\",\"merges\":[[0,1],[1,2]]}}\n"
        ));
        assert!(e.contains("line 2") && e.contains("\"a man\""), "{e}");
        let e = refused(&format!(
            "{header}\n{{\"text\":\"a man sleeps\",\"merges\":[[0,0],[1,3]]}}\n"
        ));
        assert!(e.contains("line 2"), "{e}");
        let e = refused(&format!("{header}\n{body}{{\"text\":"));
        assert!(e.contains("line 3") && e.contains("damaged"), "{e}");
        assert!(refused("").contains("no header"));
        assert!(refused("{\"format\":\"x\",\"version\":1,\"parser\":\"y\"}\n").contains("format"));
        // Trees of another parser or other limits.
        let other = header.replace("2 s a pass", "5 s a pass");
        assert_ne!(other, header);
        let e = refused(&format!("{other}\n{body}"));
        assert!(
            e.contains("5 s a pass") && e.contains("remove the file"),
            "{e}"
        );
        // A line without an end, longer than any sentence's.
        let e = refused(&format!("{header}\n{}", "x".repeat(MAX_LINE as usize + 10)));
        assert!(e.contains("longer than"), "{e}");
    }
}
