//! Why a line of a bitext was not used (malformed input, or a `[filters]`
//! rule), with where it was; and telling a legacy 8-bit encoding from
//! damaged UTF-8, so that a whole file in Windows-1250 is named once.

/// Why a line was not used: malformed input, or a `[filters]` rule
/// ([`crate::filters`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RejectReason {
    ColumnCount {
        found: usize,
        expected: usize,
    },
    InvalidUtf8,
    /// Not UTF-8, and the bytes look like a single-byte legacy encoding.
    LegacyEncoding,
    EmptySource,
    EmptyReference,
    /// An input of pairs with an empty translation.
    EmptyTranslation,
    /// An input of pairs whose score column is not a finite number.
    BadScore {
        column: usize,
        text: String,
    },
    TooLong {
        side: &'static str,
        chars: usize,
        max: usize,
    },
    /// The aligned reference file ended before the source file, or after.
    Unaligned,
    /// A NUL or other C0/DEL control character inside a side (binary junk).
    ControlCharacter {
        side: &'static str,
        code: u32,
    },
    /// `[filters]`: fewer tokens than `min_tokens` on a side.
    TooFewTokens {
        side: &'static str,
        tokens: usize,
        min: usize,
    },
    /// `[filters]`: more tokens than `max_tokens` on a side.
    TooManyTokens {
        side: &'static str,
        tokens: usize,
        max: usize,
    },
    /// `[filters]`: the longer side over the shorter, in tokens, is above
    /// `max_length_ratio`.
    LengthRatio {
        source: usize,
        reference: usize,
        max: f64,
    },
    /// `[filters] drop_copies`: the source is the reference (an untranslated copy).
    Copy,
    /// `[filters]`: letters are less than `min_letter_ratio` of a side's
    /// non-space characters.
    FewLetters {
        side: &'static str,
        letters: usize,
        chars: usize,
        min: f64,
    },
    /// `[filters] dedup_sources`: the same source text as an earlier line
    /// of the job.
    Duplicate,
    /// `[filters]`: a side is in another language than the job says.
    Language {
        side: &'static str,
        expected: &'static str,
        detected: &'static str,
        confidence: f64,
    },
    /// The line is longer than [`max_line_bytes`] allows: it was skipped
    /// to its newline without being held in memory. `bytes` is what it
    /// took in the file, newline included; `reference` says the aligned
    /// reference file's line was the long one.
    LineTooLong {
        bytes: u64,
        max: usize,
        reference: bool,
    },
}

impl RejectReason {
    /// A stable name for counting rejects by reason (`_manifest.json`,
    /// status, metrics): one per variant.
    pub fn code(&self) -> &'static str {
        use paraforge_core::rejects::code;
        match self {
            RejectReason::ColumnCount { .. } => code::COLUMNS,
            RejectReason::InvalidUtf8 => code::INVALID_UTF8,
            RejectReason::LegacyEncoding => code::LEGACY_ENCODING,
            RejectReason::EmptySource => code::EMPTY_SOURCE,
            RejectReason::EmptyReference => code::EMPTY_REFERENCE,
            RejectReason::EmptyTranslation => code::EMPTY_TRANSLATION,
            RejectReason::BadScore { .. } => code::BAD_SCORE,
            RejectReason::TooLong { .. } => code::TOO_LONG,
            RejectReason::Unaligned => code::UNALIGNED,
            RejectReason::ControlCharacter { .. } => code::CONTROL_CHARACTER,
            RejectReason::TooFewTokens { .. } => code::TOO_FEW_TOKENS,
            RejectReason::TooManyTokens { .. } => code::TOO_MANY_TOKENS,
            RejectReason::LengthRatio { .. } => code::LENGTH_RATIO,
            RejectReason::Copy => code::COPY,
            RejectReason::FewLetters { .. } => code::FEW_LETTERS,
            RejectReason::Language { .. } => code::LANGUAGE,
            RejectReason::Duplicate => code::DUPLICATE,
            RejectReason::LineTooLong { .. } => code::LINE_TOO_LONG,
        }
    }

    /// Whether the code names a `[filters]` rule rather than a malformed line.
    pub fn is_filter_code(code: &str) -> bool {
        paraforge_core::rejects::is_filter_code(code)
    }

    /// The code as one of the known codes (the `'static` copy), if it is one.
    pub fn known_code(code: &str) -> Option<&'static str> {
        paraforge_core::rejects::known_code(code)
    }
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RejectReason::ColumnCount { found, expected } => {
                write!(f, "{found} tab-separated columns, expected {expected}")
            }
            RejectReason::InvalidUtf8 => write!(f, "invalid UTF-8"),
            RejectReason::LegacyEncoding => write!(f, "invalid UTF-8 ({LEGACY_HINT})"),
            RejectReason::EmptySource => write!(f, "empty source side"),
            RejectReason::EmptyReference => write!(f, "empty reference side"),
            RejectReason::EmptyTranslation => write!(f, "empty translation"),
            RejectReason::BadScore { column, text } => write!(
                f,
                "column {column} (input.translation_score_column) holds {text:?}, not a finite number"
            ),
            RejectReason::TooLong { side, chars, max } => {
                write!(
                    f,
                    "{side} side has {chars} characters, more than the limit of {max}"
                )
            }
            RejectReason::Unaligned => {
                write!(f, "the aligned files have different numbers of lines")
            }
            RejectReason::ControlCharacter { side, code } => {
                write!(f, "{side} side contains control character U+{code:04X}")
            }
            RejectReason::TooFewTokens { side, tokens, min } => write!(
                f,
                "{side} side has {tokens} tokens, fewer than filters.min_tokens = {min}"
            ),
            RejectReason::TooManyTokens { side, tokens, max } => write!(
                f,
                "{side} side has {tokens} tokens, more than filters.max_tokens = {max}"
            ),
            RejectReason::LengthRatio {
                source,
                reference,
                max,
            } => write!(
                f,
                "{source} source tokens against {reference} reference tokens, a ratio above filters.max_length_ratio = {max}"
            ),
            RejectReason::Copy => write!(f, "the source is the reference (filters.drop_copies)"),
            RejectReason::Duplicate => write!(
                f,
                "the same source as an earlier line of the job (filters.dedup_sources)"
            ),
            RejectReason::FewLetters {
                side,
                letters,
                chars,
                min,
            } => write!(
                f,
                "{side} side has {letters} letters in {chars} characters, less than filters.min_letter_ratio = {min}"
            ),
            RejectReason::Language {
                side,
                expected,
                detected,
                confidence,
            } => write!(
                f,
                "{side} side looks like {detected} (confidence {confidence:.2}), not {expected}"
            ),
            RejectReason::LineTooLong {
                bytes,
                max,
                reference,
            } => write!(
                f,
                "{} takes {bytes} bytes, more than the limit of {max} that input.max_chars sets (8 bytes a character and 64 KiB); skipped unread",
                if *reference {
                    "the reference file's line"
                } else {
                    "the line"
                }
            ),
        }
    }
}

/// What to tell a user whose text is in a legacy 8-bit encoding; Czech is
/// this project's first source language, hence the code page named.
pub const LEGACY_HINT: &str = "looks like a legacy 8-bit encoding such as Windows-1250/ISO-8859-2; convert with iconv -f cp1250 -t utf-8";

/// Whether `bytes`, which are not valid UTF-8, look like text in a
/// single-byte legacy encoding rather than UTF-8 with a damaged character:
/// there are more stray bytes (0x80-0xFF outside any UTF-8 sequence) than
/// well-formed multi-byte characters, and no control bytes, which text in
/// any 8-bit encoding lacks and UTF-16 or binary data has.
pub fn looks_legacy_8bit(bytes: &[u8]) -> bool {
    if bytes
        .iter()
        .any(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
    {
        return false;
    }
    let (mut stray, mut multibyte) = (0usize, 0usize);
    let mut rest = bytes;
    loop {
        let (valid, bad) = match std::str::from_utf8(rest) {
            Ok(s) => (s, 0),
            Err(e) => {
                let (ok, tail) = rest.split_at(e.valid_up_to());
                let ok = std::str::from_utf8(ok).unwrap_or_default();
                // No error length: an incomplete sequence ends the line.
                (ok, e.error_len().unwrap_or(tail.len()))
            }
        };
        multibyte += valid.chars().filter(|c| !c.is_ascii()).count();
        stray += bad;
        if bad == 0 {
            break;
        }
        rest = &rest[valid.len() + bad..];
    }
    stray > multibyte
}

/// The reason for a line that is not UTF-8.
pub(crate) fn not_utf8(bytes: &[u8]) -> RejectReason {
    if looks_legacy_8bit(bytes) {
        RejectReason::LegacyEncoding
    } else {
        RejectReason::InvalidUtf8
    }
}

/// A line that was not used, with where it was.
#[derive(Debug, Clone, PartialEq)]
pub struct Reject {
    pub file: String,
    pub line: u64,
    pub reason: RejectReason,
    /// The raw line (at most 1 KB of it), lossily decoded, for the rejects file.
    pub text: String,
}
