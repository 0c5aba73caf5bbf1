//! Pre-translation filters (`[filters]` in the job config): pairs not worth
//! the model's time are dropped in the worker before they reach it, each
//! written to `_rejects/` with its reason and counted by reason
//! ([`RejectReason::code`]). Definitions and measured figures:
//! docs/filters.md.
//!
//! Rules run in a fixed order and the first that fails names the reason:
//! token counts, length ratio, copies, letters, language (the costliest
//! last). Every rule is off unless its key is set.

use serde::{Deserialize, Serialize};

use crate::bitext::RejectReason;

/// The `[filters]` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filters {
    /// Fewest tokens (paraforge's tokenizer: words and punctuation) on each side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<usize>,
    /// Most tokens on each side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// Largest ratio of the longer side to the shorter, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length_ratio: Option<f64>,
    /// Drop pairs whose source is their reference (case and spacing aside).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drop_copies: bool,
    /// Smallest share of letters among a side's non-space characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_letter_ratio: Option<f64>,
    /// The source side's language (ISO 639-3, e.g. "ces"): a source
    /// detected as another language is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_lang: Option<String>,
    /// The reference side's language (e.g. "eng").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_lang: Option<String>,
    /// A side is dropped only when the detector names another language with
    /// at least this confidence (0-1; default 0.3): short sentences are
    /// often detected wrongly with low confidence (docs/filters.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lang_min_confidence: Option<f64>,
    /// Drop every pair whose source text occurred earlier in the job (input
    /// files in config order, lines in file order), exactly, byte for byte.
    /// Found when the job is planned, in a pass that spills source hashes to
    /// disk (`coordinator::dedup`), so no process holds the job's pairs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dedup_sources: bool,
    /// The languages the detector chooses among (ISO 639-3). Default: the
    /// job's two languages when both are given (which side is in which
    /// language: the common junk, and the most accurate setting), all the
    /// detector knows (about 70) when one is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lang_candidates: Vec<String>,
    /// Largest share of the job's input lines the rules may drop before the
    /// job ends incomplete instead of successful (0-1; default
    /// [`DEFAULT_MAX_DROP_RATE`]; 1 turns the check off). Duplicates are
    /// not counted ([`counted_drops`]). Rules that drop most of a corpus are
    /// nearly always set wrong (swapped `source_lang` and
    /// `reference_lang` drop nine pairs in ten), and `job.max_reject_rate`
    /// counts malformed lines only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_drop_rate: Option<f64>,
}

/// `filters.max_drop_rate` when the key is left out: `job.max_reject_rate`'s
/// default, for the same reason (most of the input gone is a mistake).
pub const DEFAULT_MAX_DROP_RATE: f64 = 0.5;

/// The drops that count against `filters.max_drop_rate`, from a job's
/// rejects by reason code: every `[filters]` rule's but `duplicate`. A
/// repeated source drops a pair the job keeps once; how many a corpus has
/// says nothing about the rules' settings.
pub fn counted_drops(by_reason: &std::collections::BTreeMap<String, u64>) -> u64 {
    by_reason
        .iter()
        .filter(|(code, _)| RejectReason::is_filter_code(code) && *code != "duplicate")
        .map(|(_, n)| n)
        .sum()
}

/// The end-of-job check of `filters.max_drop_rate`: `dropped_by_filters`
/// (see [`counted_drops`]) of the job's `lines` input lines. The error
/// says what to change; the job must then end incomplete, not successful.
pub fn check_drop_rate(dropped_by_filters: u64, lines: u64, cfg: &Filters) -> Result<(), String> {
    let limit = cfg.max_drop_rate.unwrap_or(DEFAULT_MAX_DROP_RATE);
    let rate = dropped_by_filters as f64 / lines.max(1) as f64;
    if rate <= limit {
        return Ok(());
    }
    let lang = if cfg.source_lang.is_some() || cfg.reference_lang.is_some() {
        format!(
            "check that filters.source_lang ({}) and filters.reference_lang ({}) name the source and reference columns' languages (swapped, they drop nearly every pair), then",
            cfg.source_lang.as_deref().unwrap_or("not set"),
            cfg.reference_lang.as_deref().unwrap_or("not set")
        )
    } else {
        "check".to_string()
    };
    Err(format!(
        "the [filters] rules dropped {:.1}% of the input lines ({dropped_by_filters} of {lines}; duplicates not counted), more than filters.max_drop_rate = {limit} allows: {lang} the other [filters] keys (see _rejects/ and rejects_by_reason), or raise filters.max_drop_rate",
        100.0 * rate
    ))
}

/// A `[filters]` key with a value it cannot take; `key` is the config key
/// (`filters.min_tokens`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{key}`: {message}")]
pub struct FilterError {
    pub key: &'static str,
    pub message: String,
}

const DEFAULT_LANG_CONFIDENCE: f64 = 0.3;

impl Filters {
    /// Whether no rule is on.
    pub fn is_empty(&self) -> bool {
        *self == Filters::default()
    }

    /// Checks every key; the error names the first bad one.
    pub fn validate(&self) -> Result<(), FilterError> {
        PreFilter::new(self).map(|_| ())
    }
}

/// `[filters]` ready to run: the language detector built once.
#[derive(Debug)]
pub struct PreFilter {
    cfg: Filters,
    detector: Option<whatlang::Detector>,
    source_lang: Option<whatlang::Lang>,
    reference_lang: Option<whatlang::Lang>,
    lang_min_confidence: f64,
}

fn lang(key: &'static str, code: &str) -> Result<whatlang::Lang, FilterError> {
    whatlang::Lang::from_code(code.trim().to_ascii_lowercase()).ok_or_else(|| FilterError {
        key,
        message: format!(
            "unknown language {code:?}: use an ISO 639-3 code the detector knows, e.g. \"ces\", \"eng\", \"deu\""
        ),
    })
}

impl PreFilter {
    pub fn new(cfg: &Filters) -> Result<PreFilter, FilterError> {
        let bad = |key, message: String| Err(FilterError { key, message });
        if cfg.min_tokens == Some(0) {
            return bad(
                "filters.min_tokens",
                "must be at least 1 (leave it out for no minimum)".into(),
            );
        }
        if let (Some(lo), Some(hi)) = (cfg.min_tokens, cfg.max_tokens) {
            if hi < lo {
                return bad(
                    "filters.max_tokens",
                    format!("{hi} is less than filters.min_tokens = {lo}"),
                );
            }
        }
        if cfg.max_tokens == Some(0) {
            return bad("filters.max_tokens", "must be at least 1".into());
        }
        if let Some(r) = cfg.max_length_ratio {
            if !(r.is_finite() && r >= 1.0) {
                return bad(
                    "filters.max_length_ratio",
                    format!("{r} must be a number of at least 1"),
                );
            }
        }
        if let Some(r) = cfg.min_letter_ratio {
            if !(r > 0.0 && r <= 1.0) {
                return bad("filters.min_letter_ratio", format!("{r} must be in (0, 1]"));
            }
        }
        let source_lang = cfg
            .source_lang
            .as_deref()
            .map(|c| lang("filters.source_lang", c))
            .transpose()?;
        let reference_lang = cfg
            .reference_lang
            .as_deref()
            .map(|c| lang("filters.reference_lang", c))
            .transpose()?;
        if let Some(r) = cfg.max_drop_rate {
            if !(0.0..=1.0).contains(&r) {
                return bad(
                    "filters.max_drop_rate",
                    format!("{r} is not a share between 0 and 1"),
                );
            }
        }
        let lang_min_confidence = cfg.lang_min_confidence.unwrap_or(DEFAULT_LANG_CONFIDENCE);
        if !(0.0..=1.0).contains(&lang_min_confidence) {
            return bad(
                "filters.lang_min_confidence",
                format!("{lang_min_confidence} must be in [0, 1]"),
            );
        }
        let uses_lang = source_lang.is_some() || reference_lang.is_some();
        if !uses_lang && (cfg.lang_min_confidence.is_some() || !cfg.lang_candidates.is_empty()) {
            return bad(
                if cfg.lang_candidates.is_empty() {
                    "filters.lang_min_confidence"
                } else {
                    "filters.lang_candidates"
                },
                "has no effect without filters.source_lang or filters.reference_lang".into(),
            );
        }
        let detector = if !uses_lang {
            None
        } else if cfg.lang_candidates.is_empty() {
            Some(match (source_lang, reference_lang) {
                (Some(a), Some(b)) if a != b => whatlang::Detector::with_allowlist(vec![a, b]),
                _ => whatlang::Detector::new(),
            })
        } else {
            let mut list = Vec::new();
            for c in &cfg.lang_candidates {
                list.push(lang("filters.lang_candidates", c)?);
            }
            for want in source_lang.iter().chain(&reference_lang) {
                if !list.contains(want) {
                    return bad(
                        "filters.lang_candidates",
                        format!("must include {:?}, a language the job expects", want.code()),
                    );
                }
            }
            Some(whatlang::Detector::with_allowlist(list))
        };
        Ok(PreFilter {
            cfg: cfg.clone(),
            detector,
            source_lang,
            reference_lang,
            lang_min_confidence,
        })
    }

    /// Whether any rule is on.
    pub fn is_active(&self) -> bool {
        !self.cfg.is_empty()
    }

    /// The first rule the pair fails, or `None` to keep it.
    pub fn check(&self, source: &str, reference: &str) -> Option<RejectReason> {
        let c = &self.cfg;
        if c.min_tokens.is_some() || c.max_tokens.is_some() || c.max_length_ratio.is_some() {
            let (s, r) = (
                paraforge_core::tokenize(source).len(),
                paraforge_core::tokenize(reference).len(),
            );
            for (side, n) in [("source", s), ("reference", r)] {
                if let Some(min) = c.min_tokens.filter(|&m| n < m) {
                    return Some(RejectReason::TooFewTokens {
                        side,
                        tokens: n,
                        min,
                    });
                }
                if let Some(max) = c.max_tokens.filter(|&m| n > m) {
                    return Some(RejectReason::TooManyTokens {
                        side,
                        tokens: n,
                        max,
                    });
                }
            }
            if let Some(max) = c.max_length_ratio {
                let (lo, hi) = (s.min(r), s.max(r));
                // A side with no tokens has an infinite ratio to any other.
                if hi > 0 && (lo == 0 || hi as f64 > max * lo as f64) {
                    return Some(RejectReason::LengthRatio {
                        source: s,
                        reference: r,
                        max,
                    });
                }
            }
        }
        if c.drop_copies && same_text(source, reference) {
            return Some(RejectReason::Copy);
        }
        if let Some(min) = c.min_letter_ratio {
            for (side, text) in [("source", source), ("reference", reference)] {
                let (letters, chars) = letters(text);
                if chars > 0 && (letters as f64) < min * chars as f64 {
                    return Some(RejectReason::FewLetters {
                        side,
                        letters,
                        chars,
                        min,
                    });
                }
            }
        }
        if let Some(d) = &self.detector {
            for (side, text, want) in [
                ("source", source, self.source_lang),
                ("reference", reference, self.reference_lang),
            ] {
                let Some(want) = want else { continue };
                if let Some(info) = d.detect(text) {
                    if info.lang() != want && info.confidence() >= self.lang_min_confidence {
                        return Some(RejectReason::Language {
                            side,
                            expected: want.code(),
                            detected: info.lang().code(),
                            confidence: info.confidence(),
                        });
                    }
                }
            }
        }
        None
    }
}

/// Equal once case and runs of white space are ignored.
fn same_text(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        s.split_whitespace()
            .flat_map(|w| w.chars().flat_map(char::to_lowercase).chain(Some(' ')))
            .collect::<String>()
    };
    norm(a) == norm(b)
}

/// Letters and non-space characters of a side.
fn letters(text: &str) -> (usize, usize) {
    text.chars()
        .filter(|c| !c.is_whitespace())
        .fold((0, 0), |(l, n), c| {
            (l + usize::from(c.is_alphabetic()), n + 1)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(toml_text: &str) -> PreFilter {
        let cfg: Filters = toml::from_str(toml_text).unwrap();
        PreFilter::new(&cfg).unwrap()
    }

    fn code(f: &PreFilter, s: &str, r: &str) -> Option<&'static str> {
        f.check(s, r).map(|r| r.code())
    }

    // Real lines of the bundled sample (data/sample), and the junk that
    // crawled bitexts hold.
    const CS: &str =
        "Interpretka s houslemi hraje na ulici zatímco ji pozoruje žena s modrou kytarou.";
    const EN: &str =
        "A female performer with a violin plays on a street while a woman with a blue guitar looks on.";

    #[test]
    fn every_rule_drops_what_it_should_and_keeps_the_rest() {
        let f = filter("min_tokens = 3\nmax_tokens = 25");
        assert_eq!(code(&f, CS, EN), None);
        assert_eq!(code(&f, "Ahoj.", EN), Some("too_few_tokens"));
        assert_eq!(code(&f, CS, &format!("{EN} {EN}")), Some("too_many_tokens"));

        let f = filter("max_length_ratio = 2.0");
        assert_eq!(code(&f, CS, EN), None);
        assert_eq!(code(&f, "Muž.", EN), Some("length_ratio"));
        assert_eq!(code(&f, "", EN), Some("length_ratio"));

        let f = filter("drop_copies = true");
        assert_eq!(code(&f, CS, EN), None);
        assert_eq!(code(&f, "Home  Page", "home page"), Some("copy"));
        assert_eq!(code(&f, EN, EN), Some("copy"));

        let f = filter("min_letter_ratio = 0.5");
        assert_eq!(code(&f, CS, EN), None);
        assert_eq!(
            code(&f, "1999 - 2004 | 12,5 %", "1999 - 2004 | 12.5%"),
            Some("few_letters")
        );
        assert_eq!(code(&f, "2004", "Year 2004"), Some("few_letters"));

        // Among all 70 languages this Czech line looks Slovenian (0.50
        // confidence): why the default candidates are the job's two.
        let all = filter(
            "source_lang = \"ces\"\nreference_lang = \"eng\"\nlang_min_confidence = 0.5\n\
             lang_candidates = [\"ces\", \"eng\", \"slv\", \"slk\", \"deu\"]",
        );
        assert_eq!(code(&all, CS, EN), Some("language"));
        let f = filter("source_lang = \"ces\"\nreference_lang = \"eng\"");
        assert_eq!(code(&f, CS, EN), None);
        assert_eq!(code(&f, EN, EN), Some("language"));
        assert_eq!(code(&f, CS, CS), Some("language"));
        let why = f.check(CS, CS).unwrap().to_string();
        assert!(why.contains("reference side looks like ces"), "{why}");
    }

    #[test]
    fn rules_run_in_order_and_an_empty_section_keeps_everything() {
        let f = filter("min_tokens = 2\ndrop_copies = true\nsource_lang = \"ces\"");
        // A one-token copy in English fails the token rule first.
        assert_eq!(code(&f, "Hello", "Hello"), Some("too_few_tokens"));
        let none = filter("");
        assert!(!none.is_active());
        assert_eq!(code(&none, "", ""), None);
        assert_eq!(code(&none, EN, EN), None);
    }

    #[test]
    fn every_code_is_listed_and_filter_codes_are_told_apart() {
        let f = filter(
            "min_tokens = 3\nmax_tokens = 25\nmax_length_ratio = 2.0\ndrop_copies = true\n\
             min_letter_ratio = 0.5\nsource_lang = \"ces\"\nreference_lang = \"eng\"",
        );
        let long = format!("{EN} {EN}");
        for (s, r) in [
            ("Ano.", EN),
            (CS, long.as_str()),
            ("Muž a pes.", EN),
            (EN, EN),
            ("12 %", "12 %x"),
            (EN, "A cat."),
        ] {
            let why = f
                .check(s, r)
                .unwrap_or_else(|| panic!("{s:?} / {r:?} kept"));
            assert!(RejectReason::known_code(why.code()).is_some(), "{why:?}");
            assert!(RejectReason::is_filter_code(why.code()), "{why:?}");
        }
        for code in ["columns", "invalid_utf8", "too_long", "unaligned"] {
            assert!(
                RejectReason::known_code(code).is_some() && !RejectReason::is_filter_code(code)
            );
        }
    }

    /// Swapped languages: most pairs dropped by the language rule. The
    /// job must not end as a success; duplicates do not count.
    #[test]
    fn dropping_most_lines_fails_the_drop_rate_naming_key_and_languages() {
        let swapped: Filters =
            toml::from_str("source_lang = \"eng\"\nreference_lang = \"ces\"").unwrap();
        let e = check_drop_rate(920, 1000, &swapped).unwrap_err();
        assert!(
            e.contains("92.0% of the input lines (920 of 1000")
                && e.contains("filters.max_drop_rate = 0.5")
                && e.contains("filters.source_lang (eng)")
                && e.contains("filters.reference_lang (ces)"),
            "{e}"
        );
        assert_eq!(check_drop_rate(500, 1000, &swapped), Ok(()));
        assert_eq!(check_drop_rate(0, 0, &swapped), Ok(()));
        let lenient: Filters = toml::from_str("min_tokens = 3\nmax_drop_rate = 0.95").unwrap();
        assert_eq!(check_drop_rate(920, 1000, &lenient), Ok(()));
        let e = check_drop_rate(960, 1000, &lenient).unwrap_err();
        assert!(e.contains("= 0.95") && !e.contains("source_lang"), "{e}");
        let off: Filters = toml::from_str("max_drop_rate = 1.0").unwrap();
        assert_eq!(check_drop_rate(1000, 1000, &off), Ok(()));
        let by_reason = [
            ("language", 600),
            ("duplicate", 300),
            ("columns", 50),
            ("copy", 10),
        ]
        .into_iter()
        .map(|(c, n)| (c.to_string(), n))
        .collect();
        assert_eq!(counted_drops(&by_reason), 610);
    }

    #[test]
    fn bad_keys_are_named() {
        for (text, key) in [
            ("min_tokens = 0", "min_tokens"),
            ("min_tokens = 5\nmax_tokens = 2", "max_tokens"),
            ("max_length_ratio = 0.5", "max_length_ratio"),
            ("min_letter_ratio = 1.5", "min_letter_ratio"),
            ("source_lang = \"czech\"", "source_lang"),
            ("reference_lang = \"xx\"", "reference_lang"),
            (
                "source_lang = \"ces\"\nlang_min_confidence = 2.0",
                "lang_min_confidence",
            ),
            ("lang_candidates = [\"ces\"]", "lang_candidates"),
            ("max_drop_rate = 1.5", "max_drop_rate"),
            ("max_drop_rate = -0.1", "max_drop_rate"),
            (
                "source_lang = \"ces\"\nlang_candidates = [\"eng\"]",
                "lang_candidates",
            ),
        ] {
            let cfg: Filters = toml::from_str(text).unwrap();
            let e = cfg.validate().unwrap_err();
            assert_eq!(e.key, format!("filters.{key}"), "{text}: {e}");
            assert!(e.to_string().contains(&format!("filters.{key}")), "{e}");
        }
        assert!(toml::from_str::<Filters>("min_token = 3").is_err());
    }
}
