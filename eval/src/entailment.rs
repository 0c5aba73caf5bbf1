//! The entailment analysis of Chen and Gimpel (2020, section 6.1, Table
//! 4): if a premise entails its hypothesis, the premise should be the more
//! specific of the two, so a model's specificity number (norm, or negative
//! entropy) should be larger for it. Only pairs of equal length (in
//! tokens) count, so that length cannot decide. The paper uses SNLI's test
//! set; SICK's (`entailment_judgment`: ENTAILMENT, NEUTRAL, CONTRADICTION)
//! is what the package registries and this repository provide.

use std::path::Path;

use crate::EvalError;

/// Equal-length (premise, hypothesis) pairs of one judgement.
#[derive(Debug, Clone)]
pub struct Judged {
    pub label: String,
    pub pairs: Vec<(String, String)>,
}

/// The judgements in the paper's order.
pub const LABELS: [&str; 3] = ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"];

/// Reads a SICK file (tab-separated with a header naming `sentence_A`,
/// `sentence_B` and `entailment_judgment`) and keeps the pairs whose two
/// sentences have as many tokens.
pub fn load_sick(path: &Path) -> Result<Vec<Judged>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    let mut lines = text.lines();
    let bad = |reason: String| EvalError::BadSts {
        path: path.to_path_buf(),
        reason,
    };
    let head: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
    let col = |name: &str| {
        head.iter()
            .position(|h| *h == name)
            .ok_or_else(|| bad(format!("no {name} column in the header (a SICK file has sentence_A, sentence_B, entailment_judgment)")))
    };
    let (a, b, j) = (
        col("sentence_A")?,
        col("sentence_B")?,
        col("entailment_judgment")?,
    );
    let mut out: Vec<Judged> = LABELS
        .iter()
        .map(|l| Judged {
            label: l.to_string(),
            pairs: Vec::new(),
        })
        .collect();
    for (i, line) in lines.enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        let field = |k: usize| {
            f.get(k).copied().ok_or_else(|| {
                bad(format!(
                    "line {}: {} fields, need {}",
                    i + 2,
                    f.len(),
                    k + 1
                ))
            })
        };
        let (p, h, label) = (field(a)?, field(b)?, field(j)?);
        let Some(slot) = out.iter_mut().find(|o| o.label == label) else {
            return Err(bad(format!(
                "line {}: judgement {label:?} is not one of {LABELS:?}",
                i + 2
            )));
        };
        if paraforge_core::tokenize(p).len() == paraforge_core::tokenize(h).len() {
            slot.pairs.push((p.to_string(), h.to_string()));
        }
    }
    Ok(out)
}

/// Per judgement: the share (%) of pairs whose hypothesis `score` calls
/// less specific than its premise, and the pairs counted (a pair with a
/// side the model cannot score is left out).
pub fn evaluate(
    sets: &[Judged],
    score: &dyn Fn(&[String]) -> Vec<f64>,
) -> Vec<(String, Option<f64>, usize)> {
    sets.iter()
        .map(|s| {
            let premises: Vec<String> = s.pairs.iter().map(|p| p.0.clone()).collect();
            let hypotheses: Vec<String> = s.pairs.iter().map(|p| p.1.clone()).collect();
            let (sp, sh) = (score(&premises), score(&hypotheses));
            let scored: Vec<(f64, f64)> = sp
                .into_iter()
                .zip(sh)
                .filter(|(p, h)| !p.is_nan() && !h.is_nan())
                .collect();
            let less = scored.iter().filter(|(p, h)| h < p).count();
            let share = (!scored.is_empty()).then(|| 100.0 * less as f64 / scored.len() as f64);
            (s.label.clone(), share, scored.len())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal-length pairs only, by judgement; the share counted by hand
    /// with the number of letters as the model.
    #[test]
    fn shares_count_less_specific_hypotheses_among_equal_lengths() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("sick.txt");
        std::fs::write(
            &f,
            "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n\
             1\ta big dog\ta dog\t4\tENTAILMENT\n\
             2\tthe enormous dog runs\tthe dog runs fast\t4\tENTAILMENT\n\
             3\ta cat sleeps\ta dog eats\t2\tNEUTRAL\n\
             4\tno man\ta woman\t1\tCONTRADICTION\n",
        )
        .unwrap();
        let sets = load_sick(&f).unwrap();
        // Pair 1 differs in length and is left out.
        assert_eq!(
            sets.iter().map(|s| s.pairs.len()).collect::<Vec<_>>(),
            [1, 1, 1]
        );
        let letters = |t: &[String]| t.iter().map(|s| s.len() as f64).collect();
        let r = evaluate(&sets, &letters);
        // "the dog runs fast" (17) < "the enormous dog runs" (21): 100%;
        // "a dog eats" (10) < "a cat sleeps" (12): 100%; "a woman" (7) >
        // "no man" (6): 0%.
        assert_eq!(
            r,
            vec![
                ("ENTAILMENT".to_string(), Some(100.0), 1),
                ("NEUTRAL".to_string(), Some(100.0), 1),
                ("CONTRADICTION".to_string(), Some(0.0), 1)
            ]
        );
        std::fs::write(&f, "a\tb\n").unwrap();
        assert!(load_sick(&f)
            .unwrap_err()
            .to_string()
            .contains("sentence_A"));
    }
}
