//! The languages of a job's two sides, read once for planning (is the
//! scorer's language the references'?) and for the manifest and card.

use paraforge_core::layout::card::{hub_language, Languages};
use paraforge_job::filters::Filters;

/// The languages of a job's sides, each from `[filters]`' `source_lang`
/// or `reference_lang` where set, else from the model's
/// `tokenizer_config.json` (`source_lang`, `target_lang`, as Marian exports
/// have them) where the coordinator can read it.
pub fn of_job(f: &Filters, model_dir: Option<&str>) -> Languages {
    let tokenizer = match (&f.source_lang, &f.reference_lang, model_dir) {
        (None, _, Some(dir)) | (_, None, Some(dir)) => {
            std::fs::read(std::path::Path::new(dir).join("tokenizer_config.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        }
        _ => None,
    };
    languages_from(f, tokenizer.as_ref())
}

/// [`of_job`] from the filters and the tokenizer's config: each
/// side on its own, as the Hub's `language` wants the codes (ISO 639-1
/// where there is one; the filters name ISO 639-3).
fn languages_from(f: &Filters, tokenizer: Option<&serde_json::Value>) -> Languages {
    const FILTERS: &str = "[filters]";
    const TOKENIZER: &str = "the translation model's tokenizer_config.json";
    let from_tokenizer = |k: &str| {
        tokenizer
            .and_then(|c| c[k].as_str())
            .filter(|l| !l.trim().is_empty())
            .map(|l| (hub_language(l), TOKENIZER))
    };
    let source = f
        .source_lang
        .as_deref()
        .map(|l| (hub_language(l), FILTERS))
        .or_else(|| from_tokenizer("source_lang"));
    let reference = f
        .reference_lang
        .as_deref()
        .map(|l| (hub_language(l), FILTERS))
        .or_else(|| from_tokenizer("target_lang"));
    let from = match (&source, &reference) {
        (Some((_, a)), Some((_, b))) if a == b => a.to_string(),
        (Some((_, a)), Some((_, b))) => format!("source from {a}, reference from {b}"),
        (Some((_, a)), None) | (None, Some((_, a))) => a.to_string(),
        (None, None) => String::new(),
    };
    Languages {
        source: source.map(|(l, _)| l),
        reference: reference.map(|(l, _)| l),
        from,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each side from `[filters]` where set, else from the tokenizer, in
    /// the Hub's ISO 639-1.
    #[test]
    fn languages_fill_each_side_and_use_the_hubs_codes() {
        let tok = serde_json::json!({"source_lang": "cs", "target_lang": "eng"});
        let f = |s: Option<&str>, r: Option<&str>| paraforge_job::filters::Filters {
            source_lang: s.map(String::from),
            reference_lang: r.map(String::from),
            ..Default::default()
        };
        let l = languages_from(&f(Some("ces"), None), Some(&tok));
        assert_eq!(
            (l.source.as_deref(), l.reference.as_deref()),
            (Some("cs"), Some("en"))
        );
        assert!(
            l.from.contains("[filters]") && l.from.contains("tokenizer_config"),
            "{}",
            l.from
        );
        let l = languages_from(&f(None, Some("eng")), None);
        assert_eq!((l.source, l.reference.as_deref()), (None, Some("en")));
        // A language without an ISO 639-1 code keeps its ISO 639-3 one.
        let l = languages_from(&f(Some("hsb"), Some("deu")), Some(&tok));
        assert_eq!(
            (l.source.as_deref(), l.reference.as_deref()),
            (Some("hsb"), Some("de"))
        );
        assert_eq!(l.from, "[filters]");
        assert!(languages_from(&f(None, None), None).is_empty());
    }
}
