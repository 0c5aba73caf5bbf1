//! The parser's trees kept in a file between runs (`paraforge train
//! --parse-cache`): Link Grammar takes most of a tree network's first
//! epoch (on the 84,612 back-translated pairs, over an hour of 2 cores at
//! 23 to 33 sentences a second, news sentences the slowest), and a second
//! seed, or a run resumed after a kill, would pay it again.
//!
//! The file is JSON lines: a header naming the parser and the limits the
//! trees were made under, then one `{"text", "merges"}` per sentence,
//! sorted by text. Trees change with the library, its dictionary, the
//! limits and how paraforge reads the parse ([`TREES_VERSION`]), so a file
//! made under others is refused rather than mixed in. Two runs writing one
//! file at once each replace it whole: the last writer's trees stay.

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
    #[error("parse cache {}: not a parse cache (its first line is no {FORMAT:?} header): name another file, or a new one", path.display())]
    NotACache { path: PathBuf },
    #[error("parse cache {}: its trees were made by {found}, this run's are made by {expected} (trees differ between them: remove the file or name another)", path.display())]
    OtherParser {
        path: PathBuf,
        found: String,
        expected: String,
    },
}

const FORMAT: &str = "paraforge-parse-cache";
const VERSION: u32 = 1;
/// Bumped whenever paraforge turns a parse into a tree otherwise (the
/// parse options in `link_grammar.rs`, the words shown to the parser,
/// `tree::from_constituents`): earlier files' trees are then refused.
pub const TREES_VERSION: u32 = 1;
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

#[derive(Deserialize)]
struct Entry {
    text: String,
    merges: Vec<[u32; 2]>,
}

/// An [`Entry`] as written, borrowing the tree kept.
#[derive(Serialize)]
struct EntryRef<'a> {
    text: &'a str,
    merges: &'a [[u32; 2]],
}

/// The parser and limits the trees depend on.
fn made_by(parser: &Parser) -> String {
    format!(
        "{}, at most {MAX_PARSE_TOKENS} tokens and {MAX_PARSE_SECONDS} s a pass, trees version {TREES_VERSION}",
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
    let not_a_cache = || ParseCacheError::NotACache {
        path: path.to_path_buf(),
    };
    // Any first line but this format's header: another file was named.
    let header = match read_line(&mut buf, 1) {
        Ok(true) => serde_json::from_str::<Header>(&buf)
            .ok()
            .filter(|h| h.format == FORMAT)
            .ok_or_else(not_a_cache)?,
        Ok(false) | Err(ParseCacheError::Damaged { .. }) => return Err(not_a_cache()),
        Err(e) => return Err(e),
    };
    if header.version != VERSION {
        return Err(damaged(
            1,
            format!(
                "format version {}, this build reads version {VERSION}",
                header.version
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
        // Sorted as `save` writes it: a repeat, whose trees could differ,
        // would otherwise be taken silently.
        if let Some((last, _)) = trees.last() {
            if e.text <= *last {
                return Err(damaged(
                    line,
                    format!(
                        "{:?} is not after the line before (the file is sorted)",
                        e.text
                    ),
                ));
            }
        }
        // The key is the tokens joined by single spaces, as `Parser::trees`
        // makes it: a tree over another number of tokens would put words
        // out of range.
        let words: Vec<&str> = e.text.split(' ').collect();
        let tokens = words.len();
        let tree = Tree {
            tokens: tokens as u32,
            merges: e.merges,
        };
        let why = if words.iter().any(|w| w.is_empty() || *w == "(" || *w == ")") {
            Some("an empty token or a bracket, which the parser is never shown".to_string())
        } else if tokens < 2 {
            Some("one token, which is never parsed".to_string())
        } else if !tree.is_valid() {
            Some(format!("not a binary tree over its {tokens} tokens"))
        } else if tokens > MAX_PARSE_TOKENS && tree != Tree::right_branching(tokens) {
            Some(format!(
                "{tokens} tokens, above the {MAX_PARSE_TOKENS} parsed, and not right-branching"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(damaged(line, format!("{:?}: {why}", e.text)));
        }
        trees.push((e.text, tree));
    }
    Ok(parser.keep(trees))
}

/// Writes every tree `parser` keeps to `path` (through a temporary file
/// of its own beside it, renamed: a run killed while writing leaves the
/// previous file, and two runs writing at once each rename a whole file
/// rather than interleave in one); returns how many.
pub fn save(parser: &Parser, path: &Path) -> Result<usize, ParseCacheError> {
    let io = |source| ParseCacheError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut trees = parser.kept();
    trees.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let write = || -> std::io::Result<()> {
        let tmp = temporary_beside(path)?;
        let mut w = BufWriter::new(tmp);
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
                &EntryRef {
                    text,
                    merges: &tree.merges,
                },
            )?;
            w.write_all(b"\n")?;
        }
        let tmp = w.into_inner().map_err(|e| e.into_error())?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    write().map_err(io)?;
    Ok(trees.len())
}

/// Whether `path` can be written, tried as [`save`] writes it (a temporary
/// file beside it), without rewriting what is there.
pub fn writable(path: &Path) -> Result<(), ParseCacheError> {
    temporary_beside(path)
        .map(drop)
        .map_err(|source| ParseCacheError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// A file of its own beside `path`, removed unless persisted.
fn temporary_beside(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".parse-cache-")
        .tempfile_in(dir)
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
        // Another file named: not called damaged, not to be removed.
        for other in [
            "",
            "{\"format\":\"x\",\"version\":1,\"parser\":\"y\"}\n",
            "a\tb\n",
        ] {
            let e = refused(other);
            assert!(
                e.contains("not a parse cache") && !e.contains("remove"),
                "{e}"
            );
        }
        // Out of order or repeated (its tree might differ), a bracket the
        // parser never sees, one token, and a long sentence's tree that is
        // not the right-branching one such sentences get.
        let entry =
            |text: &str, merges: &str| format!("{{\"text\":\"{text}\",\"merges\":{merges}}}\n");
        let e = refused(&format!(
            "{header}\n{}{}",
            entry("b c", "[[0,1]]"),
            entry("a c", "[[0,1]]")
        ));
        assert!(e.contains("line 3") && e.contains("sorted"), "{e}");
        let e = refused(&format!(
            "{header}\n{}{}",
            entry("b c", "[[0,1]]"),
            entry("b c", "[[0,1]]")
        ));
        assert!(e.contains("line 3"), "{e}");
        let e = refused(&format!("{header}\n{}", entry("( a", "[[0,1]]")));
        assert!(e.contains("bracket"), "{e}");
        let e = refused(&format!("{header}\n{}", entry("a", "[]")));
        assert!(e.contains("one token"), "{e}");
        let long: Vec<String> = (0..61).map(|i| format!("w{i}")).collect();
        let left: Vec<String> = (0..60)
            .map(|k| {
                if k == 0 {
                    "[0,1]".to_string()
                } else {
                    format!("[{},{}]", 60 + k, k + 1)
                }
            })
            .collect();
        let e = refused(&format!(
            "{header}\n{}",
            entry(&long.join(" "), &format!("[{}]", left.join(",")))
        ));
        assert!(e.contains("not right-branching"), "{e}");
        let right = Tree::right_branching(61).merges;
        let ok = format!(
            "{header}\n{}",
            entry(&long.join(" "), &serde_json::to_string(&right).unwrap())
        );
        std::fs::write(&path, ok).unwrap();
        assert_eq!(load(&parser(), &path).unwrap(), 1);
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
