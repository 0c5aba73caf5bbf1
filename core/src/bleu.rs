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
const fn punct_13a(c: char) -> bool {
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
    let (mut out, mut tmp) = (Vec::new(), Vec::new());
    normalize_13a_into(text, &mut out, &mut tmp);
    String::from_utf8(out).expect("ASCII inserted between whole characters")
}

/// [`normalize_13a`] as UTF-8 bytes into `out`, `tmp` a second buffer: the
/// scorer reuses both for every pair. Every character the expressions
/// match or insert is ASCII, and no byte of a multi-byte UTF-8 sequence is
/// below 0x80, so working on bytes gives the same text as on characters
/// (about twice as fast) and inserts only between whole characters.
fn normalize_13a_into(text: &str, out: &mut Vec<u8>, tmp: &mut Vec<u8>) {
    let mut line = text.trim_end_matches(py_space);
    let owned;
    let rare = |c: &u8| matches!(c, b'<' | b'\n' | b'&');
    if line.as_bytes().iter().any(rare)
        && (line.contains("<skipped>") || line.contains('\n') || line.contains('&'))
    {
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
    let s = out;
    s.clear();
    s.reserve(line.len() * 2 + 2);
    s.push(b' ');
    // punct_13a per ASCII byte, as a table: the test per byte was a fifth
    // of this pass.
    const PUNCT: [bool; 128] = {
        let mut t = [false; 128];
        let mut c = 0;
        while c < 128 {
            t[c] = punct_13a(c as u8 as char);
            c += 1;
        }
        t
    };
    for &c in line.as_bytes() {
        if c < 0x80 && PUNCT[c as usize] {
            s.extend([b' ', c, b' ']);
        } else {
            s.push(c);
        }
    }
    s.push(b' ');
    let t = tmp;
    let digit = |c: u8| c.is_ascii_digit();
    let period = |c: u8| c == b'.' || c == b',';
    // The next expressions change nothing without a period, comma or dash
    // (none is inserted by another), and most segments lack the dash.
    let bytes = line.as_bytes();
    if bytes.iter().any(|&c| c == b'.' || c == b',') {
        // re.sub(r'([^0-9])([\.,])', r'\1 \2 ', line)
        sub_pair(
            s,
            t,
            |a, b| !digit(a) && period(b),
            |a, b, out| out.extend([a, b' ', b, b' ']),
        );
        // re.sub(r'([\.,])([^0-9])', r' \1 \2', line)
        sub_pair(
            t,
            s,
            |a, b| period(a) && !digit(b),
            |a, b, out| out.extend([b' ', a, b' ', b]),
        );
    }
    if bytes.contains(&b'-') {
        // re.sub(r'([0-9])(-)', r'\1 \2 ', line)
        sub_pair(
            s,
            t,
            |a, b| digit(a) && b == b'-',
            |a, b, out| out.extend([a, b' ', b, b' ']),
        );
        std::mem::swap(s, t);
    }
}

/// `re.sub` of a two-character pattern: scan left to right, replace each
/// non-overlapping match, resume after it.
fn sub_pair(
    s: &[u8],
    out: &mut Vec<u8>,
    matches: impl Fn(u8, u8) -> bool,
    replace: impl Fn(u8, u8, &mut Vec<u8>),
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
/// (16 bits per token), counted and clipped as [`Bleu`] does; for tokens
/// already split (the scorer itself goes through [`Bleu`], which keeps its
/// buffers).
pub fn stats<S: AsRef<str>>(hyp: &[S], reference: &[S]) -> BleuStats {
    let mut ids: FxHashMap<&str, u32> = FxHashMap::default();
    let (mut h, mut r) = (
        Vec::with_capacity(hyp.len()),
        Vec::with_capacity(reference.len()),
    );
    for (toks, out) in [(hyp, &mut h), (reference, &mut r)] {
        for t in toks {
            let next = ids.len() as u32;
            out.push(*ids.entry(t.as_ref()).or_insert(next));
        }
    }
    if ids.len() >= 1 << 16 {
        return stats_by_text(hyp, reference);
    }
    stats_of_ids(&h, &r, &mut NgramCounts::default())
}

/// [`stats`] of two sentences as token ids below 2^16 (equal ids, equal
/// tokens): the reference's n-grams counted in `counts`, then each of the
/// hypothesis's matched while its count lasts (the clipping).
fn stats_of_ids(h: &[u32], r: &[u32], counts: &mut NgramCounts) -> BleuStats {
    let mut st = BleuStats {
        hyp_len: h.len(),
        ref_len: r.len(),
        ..Default::default()
    };
    counts.start(r.len() * MAX_ORDER);
    for n in 1..=MAX_ORDER {
        let key = |w: &[u32]| w.iter().fold(0u64, |k, &t| k << 16 | t as u64);
        for w in r.windows(n) {
            *counts.slot(n as u8, key(w)) += 1;
        }
        st.total[n - 1] = h.len().saturating_sub(n - 1);
        for w in h.windows(n) {
            st.correct[n - 1] += usize::from(counts.take(n as u8, key(w)));
        }
    }
    st
}

/// Counts per (order, packed n-gram) in open addressing, stamped per pair
/// so that starting a pair costs nothing. Sorting each order's n-grams of
/// both sides cost a quarter of BLEU's time.
#[derive(Debug, Default)]
struct NgramCounts {
    /// (stamp, order, count, key).
    slots: Vec<(u32, u8, u32, u64)>,
    stamp: u32,
}

impl NgramCounts {
    /// Empties the table for a pair with up to `n` distinct n-grams.
    fn start(&mut self, n: usize) {
        let size = (2 * n).next_power_of_two().max(64);
        if self.slots.len() < size {
            self.slots = vec![(0, 0, 0, 0); size];
            self.stamp = 0;
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.slots.iter_mut().for_each(|s| s.0 = 0);
            self.stamp = 1;
        }
    }

    /// Where (order, key) is or would go: half the slots at least stay
    /// free, so the probe ends.
    fn find(&self, order: u8, key: u64) -> usize {
        let mask = self.slots.len() - 1;
        // Folded first: the product's bits 32-47 (what the mask keeps) never
        // see the key's top 16 bits, a 4-gram's first token.
        let k = key ^ key >> 32 ^ (order as u64) << 29;
        let mut at = (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask;
        loop {
            let s = self.slots[at];
            if s.0 != self.stamp || (s.1 == order && s.3 == key) {
                return at;
            }
            at = (at + 1) & mask;
        }
    }

    /// The count of (order, key), inserted at 0 when new.
    fn slot(&mut self, order: u8, key: u64) -> &mut u32 {
        let at = self.find(order, key);
        if self.slots[at].0 != self.stamp {
            self.slots[at] = (self.stamp, order, 0, key);
        }
        &mut self.slots[at].2
    }

    /// Takes one from the count of (order, key); false when none is left.
    fn take(&mut self, order: u8, key: u64) -> bool {
        let at = self.find(order, key);
        let s = &mut self.slots[at];
        if s.0 != self.stamp || s.2 == 0 {
            return false;
        }
        s.2 -= 1;
        true
    }
}

/// Sentence BLEU with every buffer kept between pairs: the scorer's
/// `sentence_bleu` column. Allocating the normalized text, its tokens and
/// a hash map per pair made BLEU cost more than every other score together
/// (`make bench-score`).
#[derive(Debug, Default)]
pub struct Bleu {
    text: [Vec<u8>; 2],
    tmp: Vec<u8>,
    /// Each side's tokens as (start, end) in its text.
    spans: [Vec<(u32, u32)>; 2],
    ids: [Vec<u32>; 2],
    /// Distinct tokens so far: (hash, side, start, end).
    table: Vec<(u64, u8, u32, u32)>,
    /// (stamp, index into `table`); a slot is taken when its stamp is this
    /// pair's.
    slots: Vec<(u32, u32)>,
    stamp: u32,
    counts: NgramCounts,
}

impl Bleu {
    /// Sentence BLEU of `translation` against `reference` on 13a tokens, 0-100.
    pub fn score(&mut self, translation: &str, reference: &str, smoothing: Smoothing) -> f64 {
        let st = self.stats(translation, reference);
        match smoothing {
            Smoothing::Sacrebleu => score_from_stats(&st),
            Smoothing::Nakov => score_nakov(&st),
        }
    }

    /// The segment statistics of the pair on 13a tokens.
    pub fn stats(&mut self, translation: &str, reference: &str) -> BleuStats {
        for (side, text) in [translation, reference].into_iter().enumerate() {
            normalize_13a_into(text, &mut self.text[side], &mut self.tmp);
            let (bytes, spans) = (&self.text[side], &mut self.spans[side]);
            spans.clear();
            let mut start = None;
            let mut at = |i: usize, space: bool| match (space, start) {
                (true, Some(s)) => {
                    spans.push((s, i as u32));
                    start = None;
                }
                (false, None) => start = Some(i as u32),
                _ => {}
            };
            if bytes.is_ascii() {
                bytes
                    .iter()
                    .enumerate()
                    .for_each(|(i, &c)| at(i, py_space(c as char)));
            } else {
                // Unicode white space splits too (U+00A0, U+3000, ...).
                let text = std::str::from_utf8(bytes).expect("whole characters");
                text.char_indices().for_each(|(i, c)| at(i, py_space(c)));
            }
            if let Some(s) = start {
                spans.push((s, bytes.len() as u32));
            }
        }
        let distinct = self.number();
        if distinct >= 1 << 16 {
            let tokens = |side: usize| -> Vec<String> {
                self.spans[side]
                    .iter()
                    .map(|&span| String::from_utf8_lossy(self.token(side, span)).into_owned())
                    .collect()
            };
            return stats_by_text(&tokens(0), &tokens(1));
        }
        stats_of_ids(&self.ids[0], &self.ids[1], &mut self.counts)
    }

    fn token(&self, side: usize, span: (u32, u32)) -> &[u8] {
        &self.text[side][span.0 as usize..span.1 as usize]
    }

    /// Numbers the tokens of both sides, equal tokens alike, through an
    /// open-addressing table of at least four slots per token (stamped per
    /// pair, so never cleared); returns how many distinct tokens there are.
    /// A linear scan of the distinct tokens cost a fifth of BLEU's time.
    fn number(&mut self) -> usize {
        let total = self.spans[0].len() + self.spans[1].len();
        let size = (4 * total).next_power_of_two().max(64);
        if self.slots.len() < size {
            self.slots = vec![(0, 0); size];
            self.stamp = 0;
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.slots.iter_mut().for_each(|s| *s = (0, 0));
            self.stamp = 1;
        }
        let mask = self.slots.len() - 1;
        self.table.clear();
        for side in 0..2 {
            let mut ids = std::mem::take(&mut self.ids[side]);
            ids.clear();
            for &span in &self.spans[side] {
                let tok = self.token(side, span);
                let h = tok.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
                    (h ^ c as u64).wrapping_mul(0x0100_0000_01b3)
                });
                let mut at = (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask;
                let id = loop {
                    let (stamp, id) = self.slots[at];
                    if stamp != self.stamp {
                        self.table.push((h, side as u8, span.0, span.1));
                        let id = (self.table.len() - 1) as u32;
                        self.slots[at] = (self.stamp, id);
                        break id;
                    }
                    let (th, ts, a, b) = self.table[id as usize];
                    if th == h && self.token(ts as usize, (a, b)) == tok {
                        break id;
                    }
                    at = (at + 1) & mask;
                };
                ids.push(id);
            }
            self.ids[side] = ids;
        }
        self.table.len()
    }
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
    Bleu::default().score(translation, reference, smoothing)
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
    let mut bleu = Bleu::default();
    for (t, r) in translations.iter().zip(references) {
        let st = bleu.stats(t.as_ref(), r.as_ref());
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

    /// sacrebleu 2.x's own `Tokenizer13a` then `split()` on text where the
    /// byte-level passes meet non-ASCII characters and Unicode white space.
    #[test]
    fn non_ascii_text_tokenizes_as_sacrebleu() {
        let cases: [(&str, &[&str]); 6] = [
            ("café.", &["café", "."]),
            (".é", &[".", "é"]),
            ("5-é", &["5", "-", "é"]),
            ("a\u{3000}b. c", &["a", "b", ".", "c"]),
            (
                "é,é 3,5 é-3 x.y",
                &["é", ",", "é", "3,5", "é-3", "x", ".", "y"],
            ),
            ("naïve—fin. «ok»", &["naïve—fin", ".", "«ok»"]),
        ];
        let mut bleu = Bleu::default();
        for (text, want) in cases {
            assert_eq!(toks(text), want, "{text}");
            // The scorer's path numbers the same tokens.
            let st = bleu.stats(text, text);
            assert_eq!(
                (st.hyp_len, st.correct[0]),
                (want.len(), want.len()),
                "{text}"
            );
            assert_eq!(
                bleu.stats(text, "x"),
                stats(&toks(text), &toks("x")),
                "{text}"
            );
        }
    }

    /// One `Bleu` reused over pairs short and long (its table grown, the
    /// text fallback at 65,536 distinct tokens) counts as the n-gram text
    /// does.
    #[test]
    fn reused_buffers_count_as_the_text_does() {
        let long_h: String = (0..300).map(|i| format!("w{} ", i % 37)).collect();
        let long_r: String = (0..280).map(|i| format!("w{}, ", i % 41)).collect();
        let huge: String = (0..70_000).map(|i| format!("t{i} ")).collect();
        let pairs = [
            ("The cat sat on the mat.", "The cat is sitting on the mat."),
            (long_h.as_str(), long_r.as_str()),
            ("", "x y"),
            ("1990-2000 a.b &amp; „Ahoj“", "1990 - 2000 a . b & „Ahoj“"),
            (huge.as_str(), "t1 t2 t3 t4 t5"),
            ("a a a a a b", "a a b b a a a"),
        ];
        let mut bleu = Bleu::default();
        for _ in 0..2 {
            for (h, r) in pairs {
                let want = stats_by_text(&toks(h), &toks(r));
                assert_eq!(bleu.stats(h, r), want, "{:.40} / {:.40}", h, r);
            }
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
