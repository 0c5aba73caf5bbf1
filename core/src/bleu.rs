//! Sentence BLEU, by default exactly as sacrebleu 2.x computes `sentence_bleu(hyp, [ref])`
//! with its defaults (docs/DEFINITIONS.md section 3): the `13a` tokenizer on
//! the text as given (no lowercasing), n-grams of order 1 to 4, clipped
//! counts against the one reference, the brevity penalty, `exp` smoothing
//! (mteval-v13a's: the k-th order with no match counts as 1 / (2^k x total))
//! and effective order (orders with no n-gram of the hypothesis at all are
//! left out of the geometric mean). 0-100 scale. Or, as
//! `[scoring] bleu = "nakov"`, BLEU+1 of Nakov et al. (2012) on the same
//! tokens ([`score_nakov`]).
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
    let s = normalize_13a(text);
    s.split(py_space)
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect()
}

/// The segment after the replacements and regular expressions, its tokens
/// still joined by spaces.
fn normalize_13a(text: &str) -> String {
    let mut line = text.trim_end_matches(py_space);
    let owned;
    if line.contains("<skipped>") || line.contains('\n') || line.contains('&') {
        let mut l = line.replace("<skipped>", "");
        l = l.replace("-\n", "");
        l = l.replace('\n', " ");
        if l.contains('&') {
            l = l
                .replace("&quot;", "\"")
                .replace("&amp;", "&")
                .replace("&lt;", "<")
                .replace("&gt;", ">");
        }
        owned = l;
        line = &owned;
    }
    // re.sub(r'([\{-\~\[-\` -\&\(-\+\:-\@\/])', r' \1 ', line), on " line "
    let mut s: Vec<char> = Vec::with_capacity(line.len() * 2 + 2);
    s.push(' ');
    for c in line.chars() {
        if punct_13a(c) {
            s.extend([' ', c, ' ']);
        } else {
            s.push(c);
        }
    }
    s.push(' ');
    let digit = |c: char| c.is_ascii_digit();
    let period = |c: char| c == '.' || c == ',';
    let mut t = Vec::with_capacity(s.len() + 16);
    // re.sub(r'([^0-9])([\.,])', r'\1 \2 ', line)
    sub_pair(
        &s,
        &mut t,
        |a, b| !digit(a) && period(b),
        |a, b, out| out.extend([a, ' ', b, ' ']),
    );
    // re.sub(r'([\.,])([^0-9])', r' \1 \2', line)
    sub_pair(
        &t,
        &mut s,
        |a, b| period(a) && !digit(b),
        |a, b, out| out.extend([' ', a, ' ', b]),
    );
    // re.sub(r'([0-9])(-)', r'\1 \2 ', line)
    sub_pair(
        &s,
        &mut t,
        |a, b| digit(a) && b == '-',
        |a, b, out| out.extend([a, ' ', b, ' ']),
    );
    t.into_iter().collect()
}

/// `re.sub` of a two-character pattern: scan left to right, replace each
/// non-overlapping match, resume after it.
fn sub_pair(
    s: &[char],
    out: &mut Vec<char>,
    matches: impl Fn(char, char) -> bool,
    replace: impl Fn(char, char, &mut Vec<char>),
) {
    out.clear();
    let mut i = 0;
    while i < s.len() {
        if i + 1 < s.len() && matches(s[i], s[i + 1]) {
            replace(s[i], s[i + 1], out);
            i += 2;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
}

/// sacrebleu's sufficient statistics of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BleuStats {
    pub hyp_len: usize,
    pub ref_len: usize,
    pub correct: [usize; MAX_ORDER],
    pub total: [usize; MAX_ORDER],
}

/// Clipped n-gram matches of a tokenized hypothesis against one tokenized
/// reference (`BLEU._compute_segment_statistics`).
///
/// Tokens are numbered per pair and each n-gram packed into one integer
/// (16 bits per token); sorted lists of those are counted and matched in
/// one merge. Hashing string slices per n-gram made BLEU five times the
/// cost of every other score together (`make bench-score`).
pub fn stats<S: AsRef<str>>(hyp: &[S], reference: &[S]) -> BleuStats {
    let mut st = BleuStats {
        hyp_len: hyp.len(),
        ref_len: reference.len(),
        ..Default::default()
    };
    let mut ids: FxHashMap<&str, u64> = FxHashMap::default();
    let (mut h, mut r) = (
        Vec::with_capacity(hyp.len()),
        Vec::with_capacity(reference.len()),
    );
    for (toks, out) in [(hyp, &mut h), (reference, &mut r)] {
        for t in toks {
            let next = ids.len() as u64;
            out.push(*ids.entry(t.as_ref()).or_insert(next));
        }
    }
    if ids.len() >= 1 << 16 {
        return stats_by_text(hyp, reference);
    }
    let (mut hk, mut rk) = (Vec::new(), Vec::new());
    for n in 1..=MAX_ORDER {
        let keys = |v: &[u64], out: &mut Vec<u64>| {
            out.clear();
            out.extend(
                v.windows(n)
                    .map(|w| w.iter().fold(0u64, |k, &t| k << 16 | t)),
            );
            out.sort_unstable();
        };
        keys(&h, &mut hk);
        keys(&r, &mut rk);
        st.total[n - 1] = hk.len();
        // Clipped counts: per distinct n-gram, min(hyp count, ref count).
        let (mut i, mut j) = (0, 0);
        while i < hk.len() && j < rk.len() {
            match hk[i].cmp(&rk[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    let k = hk[i];
                    let ci = hk[i..].iter().take_while(|&&x| x == k).count();
                    let cj = rk[j..].iter().take_while(|&&x| x == k).count();
                    st.correct[n - 1] += ci.min(cj);
                    i += ci;
                    j += cj;
                }
            }
        }
    }
    st
}

/// The same by n-gram text, for a pair with 65,536 distinct tokens or more.
fn stats_by_text<S: AsRef<str>>(hyp: &[S], reference: &[S]) -> BleuStats {
    fn counts<S: AsRef<str>>(tokens: &[S]) -> FxHashMap<Vec<&str>, usize> {
        let mut m: FxHashMap<Vec<&str>, usize> = FxHashMap::default();
        for n in 1..=MAX_ORDER {
            for w in tokens.windows(n) {
                *m.entry(w.iter().map(|t| t.as_ref()).collect()).or_insert(0) += 1;
            }
        }
        m
    }
    let r = counts(reference);
    let mut st = BleuStats {
        hyp_len: hyp.len(),
        ref_len: reference.len(),
        ..Default::default()
    };
    for (g, c) in counts(hyp) {
        let n = g.len() - 1;
        st.total[n] += c;
        if let Some(&rc) = r.get(&g) {
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

fn split(s: &str) -> Vec<&str> {
    s.split(py_space).filter(|t| !t.is_empty()).collect()
}

/// `sacrebleu.sentence_bleu(translation, [reference]).score`.
pub fn sentence_bleu(translation: &str, reference: &str) -> f64 {
    sentence_bleu_with(translation, reference, Smoothing::Sacrebleu)
}

/// Which sentence BLEU fills the `sentence_bleu` column (`[scoring] bleu`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Smoothing {
    /// sacrebleu's `sentence_bleu` defaults ([`score_from_stats`]).
    #[default]
    Sacrebleu,
    /// BLEU+1 of Nakov et al. (2012), which Wieting et al. (2017) filter
    /// with ([`score_nakov`]).
    Nakov,
}

/// Sentence BLEU of `translation` against `reference` on 13a tokens, 0-100.
pub fn sentence_bleu_with(translation: &str, reference: &str, smoothing: Smoothing) -> f64 {
    let (h, r) = (normalize_13a(translation), normalize_13a(reference));
    let st = stats(&split(&h), &split(&r));
    match smoothing {
        Smoothing::Sacrebleu => score_from_stats(&st),
        Smoothing::Nakov => score_nakov(&st),
    }
}

/// `sacrebleu.corpus_bleu(translations, [references]).score`: the
/// segments' statistics summed, then one score (13a tokens, `exp`
/// smoothing; its effective order equals the full order whenever the
/// corpus has a 4-gram, as any real one does).
///
/// # Panics
/// When the two lists differ in length (a caller's bug: every translation
/// has its reference).
pub fn corpus_bleu<S: AsRef<str>>(translations: &[S], references: &[S]) -> f64 {
    assert_eq!(
        translations.len(),
        references.len(),
        "corpus_bleu: one reference per translation"
    );
    let mut sum = BleuStats::default();
    for (t, r) in translations.iter().zip(references) {
        let (h, r) = (normalize_13a(t.as_ref()), normalize_13a(r.as_ref()));
        let st = stats(&split(&h), &split(&r));
        sum.hyp_len += st.hyp_len;
        sum.ref_len += st.ref_len;
        for n in 0..MAX_ORDER {
            sum.correct[n] += st.correct[n];
            sum.total[n] += st.total[n];
        }
    }
    score_from_stats(&sum)
}

/// BLEU+1 with a smoothed brevity penalty (Nakov, Guzman and Vogel, 2012;
/// as Moses computes `smoothedSentenceBleu` with `smoothBP`): every order's
/// precision, unigrams included, is (matches + 1) / (n-grams + 1), their
/// geometric mean is over all four orders, and the brevity penalty is
/// min(1, exp(1 - (ref_len + 1) / hyp_len)). The +1 on the reference
/// length is what keeps sentence-level BLEU+1 from favouring short
/// translations. An empty translation scores 0.
pub fn score_nakov(st: &BleuStats) -> f64 {
    if st.hyp_len == 0 {
        return 0.0;
    }
    let mut log = 0.0f64;
    for n in 0..MAX_ORDER {
        log += ((st.correct[n] + 1) as f64).ln() - ((st.total[n] + 1) as f64).ln();
    }
    log /= MAX_ORDER as f64;
    let brevity = 1.0 - (st.ref_len as f64 + 1.0) / st.hyp_len as f64;
    if brevity < 0.0 {
        log += brevity;
    }
    100.0 * log.exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        tokenize_13a(s)
    }

    /// sacrebleu 2.x `corpus_bleu(h, [r]).score` on these three segments.
    #[test]
    fn corpus_bleu_is_sacrebleus() {
        let h = [
            "The cat sat on the mat.",
            "A man is playing a guitar on stage.",
            "Two dogs run.",
        ];
        let r = [
            "The cat is sitting on the mat.",
            "A man plays the guitar on a stage.",
            "Two dogs are running in the park.",
        ];
        let got = corpus_bleu(&h, &r);
        assert!((got - 20.593798609529266).abs() < 1e-9, "{got}");
        assert!((corpus_bleu(&r, &r) - 100.0).abs() < 1e-9);
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
    fn packed_ngrams_count_as_the_text_does() {
        let pairs = [
            (
                "the cat sat on the mat the cat",
                "the cat the cat sat on a mat",
            ),
            ("a a a a a b", "a a b b a a a"),
            ("", "x"),
            ("One, two: 3.14 - four!", "one , two 3.14 four"),
        ];
        for (h, r) in pairs {
            let (h, r) = (toks(h), toks(r));
            assert_eq!(stats(&h, &r), stats_by_text(&h, &r), "{h:?} / {r:?}");
        }
    }

    #[test]
    fn nakov_bleu_plus_one_worked_examples() {
        let nakov = |h, r| sentence_bleu_with(h, r, Smoothing::Nakov);
        // Identical, 6 tokens: every precision is 1, and the smoothed
        // brevity penalty still charges exp(1 - 7/6).
        let got = nakov("the cat sat on the mat", "the cat sat on the mat");
        let want = 100.0 * (1.0f64 - 7.0 / 6.0).exp();
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        // Nothing in common: smoothed, not 0: (1/4 * 1/3 * 1/2 * 1/1)^(1/4)
        // for 3 unigrams, 2 bigrams, 1 trigram, no 4-gram; BP exp(1 - 4/3).
        let got = nakov("a b c", "d e f");
        let want = 100.0 * (0.25f64 / 3.0 / 2.0).powf(0.25) * (1.0f64 - 4.0 / 3.0).exp();
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        assert_eq!(nakov("", "d e f"), 0.0);
        // "the cat sat on a mat" / "the cat sat on the mat": (5+1)/(6+1),
        // (3+1)/(5+1), (2+1)/(4+1), (1+1)/(3+1); BP exp(1 - 7/6).
        let got = nakov("the cat sat on a mat", "the cat sat on the mat");
        let p = 6.0 / 7.0 * 4.0 / 6.0 * 3.0 / 5.0 * 2.0 / 4.0f64;
        let want = 100.0 * p.powf(0.25) * (1.0f64 - 7.0 / 6.0).exp();
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        // A longer translation pays no brevity penalty.
        let got = nakov("the cat sat on the mat today", "the cat sat on the mat");
        let p = 7.0 / 8.0 * 6.0 / 7.0 * 5.0 / 6.0 * 4.0 / 5.0f64;
        assert!((got - 100.0 * p.powf(0.25)).abs() < 1e-9, "{got}");
        // The default is sacrebleu's.
        assert_eq!(
            sentence_bleu_with("a b x c", "a b y c", Smoothing::default()),
            sentence_bleu("a b x c", "a b y c")
        );
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
