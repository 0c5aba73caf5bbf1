//! Sentence BLEU exactly as sacrebleu 2.x computes `sentence_bleu(hyp, [ref])`
//! with its defaults (docs/DEFINITIONS.md section 3): the `13a` tokenizer on
//! the text as given (no lowercasing), n-grams of order 1 to 4, clipped
//! counts against the one reference, the brevity penalty, `exp` smoothing
//! (mteval-v13a's: the k-th order with no match counts as 1 / (2^k x total))
//! and effective order (orders with no n-gram of the hypothesis at all are
//! left out of the geometric mean). 0-100 scale.
//!
//! Ported from sacrebleu's `tokenizers/tokenizer_13a.py`,
//! `tokenizers/tokenizer_re.py`, `metrics/helpers.py` and
//! `metrics/bleu.py` (`compute_bleu`); `tests/interop.rs` checks it against
//! sacrebleu itself on real pairs.

use rustc_hash::FxHashMap;

/// Highest n-gram order (sacrebleu's `MAX_NGRAM_ORDER`).
pub const MAX_ORDER: usize = 4;

/// Python's `str.isspace` (what `str.split()` and `str.rstrip()` use):
/// Unicode White_Space plus the information separators U+001C..U+001F.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// sacrebleu's first `13a` regex class: `[\{-\~\[-\` -\&\(-\+\:-\@\/]`.
fn punct_13a(c: char) -> bool {
    matches!(c, '{'..='~' | '['..='`' | ' '..='&' | '('..='+' | ':'..='@' | '/')
}

/// Tokenizes one segment as sacrebleu's default metric does before
/// counting n-grams (`BLEU._preprocess_segment` with `Tokenizer13a`):
/// `rstrip`, the language-independent replacements, then the four regular
/// expressions of `TokenizerRegexp`, then whitespace-split.
pub fn tokenize_13a(text: &str) -> Vec<String> {
    let mut line = text.trim_end_matches(py_space).to_string();
    line = line.replace("<skipped>", "");
    line = line.replace("-\n", "");
    line = line.replace('\n', " ");
    if line.contains('&') {
        line = line
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
    }
    let chars: Vec<char> = format!(" {line} ").chars().collect();
    // re.sub(r'([\{-\~\[-\` -\&\(-\+\:-\@\/])', r' \1 ', line)
    let mut s: Vec<char> = Vec::with_capacity(chars.len() * 2);
    for c in chars {
        if punct_13a(c) {
            s.extend([' ', c, ' ']);
        } else {
            s.push(c);
        }
    }
    let digit = |c: char| c.is_ascii_digit();
    let period = |c: char| c == '.' || c == ',';
    // re.sub(r'([^0-9])([\.,])', r'\1 \2 ', line)
    let s = sub_pair(
        &s,
        |a, b| !digit(a) && period(b),
        |a, b, out| out.extend([a, ' ', b, ' ']),
    );
    // re.sub(r'([\.,])([^0-9])', r' \1 \2', line)
    let s = sub_pair(
        &s,
        |a, b| period(a) && !digit(b),
        |a, b, out| out.extend([' ', a, ' ', b]),
    );
    // re.sub(r'([0-9])(-)', r'\1 \2 ', line)
    let s = sub_pair(
        &s,
        |a, b| digit(a) && b == '-',
        |a, b, out| out.extend([a, ' ', b, ' ']),
    );
    let s: String = s.into_iter().collect();
    s.split(py_space)
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect()
}

/// `re.sub` of a two-character pattern: scan left to right, replace each
/// non-overlapping match, resume after it.
fn sub_pair(
    s: &[char],
    matches: impl Fn(char, char) -> bool,
    replace: impl Fn(char, char, &mut Vec<char>),
) -> Vec<char> {
    let mut out = Vec::with_capacity(s.len() + 8);
    let mut i = 0;
    while i < s.len() {
        if i + 1 < s.len() && matches(s[i], s[i + 1]) {
            replace(s[i], s[i + 1], &mut out);
            i += 2;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// sacrebleu's sufficient statistics of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BleuStats {
    pub hyp_len: usize,
    pub ref_len: usize,
    pub correct: [usize; MAX_ORDER],
    pub total: [usize; MAX_ORDER],
}

fn ngram_counts(tokens: &[String]) -> FxHashMap<&[String], usize> {
    let mut m: FxHashMap<&[String], usize> = FxHashMap::default();
    for n in 1..=MAX_ORDER {
        for w in tokens.windows(n) {
            *m.entry(w).or_insert(0) += 1;
        }
    }
    m
}

/// Clipped n-gram matches of a tokenized hypothesis against one tokenized
/// reference (`BLEU._compute_segment_statistics`).
pub fn stats(hyp: &[String], reference: &[String]) -> BleuStats {
    let r = ngram_counts(reference);
    let mut st = BleuStats {
        hyp_len: hyp.len(),
        ref_len: reference.len(),
        ..Default::default()
    };
    for (g, c) in ngram_counts(hyp) {
        let n = g.len() - 1;
        st.total[n] += c;
        if let Some(&rc) = r.get(g) {
            st.correct[n] += c.min(rc);
        }
    }
    st
}

/// `BLEU.compute_bleu` with `smooth_method='exp'` and `effective_order=True`.
pub fn score_from_stats(st: &BleuStats) -> f64 {
    let (sys, rl) = (st.hyp_len as f64, st.ref_len as f64);
    let mut bp = 1.0;
    if st.hyp_len < st.ref_len {
        bp = if st.hyp_len > 0 {
            (1.0 - rl / sys).exp()
        } else {
            0.0
        };
    }
    if st.correct.iter().all(|&c| c == 0) {
        return 0.0;
    }
    let mut precisions = [0.0f64; MAX_ORDER];
    let mut smooth = 1.0f64;
    let mut eff_order = MAX_ORDER;
    for n in 1..=MAX_ORDER {
        let (c, t) = (st.correct[n - 1], st.total[n - 1]);
        if t == 0 {
            break;
        }
        eff_order = n;
        if c == 0 {
            smooth *= 2.0;
            precisions[n - 1] = 100.0 / (smooth * t as f64);
        } else {
            precisions[n - 1] = 100.0 * c as f64 / t as f64;
        }
    }
    // sacrebleu's my_log floors log(0) to -9999999999.
    let sum: f64 = precisions[..eff_order]
        .iter()
        .map(|&p| if p == 0.0 { -9_999_999_999.0 } else { p.ln() })
        .fold(0.0, |a, b| a + b);
    bp * (sum / eff_order as f64).exp()
}

/// `sacrebleu.sentence_bleu(translation, [reference]).score`.
pub fn sentence_bleu(translation: &str, reference: &str) -> f64 {
    score_from_stats(&stats(&tokenize_13a(translation), &tokenize_13a(reference)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        tokenize_13a(s)
    }

    #[test]
    fn tokenizer_13a_splits_as_mteval() {
        assert_eq!(
            toks("Hello, world! It's 3.14 or 1,000 - ok."),
            ["Hello", ",", "world", "!", "It's", "3.14", "or", "1,000", "-", "ok", "."]
        );
        // A dash after a digit is split; periods between digits are not.
        assert_eq!(toks("1990-2000 a.b"), ["1990", "-", "2000", "a", ".", "b"]);
        assert_eq!(
            toks("&quot;Hi&quot; &amp; (you)"),
            ["\"", "Hi", "\"", "&", "(", "you", ")"]
        );
        assert_eq!(toks("  \t "), Vec::<String>::new());
        // Non-ASCII punctuation is not split by 13a.
        assert_eq!(toks("„Ahoj“ řekl."), ["„Ahoj“", "řekl", "."]);
    }

    #[test]
    fn worked_examples() {
        // Identical: 100.
        assert!(
            (sentence_bleu("the cat sat on the mat", "the cat sat on the mat") - 100.0).abs()
                < 1e-9
        );
        // Nothing in common: 0.
        assert_eq!(sentence_bleu("a b c", "d e f"), 0.0);
        assert_eq!(sentence_bleu("", "d e f"), 0.0);
        // "the cat sat on a mat" vs "the cat sat on the mat": 5/6, 3/5, 2/4,
        // 1/3 matches, same length: (5/6 * 3/5 * 2/4 * 1/3)^(1/4) * 100.
        let want = 100.0 * (5.0 / 6.0 * 3.0 / 5.0 * 2.0 / 4.0 / 3.0f64).powf(0.25);
        let got = sentence_bleu("the cat sat on a mat", "the cat sat on the mat");
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        // Effective order: a two-word hypothesis has no trigram, so the mean
        // is over two orders; a short one pays the brevity penalty exp(1 - 4/2).
        let got = sentence_bleu("the cat", "the cat is here");
        let want = (1.0f64 - 2.0).exp() * 100.0;
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        // A missing order is smoothed: 1/(2 * total).
        let got = sentence_bleu("a b x c", "a b y c");
        // unigrams 3/4, bigrams 1/3, trigrams 0 of 2 -> 1/(2*2), 4-grams 0 of 1 -> 1/(4*1)
        let want = 100.0 * (0.75f64 * (1.0 / 3.0) * 0.25 * 0.25).powf(0.25);
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    }
}
