//! The codes of rejected lines (`RejectReason::code` in the job crate's
//! bitext readers): stable names for counting rejects by reason
//! (`_manifest.json`, status, metrics).

/// The codes of malformed lines.
pub const MALFORMED_CODES: &[&str] = &[
    "columns",
    "invalid_utf8",
    "legacy_encoding",
    "empty_source",
    "empty_reference",
    "too_long",
    "unaligned",
    "control_character",
    "line_too_long",
];

/// The codes of `[filters]` rules (pairs dropped on purpose).
pub const FILTER_CODES: &[&str] = &[
    "too_few_tokens",
    "too_many_tokens",
    "length_ratio",
    "copy",
    "few_letters",
    "language",
    "duplicate",
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
