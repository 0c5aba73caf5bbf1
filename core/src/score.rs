//! The scores of a (reference, translation) pair, as docs/DEFINITIONS.md section 3
//! defines them: n-gram overlap (Wieting and Gimpel, 2018, footnote 6), the paraphrase score
//! (cosine of the two sentence embeddings of a [`SentenceEncoder`]: a
//! trained model or averaged word vectors), and token lengths. Every score
//! reads the same tokens, from [`crate::tokenize`], except sentence BLEU
//! ([`crate::bleu`], sacrebleu's own tokenizer).

use crate::encoder::{Scratch, SentenceEncoder};
use crate::tokenize::{tokenize_into, Tokens};

/// n-gram overlap of two token lists: with S the shorter n-gram list and L
/// the other, |{i : S[i] occurs in L}| / |S|; 0 when S is empty. Repeats in
/// S each count (the authors' filter script loops over S's positions). When
/// both lists have the same length, S is `a`.
pub fn ngram_overlap(a: &Tokens, b: &Tokens, n: usize) -> f32 {
    let (mut ia, mut ib) = (Vec::new(), Vec::new());
    intern(a, b, &mut ia, &mut ib, &mut Vec::new());
    overlap_ids(&ia, &ib, n)
}

/// Where an interned token was first seen: side (0 = a, 1 = b) and index.
#[derive(Debug, Clone, Copy)]
struct Span {
    side: u8,
    index: u32,
}

/// Gives equal tokens of the two sentences equal small ids, so that n-grams
/// compare as integers. Hashes pre-filter; equality is confirmed on the text.
fn intern(
    a: &Tokens,
    b: &Tokens,
    ia: &mut Vec<u32>,
    ib: &mut Vec<u32>,
    table: &mut Vec<(u64, Span)>,
) {
    table.clear();
    if a.len() + b.len() > LONG {
        return intern_long(a, b, ia, ib, table);
    }
    for (side, toks, ids) in [(0u8, a, ia), (1u8, b, ib)] {
        ids.clear();
        for (index, t) in toks.iter().enumerate() {
            let found = table.iter().position(|&(h, sp)| {
                h == t.hash() && {
                    let other = if sp.side == 0 { a } else { b };
                    other.get(sp.index as usize).text == t.text
                }
            });
            let id = found.unwrap_or_else(|| {
                table.push((
                    t.hash(),
                    Span {
                        side,
                        index: index as u32,
                    },
                ));
                table.len() - 1
            });
            ids.push(id as u32);
        }
    }
}

/// Above this many tokens in a pair, interning and n-gram matching switch
/// from linear scans (fastest for sentences) to hashing and sorting, so that
/// a pathological 100k-token line costs O(n log n), not O(n^2).
const LONG: usize = 256;

fn intern_long(
    a: &Tokens,
    b: &Tokens,
    ia: &mut Vec<u32>,
    ib: &mut Vec<u32>,
    table: &mut Vec<(u64, Span)>,
) {
    let mut seen: rustc_hash::FxHashMap<&str, u32> = rustc_hash::FxHashMap::default();
    for (side, toks, ids) in [(0u8, a, ia), (1u8, b, ib)] {
        ids.clear();
        for (index, t) in toks.iter().enumerate() {
            let next = table.len() as u32;
            let id = *seen.entry(t.text).or_insert_with(|| {
                table.push((
                    t.hash(),
                    Span {
                        side,
                        index: index as u32,
                    },
                ));
                next
            });
            ids.push(id);
        }
    }
}

/// The overlap on interned ids; n-grams up to 3 pack into one u64.
fn overlap_ids(a: &[u32], b: &[u32], n: usize) -> f32 {
    let (na, nb) = (ngrams(a.len(), n), ngrams(b.len(), n));
    let (s, l, ns, nl) = if na <= nb {
        (a, b, na, nb)
    } else {
        (b, a, nb, na)
    };
    if ns == 0 {
        return 0.0;
    }
    let hits = if n <= 3 {
        // Ids are below 2^21: a pair has fewer tokens than that.
        let key = |v: &[u32], i: usize| (0..n).fold(0u64, |k, j| k | (v[i + j] as u64) << (21 * j));
        if nl <= 64 {
            let mut lk = [0u64; 64];
            for (j, k) in lk[..nl].iter_mut().enumerate() {
                *k = key(l, j);
            }
            (0..ns).filter(|&i| lk[..nl].contains(&key(s, i))).count()
        } else {
            let mut lk: Vec<u64> = (0..nl).map(|j| key(l, j)).collect();
            lk.sort_unstable();
            (0..ns)
                .filter(|&i| lk.binary_search(&key(s, i)).is_ok())
                .count()
        }
    } else {
        {
            let mut lk: Vec<&[u32]> = (0..nl).map(|j| &l[j..j + n]).collect();
            lk.sort_unstable();
            (0..ns)
                .filter(|&i| lk.binary_search(&&s[i..i + n]).is_ok())
                .count()
        }
    };
    hits as f32 / ns as f32
}

fn ngrams(len: usize, n: usize) -> usize {
    (len + 1).saturating_sub(n)
}

/// Everything the pipeline stores about a pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairScores {
    /// Cosine of the two sentence embeddings; `None` when a side has none
    /// (no known word or trigram).
    pub para_score: Option<f32>,
    pub unigram_overlap: f32,
    pub bigram_overlap: f32,
    pub trigram_overlap: f32,
    /// sacrebleu's `sentence_bleu(translation, [reference])` with its
    /// defaults, 0-100 ([`crate::bleu`]).
    pub sentence_bleu: f32,
    /// Perplexity of the translation's tokens under the `[scoring] lm`
    /// n-gram model ([`crate::lm`]); `None` without one.
    pub translation_perplexity: Option<f32>,
    /// P(reference) of the translation under a reference/translation
    /// classifier (Wieting et al., 2017, section 5.6.1): set by `paraforge rescore
    /// --classifier`, which needs a classifier trained on translations, so
    /// `None` when a worker scores.
    pub reference_probability: Option<f32>,
    pub reference_len: u32,
    pub translation_len: u32,
    /// Tokens without a row of their own in the encoder, per side.
    pub reference_oov: u32,
    pub translation_oov: u32,
}

/// Scores pairs; holds the para_score encoder and reusable buffers.
pub struct Scorer<'v> {
    encoder: Option<&'v dyn SentenceEncoder>,
    lm: Option<&'v crate::lm::ArpaModel>,
    /// None leaves `sentence_bleu` at 0.
    bleu: Option<crate::bleu::Smoothing>,
    r: Tokens,
    t: Tokens,
    ids_r: Vec<u32>,
    ids_t: Vec<u32>,
    table: Vec<(u64, Span)>,
    scratch: Scratch,
    emb_r: Vec<f32>,
    emb_t: Vec<f32>,
    bleu_buffers: crate::bleu::Bleu,
}

impl<'v> Scorer<'v> {
    /// A scorer; without an encoder, `para_score` is always `None`.
    pub fn new(encoder: Option<&'v dyn SentenceEncoder>) -> Scorer<'v> {
        let d = encoder.map_or(0, |e| e.dim());
        Scorer {
            encoder,
            lm: None,
            bleu: Some(crate::bleu::Smoothing::Sacrebleu),
            r: Tokens::default(),
            t: Tokens::default(),
            ids_r: Vec::new(),
            ids_t: Vec::new(),
            table: Vec::new(),
            scratch: Scratch::default(),
            emb_r: vec![0.0; d],
            emb_t: vec![0.0; d],
            bleu_buffers: crate::bleu::Bleu::default(),
        }
    }

    /// Also scores the translation's perplexity under `lm`.
    pub fn with_lm(mut self, lm: Option<&'v crate::lm::ArpaModel>) -> Scorer<'v> {
        self.lm = lm;
        self
    }

    /// Leaves `sentence_bleu` at 0: `make bench-score` measures the scores
    /// para_score's speed target covers apart from the BLEU column.
    pub fn without_bleu(mut self) -> Scorer<'v> {
        self.bleu = None;
        self
    }

    /// Which sentence BLEU `sentence_bleu` is (`[scoring] bleu`).
    pub fn with_bleu(mut self, smoothing: crate::bleu::Smoothing) -> Scorer<'v> {
        self.bleu = Some(smoothing);
        self
    }

    pub fn score(&mut self, reference: &str, translation: &str) -> PairScores {
        tokenize_into(reference, &mut self.r);
        tokenize_into(translation, &mut self.t);
        let mut table = std::mem::take(&mut self.table);
        intern(
            &self.r,
            &self.t,
            &mut self.ids_r,
            &mut self.ids_t,
            &mut table,
        );
        self.table = table;
        let (mut oov_r, mut oov_t, mut para) = (0, 0, None);
        if let Some(e) = self.encoder {
            // The encoder reads the tokens already made: one tokenization per pair.
            let cr = e.embed_tokens(&self.r, &mut self.scratch, &mut self.emb_r);
            let ct = e.embed_tokens(&self.t, &mut self.scratch, &mut self.emb_t);
            (oov_r, oov_t) = (cr.unknown, ct.unknown);
            if cr.known > 0 && ct.known > 0 {
                para = Some(cosine(&self.emb_r, &self.emb_t));
            }
        }
        let (a, b) = (&self.ids_r, &self.ids_t);
        PairScores {
            para_score: para,
            unigram_overlap: overlap_ids(a, b, 1),
            bigram_overlap: overlap_ids(a, b, 2),
            trigram_overlap: overlap_ids(a, b, 3),
            sentence_bleu: self.bleu.map_or(0.0, |s| {
                self.bleu_buffers.score(translation, reference, s) as f32
            }),
            translation_perplexity: self.lm.map(|m| m.perplexity_tokens(&self.t) as f32),
            reference_probability: None,
            reference_len: self.r.len() as u32,
            translation_len: self.t.len() as u32,
            reference_oov: oov_r,
            translation_oov: oov_t,
        }
    }
}

/// Cosine similarity; 0 when either vector is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    (ab / (aa.sqrt() * bb.sqrt())).clamp(-1.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::tokenize;

    fn overlap(a: &str, b: &str, n: usize) -> f32 {
        ngram_overlap(&tokenize(a), &tokenize(b), n)
    }

    #[test]
    fn trigram_overlap_worked_examples() {
        // r: the cat sat on the mat -> 4 trigrams; t: the cat sat on a mat -> 4.
        // Shared: "the cat sat", "cat sat on" -> 2/4.
        assert_eq!(
            overlap("the cat sat on the mat", "the cat sat on a mat", 3),
            0.5
        );
        // Identical sentences overlap fully; disjoint ones not at all.
        assert_eq!(overlap("a b c d", "a b c d", 3), 1.0);
        assert_eq!(overlap("a b c", "d e f", 3), 0.0);
        // The shorter list is S: 1 trigram "a b c" occurs in the longer.
        assert_eq!(overlap("x a b c y z", "a b c", 3), 1.0);
        assert_eq!(overlap("a b c", "x a b c y z", 3), 1.0);
        // Fewer than n tokens on a side: S is empty, so 0.
        assert_eq!(overlap("a b", "a b c", 3), 0.0);
        assert_eq!(overlap("", "", 3), 0.0);
        // Punctuation is a token: "hello , world" vs "hello world".
        assert_eq!(overlap("Hello, world", "hello world", 2), 0.0);
        assert_eq!(overlap("Hello, world", "hello world", 1), 1.0);
    }

    #[test]
    fn repeated_ngrams_in_the_shorter_list_each_count() {
        // S = [a b c, b c a, c a b, a b c] (6 tokens: a b c a b c); L has only "a b c".
        // Positions 0 and 3 hit: 2/4.
        assert_eq!(overlap("a b c a b c", "a b c x y z w", 3), 0.5);
        // Unigrams: S = "the the the" (3), L contains "the": 3/3.
        assert_eq!(overlap("the the the", "the dog barked loudly", 1), 1.0);
        // Repeats in L do not inflate: S = [dog], L = [the the the the] -> 0.
        assert_eq!(overlap("dog", "the the the the", 1), 0.0);
    }

    #[test]
    fn non_ascii_text_is_compared_after_lowercasing() {
        assert_eq!(overlap("Žluťoučký kůň úpěl", "žluťoučký KŮŇ úpěl", 3), 1.0);
        assert_eq!(overlap("Ünïcödé wörds here", "ünïcödé wörds there", 2), 0.5);
    }

    use crate::vectors::Vectors;

    fn vectors() -> Vectors {
        Vectors::from_pairs(
            2,
            [
                ("cat", &[1.0f32, 0.0][..]),
                ("dog", &[0.8, 0.6][..]),
                ("the", &[0.0, 1.0][..]),
            ],
        )
    }

    #[test]
    fn para_score_averages_known_words_and_counts_the_rest() {
        let v = vectors();
        let mut s = Scorer::new(Some(&v));
        let p = s.score("The cat!", "the dog");
        // sums: (1, 1) and (0.8, 1.6): cos = 2.4 / (sqrt 2 * sqrt 3.2)
        let want = 2.4 / (2f32.sqrt() * 3.2f32.sqrt());
        assert!((p.para_score.unwrap() - want).abs() < 1e-6);
        assert_eq!(
            (p.reference_oov, p.translation_oov),
            (1, 0),
            "'!' has no vector"
        );
        assert_eq!((p.reference_len, p.translation_len), (3, 2));
        // A side with no known word has no score.
        assert_eq!(s.score("zebra !", "the cat").para_score, None);
        assert_eq!(
            Scorer::new(None).score("the cat", "the cat").para_score,
            None
        );
    }

    #[test]
    fn empty_whitespace_and_very_long_inputs_have_defined_scores() {
        let v = vectors();
        let mut s = Scorer::new(Some(&v));
        for (a, b) in [("", ""), ("   \t ", "the cat"), ("", "x")] {
            let p = s.score(a, b);
            assert_eq!(p.para_score, None);
            assert_eq!(p.trigram_overlap, 0.0);
            assert_eq!(p.unigram_overlap, 0.0);
        }
        // 200k tokens a side: the sorted/hashed paths, well under a few seconds.
        let long: String = (0..200_000).map(|i| format!("w{} ", i % 5000)).collect();
        let p = s.score(&long, &long);
        assert_eq!(p.trigram_overlap, 1.0);
        assert_eq!(p.reference_len, 200_000);
        // The long paths agree with the short ones.
        let mid: String = (0..300).map(|i| format!("w{} ", i % 40)).collect();
        let short: String = (0..100).map(|i| format!("w{} ", (i * 7) % 50)).collect();
        let (a, b) = (tokenize(&mid), tokenize(&short));
        let (mut ia, mut ib, mut t1) = (Vec::new(), Vec::new(), Vec::new());
        intern_long(&a, &b, &mut ia, &mut ib, &mut t1);
        for n in 1..=4 {
            let brute = {
                let (ga, gb): (Vec<_>, Vec<_>) = (
                    a.texts().windows(n).map(|w| w.to_vec()).collect(),
                    b.texts().windows(n).map(|w| w.to_vec()).collect(),
                );
                let (sx, lx) = if ga.len() <= gb.len() {
                    (&ga, &gb)
                } else {
                    (&gb, &ga)
                };
                sx.iter().filter(|g| lx.contains(g)).count() as f32 / sx.len() as f32
            };
            assert_eq!(overlap_ids(&ia, &ib, n), brute, "n = {n}");
        }
    }

    /// The shipped default scorer on real pairs: para_score is the model's
    /// own cosine (what `eval-sts` and the trainer compute), and word
    /// vectors still score as before.
    #[test]
    fn shipped_scorer_para_score_is_the_models_cosine() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let m = crate::encoder::Model::load(&root.join("models/scorer-trigram")).unwrap();
        assert_eq!(m.kind, crate::encoder::Kind::Trigram);
        let text =
            std::fs::read_to_string(root.join("data/sample/czeng16-heldout.cs-en.tsv")).unwrap();
        let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
        let mut s = Scorer::new(Some(&m));
        let (mut n, mut spread) = (0, (f32::MAX, f32::MIN));
        // Neighbouring references (unrelated captions and news), a sentence
        // with itself lowercased, and English against Czech (mostly unknown
        // trigrams).
        for w in rows.windows(2).step_by(7) {
            for (a, b) in [
                (w[0][3], w[1][3]),
                (w[0][3], &*w[0][3].to_lowercase()),
                (w[0][3], w[0][2]),
            ] {
                let p = s.score(a, b).para_score.unwrap();
                let own = cosine(&m.embed(a), &m.embed(b));
                assert!((p - own).abs() <= 1e-5, "{a:?} / {b:?}: {p} vs {own}");
                spread = (spread.0.min(p), spread.1.max(p));
                n += 1;
            }
        }
        assert!(n > 1500);
        assert!(spread.0 < 0.4 && spread.1 > 0.99, "{spread:?}");
        assert_eq!(s.score("", "a cat").para_score, None);
    }

    #[test]
    fn without_bleu_leaves_only_sentence_bleu_out() {
        let (r, t) = ("The cat sat on the mat.", "A cat sat on the mat.");
        let all = Scorer::new(None).score(r, t);
        let rest = Scorer::new(None).without_bleu().score(r, t);
        assert!(all.sentence_bleu > 30.0, "{all:?}");
        assert_eq!(
            PairScores {
                sentence_bleu: all.sentence_bleu,
                ..rest
            },
            all
        );
    }

    #[test]
    fn cosine_handles_zero_vectors() {
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-6);
        assert!((cosine(&[1.0, 0.0], &[-1.0, 0.0]) + 1.0).abs() < 1e-6);
    }
}
