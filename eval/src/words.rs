//! Word similarity: Spearman's rho x 100 between a word table's cosines and
//! human judgements on SimLex-999 (Hill, Reichart and Korhonen, 2015) and
//! WordSim-353 (Finkelstein et al., 2002), as Wieting et al. (2015) report
//! PARAGRAM vectors and Wieting and Gimpel (2018) their lexicon. A pair with
//! a word the table lacks is scored 0, as the latter score a lexicon's
//! unseen pairs, and counted, so that a small table cannot look better by
//! leaving hard pairs out.

use std::path::Path;

use crate::EvalError;

/// One word-similarity set: word pairs and their human scores.
#[derive(Debug, Clone)]
pub struct WordSet {
    pub name: String,
    pub pairs: Vec<(String, String, f64)>,
}

/// A table's result on one set.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WordResult {
    pub set: String,
    pub pairs: usize,
    /// Pairs with both words in the table.
    pub covered: usize,
    /// Spearman's rho x 100, unseen pairs scored 0.
    pub spearman: f64,
}

/// The sets `eval-words` knows, by file name under the words directory.
pub const SETS: [(&str, &str); 2] = [
    ("SimLex-999", "simlex999.txt"),
    ("WordSim-353", "wordsim353.tsv"),
];

/// Every set of [`SETS`] under `dir`: `word1 TAB word2 TAB score` lines,
/// `#` lines are comments. A line that is not that is an error naming the
/// file and line.
pub fn load(dir: &Path) -> Result<Vec<WordSet>, EvalError> {
    let mut sets = Vec::new();
    for (name, file) in SETS {
        let path = dir.join(file);
        let failed = |e: std::io::Error| {
            EvalError::Invalid(format!(
                "{}: {e} (the word-similarity sets)",
                path.display()
            ))
        };
        let lines = paraforge_core::text::open_lines(&path)
            .map_err(failed)?
            .collect::<Result<Vec<String>, _>>()
            .map_err(failed)?;
        let mut pairs = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let line = line.as_str();
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let bad = || {
                EvalError::Invalid(format!(
                    "{} line {}: expected `word TAB word TAB score`, found {line:?}",
                    path.display(),
                    i + 1
                ))
            };
            let c: Vec<&str> = line.split('\t').collect();
            if c.len() != 3 {
                return Err(bad());
            }
            let score: f64 = c[2].trim().parse().map_err(|_| bad())?;
            if !score.is_finite() {
                return Err(bad());
            }
            pairs.push((c[0].trim().to_string(), c[1].trim().to_string(), score));
        }
        if pairs.len() < 2 {
            return Err(EvalError::Invalid(format!(
                "{}: fewer than two scored pairs",
                path.display()
            )));
        }
        sets.push(WordSet {
            name: name.to_string(),
            pairs,
        });
    }
    Ok(sets)
}

/// Each set's Spearman's rho x 100 of `similarity` (None for a pair the
/// table does not cover, scored 0) against the human scores.
pub fn evaluate(
    sets: &[WordSet],
    similarity: &dyn Fn(&str, &str) -> Option<f64>,
) -> Result<Vec<WordResult>, EvalError> {
    sets.iter()
        .map(|s| {
            let mut covered = 0;
            let mut sims = Vec::with_capacity(s.pairs.len());
            for (a, b, _) in &s.pairs {
                let v = similarity(a, b);
                if let Some(x) = v {
                    if !x.is_finite() {
                        return Err(EvalError::Invalid(format!(
                            "{}: the similarity of {a:?} and {b:?} is {x}",
                            s.name
                        )));
                    }
                    covered += 1;
                }
                sims.push(v.unwrap_or(0.0));
            }
            let gold: Vec<f64> = s.pairs.iter().map(|p| p.2).collect();
            let rho = crate::sts::spearman(&sims, &gold);
            // No pair covered, or every similarity the same: no ranking to
            // correlate, which must not pass for a score.
            if covered == 0 || !rho.is_finite() {
                return Err(EvalError::Invalid(format!(
                    "{}: no correlation to report ({covered} of {} pairs covered, every similarity the same)",
                    s.name,
                    s.pairs.len()
                )));
            }
            Ok(WordResult {
                set: s.name.clone(),
                pairs: s.pairs.len(),
                covered,
                spearman: 100.0 * rho,
            })
        })
        .collect()
}

/// The cosine of two words' rows in `v` (0 for a zero row), each looked up
/// as written, then lowercased.
pub fn cosine(v: &paraforge_core::Vectors, a: &str, b: &str) -> Option<f64> {
    let get = |w: &str| v.get(w).or_else(|| v.get(&w.to_lowercase()));
    Some(paraforge_core::score::cosine(get(a)?, get(b)?) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str, f64)]) -> WordSet {
        WordSet {
            name: "t".into(),
            pairs: pairs
                .iter()
                .map(|(a, b, s)| (a.to_string(), b.to_string(), *s))
                .collect(),
        }
    }

    #[test]
    fn unseen_pairs_score_zero_and_are_counted() {
        let s = set(&[
            ("a", "b", 1.0),
            ("c", "d", 2.0),
            ("e", "f", 3.0),
            ("x", "y", 4.0),
        ]);
        // Covered pairs in the gold order: rho 1.
        let sim = |a: &str, _: &str| match a {
            "a" => Some(0.1),
            "c" => Some(0.2),
            "e" => Some(0.3),
            "x" => Some(0.9),
            _ => None,
        };
        let r = evaluate(std::slice::from_ref(&s), &sim).unwrap();
        assert_eq!((r[0].pairs, r[0].covered), (4, 4));
        assert!((r[0].spearman - 100.0).abs() < 1e-9);
        // The best pair unseen: scored 0, so it ranks last, not left out.
        let sim = |a: &str, b: &str| if a == "x" { None } else { sim(a, b) };
        let r = evaluate(&[s], &sim).unwrap();
        assert_eq!(r[0].covered, 3);
        // ranks (2, 3, 4, 1) against (1, 2, 3, 4): rho = 1 - 6 x 12 / 60.
        assert!((r[0].spearman + 20.0).abs() < 1e-9, "{}", r[0].spearman);
        // A table that covers nothing has no ranking: an error, not NaN.
        let s = set(&[("a", "b", 1.0), ("c", "d", 2.0)]);
        let e = evaluate(&[s], &|_: &str, _: &str| None).unwrap_err();
        assert!(e.to_string().contains("0 of 2 pairs covered"), "{e}");
    }

    #[test]
    fn a_malformed_line_names_its_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("simlex999.txt"), "# c\na\tb\t1\nc d 2\n").unwrap();
        std::fs::write(dir.path().join("wordsim353.tsv"), "a\tb\t1\nc\td\t2\n").unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("simlex999.txt line 3"), "{e}");
    }
}
