//! The codes of rejected lines (`RejectReason::code` in the job crate's
//! bitext readers): stable names for counting rejects by reason
//! (`_manifest.json`, status, metrics). Each code is spelled once, here;
//! the job crate names a reason's code by its constant.

/// Every code, by name.
pub mod code {
    /// A line without the columns its format has.
    pub const COLUMNS: &str = "columns";
    pub const INVALID_UTF8: &str = "invalid_utf8";
    pub const LEGACY_ENCODING: &str = "legacy_encoding";
    pub const EMPTY_SOURCE: &str = "empty_source";
    pub const EMPTY_REFERENCE: &str = "empty_reference";
    /// An input of pairs with an empty translation.
    pub const EMPTY_TRANSLATION: &str = "empty_translation";
    /// An input of pairs whose score column is not a finite number.
    pub const BAD_SCORE: &str = "bad_score";
    pub const TOO_LONG: &str = "too_long";
    pub const UNALIGNED: &str = "unaligned";
    pub const CONTROL_CHARACTER: &str = "control_character";
    pub const LINE_TOO_LONG: &str = "line_too_long";
    pub const TOO_FEW_TOKENS: &str = "too_few_tokens";
    pub const TOO_MANY_TOKENS: &str = "too_many_tokens";
    pub const LENGTH_RATIO: &str = "length_ratio";
    pub const COPY: &str = "copy";
    pub const FEW_LETTERS: &str = "few_letters";
    pub const LANGUAGE: &str = "language";
    pub const DUPLICATE: &str = "duplicate";
}

/// The codes of malformed lines.
pub const MALFORMED_CODES: &[&str] = &[
    code::COLUMNS,
    code::INVALID_UTF8,
    code::LEGACY_ENCODING,
    code::EMPTY_SOURCE,
    code::EMPTY_REFERENCE,
    code::EMPTY_TRANSLATION,
    code::BAD_SCORE,
    code::TOO_LONG,
    code::UNALIGNED,
    code::CONTROL_CHARACTER,
    code::LINE_TOO_LONG,
];

/// The codes of `[filters]` rules (pairs dropped on purpose).
pub const FILTER_CODES: &[&str] = &[
    code::TOO_FEW_TOKENS,
    code::TOO_MANY_TOKENS,
    code::LENGTH_RATIO,
    code::COPY,
    code::FEW_LETTERS,
    code::LANGUAGE,
    code::DUPLICATE,
];

/// Whether the code names a `[filters]` rule rather than a malformed line.
pub fn is_filter_code(code: &str) -> bool {
    FILTER_CODES.contains(&code)
}

/// The code as one of the known codes (the `'static` copy), if it is one.
pub fn known_code(code: &str) -> Option<&'static str> {
    MALFORMED_CODES
        .iter()
        .chain(FILTER_CODES)
        .find(|c| **c == code)
        .copied()
}
