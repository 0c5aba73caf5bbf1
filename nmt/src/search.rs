//! Beam search and greedy decoding over per-row logits, with the semantics
//! of transformers 4.57 `generate` (the vectorized `_beam_search` and
//! `_sample`), so that tokens and `sequences_scores` match it:
//!
//! * scores are `log_softmax` over the whole vocabulary, then masked
//!   (min length, bad words, forced tokens) without renormalizing;
//! * each step takes the top `2 * num_beams` continuations of a sentence,
//!   the best `num_beams` of those that did not end become the running
//!   beams, and those among the first `num_beams` that ended compete for
//!   the `num_beams` finished slots with score `sum / len^length_penalty`
//!   (len = generated tokens, eos included);
//! * a sentence stops when no running beam can beat its worst finished one
//!   (the `early_stopping` heuristic), when all slots are full under
//!   `early_stopping = true`, or at `max_length`.
//!
//! The ONNX driver in `engine.rs` owns the model; this module only sees
//! logits, which keeps it testable without a model.

use crate::config::EarlyStopping;
use crate::fastmath;

/// Decoding settings after defaults from `generation_config.json` and the
/// caller's options are resolved. Lengths count the decoder start token, as
/// transformers' `max_length`/`min_length` do for encoder-decoder models.
#[derive(Debug, Clone)]
pub struct Settings {
    pub num_beams: usize,
    pub max_length: usize,
    pub min_length: usize,
    pub length_penalty: f32,
    /// 0: off (`processors.rs`).
    pub no_repeat_ngram_size: usize,
    /// 1.0: off (`processors.rs`).
    pub repetition_penalty: f32,
    pub early_stopping: EarlyStopping,
    pub eos_id: u32,
    pub banned_ids: Vec<u32>,
    pub forced_bos_id: Option<u32>,
    pub forced_eos_id: Option<u32>,
    pub nbest: usize,
}

/// A finished hypothesis: generated ids (decoder start excluded, eos
/// included when generated) and its length-normalised score.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub tokens: Vec<u32>,
    pub score: f32,
}

/// What a step's masks do to the log-probabilities of every row.
#[derive(Debug, Clone, Default)]
pub struct StepMask {
    /// Only this token may follow (forced bos/eos): it scores 0, all others -inf.
    forced: Option<u32>,
    /// These tokens score -inf.
    banned: Vec<u32>,
}

impl StepMask {
    pub fn forced(&self) -> Option<u32> {
        self.forced
    }

    pub fn banned(&self) -> &[u32] {
        &self.banned
    }

    /// How many tokens this step leaves out.
    pub fn banned_len(&self) -> usize {
        self.banned.len()
    }
}

impl Settings {
    /// The masks of the step at decoder length `cur_len`.
    pub fn step_mask(&self, cur_len: usize) -> StepMask {
        let forced = if cur_len == 1 && self.forced_bos_id.is_some() {
            self.forced_bos_id
        } else if cur_len + 1 == self.max_length {
            self.forced_eos_id
        } else {
            None
        };
        let mut banned = self.banned_ids.clone();
        if cur_len < self.min_length {
            banned.push(self.eos_id);
        }
        StepMask { forced, banned }
    }

    /// The most tokens any step leaves out (the banned ids, and eos
    /// before the minimum length).
    pub fn most_banned(&self) -> usize {
        self.banned_ids.len() + 1
    }

    /// Candidates the search takes from each row: twice the beams (one
    /// for greedy search).
    pub fn candidates_per_row(&self) -> usize {
        if self.num_beams == 1 {
            1
        } else {
            2 * self.num_beams
        }
    }

    fn penalised(&self, score: f32, generated: usize) -> f32 {
        score / (generated as f32).powf(self.length_penalty)
    }
}

/// The best `k` (log-probability, token) pairs of one row of logits, best
/// first, ties to the lower token id (as torch.topk on CPU in practice).
/// Masked tokens are left out; the log-softmax runs over the whole row.
/// Rows are independent, so the engine runs this on all rows in parallel.
pub fn row_candidates(logits: &[f32], k: usize, mask: &StepMask, out: &mut Vec<(f32, u32)>) {
    match mask.forced {
        Some(id) => {
            out.clear();
            out.push((0.0, id));
        }
        None => {
            let lse = fastmath::log_sum_exp_top_k(logits, k, &mask.banned, out);
            for c in out.iter_mut() {
                c.0 -= lse;
            }
        }
    }
}

/// [`row_candidates`] for a row that arrives as its best log-probabilities
/// (best first) and their token ids, as a decoder graph ending in TopK
/// returns them (`top_k.rs`). The row must hold at least `k` plus
/// [`StepMask::banned_len`] of them, so that `k` remain once the banned are
/// left out; the decoding loop has checked that every id is in the
/// vocabulary. Ties go to the lower token id, as on the host.
pub fn top_candidates(
    logprobs: &[f32],
    ids: &[i64],
    k: usize,
    mask: &StepMask,
    out: &mut Vec<(f32, u32)>,
) {
    out.clear();
    if let Some(id) = mask.forced {
        out.push((0.0, id));
        return;
    }
    // All of the row, then the best k: TopK on a GPU need not order ties
    // by id, and a tie at the k-th place must go to the lower one.
    out.extend(
        logprobs
            .iter()
            .zip(ids)
            .map(|(&lp, &id)| (lp, id as u32))
            .filter(|(_, id)| !mask.banned.contains(id)),
    );
    out.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    out.truncate(k);
}

/// The state of one sentence under beam search.
#[derive(Debug, Clone)]
pub struct Beams {
    /// Running hypotheses: generated ids and summed log-probabilities.
    tokens: Vec<Vec<u32>>,
    scores: Vec<f32>,
    /// The finished slots, best first; fewer than `num_beams` until filled.
    finished: Vec<Finished>,
    improvable: bool,
    done: bool,
}

/// Output of one step for one sentence: which previous row each new row
/// continues (for reordering the KV cache) and the token it appends.
#[derive(Debug, Clone, Default)]
pub struct StepOut {
    pub parents: Vec<usize>,
    pub tokens: Vec<u32>,
}

impl Beams {
    /// A sentence before the first step: one live beam (transformers gives
    /// beams 1.. a score of -1e9, so only beam 0 can be extended first).
    pub fn new() -> Beams {
        Beams {
            tokens: vec![Vec::new()],
            scores: vec![0.0],
            finished: Vec::new(),
            improvable: true,
            done: false,
        }
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Number of rows this sentence occupies in the next decoder call.
    pub fn rows(&self) -> usize {
        self.tokens.len()
    }

    /// The generated ids of row `r` (start token excluded).
    pub fn history(&self, r: usize) -> &[u32] {
        &self.tokens[r]
    }

    /// Advances by one token. `rows` holds, per running beam, the top
    /// `2 * num_beams` candidates of its row (from [`row_candidates`]);
    /// `cur_len` is the decoder length before the step (1 at the first step).
    pub fn step(
        &mut self,
        s: &Settings,
        rows: &[&[(f32, u32)]],
        cur_len: usize,
        scratch: &mut StepScratch,
    ) -> StepOut {
        debug_assert_eq!(rows.len(), self.tokens.len());
        let nb = s.num_beams;
        let k = 2 * nb;
        let cands = &mut scratch.cands;
        cands.clear();
        for (b, row) in rows.iter().enumerate() {
            let base = self.scores[b];
            cands.extend(row.iter().map(|&(lp, tok)| (lp + base, b, tok)));
        }
        // Rank by score, ties to the lower flat index (beam * vocab + token).
        cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        cands.truncate(k);
        let at_max = cur_len + 1 >= s.max_length;
        let hits = |tok: u32| tok == s.eos_id || at_max;

        // Finished slots: only the first num_beams candidates may enter,
        // and only while the sentence can still improve.
        let slots_full = self.finished.len() == nb;
        let accept = self.improvable && !(slots_full && s.early_stopping == EarlyStopping::True);
        if accept {
            for &(score, b, tok) in cands.iter().take(nb) {
                if !hits(tok) {
                    continue;
                }
                let mut tokens = Vec::with_capacity(self.tokens[b].len() + 1);
                tokens.extend_from_slice(&self.tokens[b]);
                tokens.push(tok);
                let score = s.penalised(score, cur_len);
                // Insert after equal scores: existing slots win ties, as in
                // transformers' topk over [finished, candidates].
                let pos = self.finished.partition_point(|f| f.score >= score);
                if pos < nb {
                    self.finished.insert(pos, Finished { tokens, score });
                    self.finished.truncate(nb);
                }
            }
        }

        // Running beams: the best num_beams candidates that did not end.
        let mut out = StepOut::default();
        let mut new_tokens = Vec::with_capacity(nb);
        let mut new_scores = Vec::with_capacity(nb);
        for &(score, b, tok) in cands.iter().filter(|c| !hits(c.2)).take(nb) {
            let mut t = Vec::with_capacity(self.tokens[b].len() + 1);
            t.extend_from_slice(&self.tokens[b]);
            t.push(tok);
            new_tokens.push(t);
            new_scores.push(score);
            out.parents.push(b);
            out.tokens.push(tok);
        }
        // Forced steps can leave fewer live candidates than beams; dead
        // beams (-inf) keep the row count fixed and can never finish first.
        while new_tokens.len() < nb && !at_max {
            let b = out.parents.first().copied().unwrap_or(0);
            let tok = out.tokens.first().copied().unwrap_or(s.eos_id);
            let mut t = self.tokens[b].clone();
            t.push(tok);
            new_tokens.push(t);
            new_scores.push(f32::NEG_INFINITY);
            out.parents.push(b);
            out.tokens.push(tok);
        }
        self.tokens = new_tokens;
        self.scores = new_scores;

        // The early-stop heuristic, judged at the new length.
        let generated = cur_len; // tokens generated after this step
        if self.finished.len() == nb {
            let best_len = if s.early_stopping == EarlyStopping::Never && s.length_penalty > 0.0 {
                s.max_length - 1
            } else {
                generated
            };
            let best_running = self.scores.first().copied().unwrap_or(f32::NEG_INFINITY)
                / (best_len as f32).powf(s.length_penalty);
            let worst = self.finished.last().map_or(f32::NEG_INFINITY, |f| f.score);
            self.improvable &= best_running > worst;
        }
        let all_full = self.finished.len() == nb;
        self.done = at_max
            || !self.improvable
            || (all_full && s.early_stopping == EarlyStopping::True)
            || self.tokens.is_empty();
        out
    }

    /// The best `nbest` finished hypotheses, best first.
    pub fn into_finished(self, nbest: usize) -> Vec<Finished> {
        let mut f = self.finished;
        f.truncate(nbest.max(1));
        f
    }
}

impl Default for Beams {
    fn default() -> Self {
        Beams::new()
    }
}

/// Buffers reused across steps so that the hot loop does not allocate.
#[derive(Debug, Default)]
pub struct StepScratch {
    cands: Vec<(f32, usize, u32)>,
}

/// Greedy decoding (`num_beams = 1`), which transformers runs as its own
/// loop: the arg-max of the masked scores, until eos or `max_length`.
#[derive(Debug, Clone, Default)]
pub struct Greedy {
    tokens: Vec<u32>,
    score: f32,
    done: bool,
}

impl Greedy {
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The generated ids (start token excluded).
    pub fn history(&self) -> &[u32] {
        &self.tokens
    }

    /// Takes the best candidate of the row (from [`row_candidates`] with k = 1).
    pub fn step(&mut self, s: &Settings, cands: &[(f32, u32)], cur_len: usize) -> u32 {
        let (lp, tok) = cands
            .first()
            .copied()
            .unwrap_or((f32::NEG_INFINITY, s.eos_id));
        self.tokens.push(tok);
        self.score += lp;
        self.done = tok == s.eos_id || cur_len + 1 >= s.max_length;
        tok
    }

    pub fn into_finished(self, s: &Settings) -> Finished {
        let n = self.tokens.len().max(1);
        Finished {
            score: s.penalised(self.score, n),
            tokens: self.tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(nb: usize, max_length: usize) -> Settings {
        Settings {
            num_beams: nb,
            max_length,
            min_length: 0,
            length_penalty: 1.0,
            no_repeat_ngram_size: 0,
            repetition_penalty: 1.0,
            early_stopping: EarlyStopping::False,
            eos_id: 0,
            banned_ids: vec![4],
            forced_bos_id: None,
            forced_eos_id: Some(0),
            nbest: nb,
        }
    }

    /// A row's candidates, as the engine computes them.
    fn cands(s: &Settings, cur_len: usize, probs: &[f32], k: usize) -> Vec<(f32, u32)> {
        let logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
        let mut out = Vec::new();
        row_candidates(&logits, k, &s.step_mask(cur_len), &mut out);
        out
    }

    #[test]
    fn greedy_stops_at_eos_and_averages_log_probs() {
        let s = settings(1, 10);
        let mut g = Greedy::default();
        // Token 4 is banned although it is the most likely.
        let t = g.step(&s, &cands(&s, 1, &[0.1, 0.2, 0.1, 0.1, 0.5], 1), 1);
        assert_eq!(t, 1);
        let t = g.step(&s, &cands(&s, 2, &[0.6, 0.1, 0.1, 0.1, 0.1], 1), 2);
        assert_eq!(t, 0);
        assert!(g.is_done());
        let f = g.into_finished(&s);
        assert_eq!(f.tokens, vec![1, 0]);
        let want = (0.2f32.ln() + 0.6f32.ln()) / 2.0;
        assert!((f.score - want).abs() < 1e-5, "{} vs {want}", f.score);
    }

    #[test]
    fn beam_keeps_best_finished_and_stops_when_no_improvement() {
        let s = settings(2, 10);
        let mut b = Beams::new();
        let mut sc = StepScratch::default();
        // Step 1: eos is the best continuation, so it finishes at once;
        // tokens 1 and 2 run on.
        let out = b.step(
            &s,
            &[&cands(&s, 1, &[0.5, 0.3, 0.15, 0.0499, 0.0001], 4)],
            1,
            &mut sc,
        );
        assert_eq!(out.tokens, vec![1, 2]);
        assert_eq!(out.parents, vec![0, 0]);
        assert_eq!(b.finished.len(), 1);
        assert!(!b.is_done());
        // Step 2: both beams end with eos (ranks 0 and 1), filling the slots.
        let r = cands(&s, 2, &[0.9, 0.04, 0.03, 0.02, 0.01], 4);
        let _ = b.step(&s, &[&r, &r], 2, &mut sc);
        assert_eq!(b.finished.len(), 2);
        assert!(
            b.is_done(),
            "the running beams cannot beat the worst finished one"
        );
        // Best first: (ln 0.3 + ln 0.9) / 2 = -0.654 beats ln 0.5 = -0.693.
        let f = b.into_finished(2);
        assert_eq!(f[0].tokens, vec![1, 0]);
        assert!((f[0].score - (0.3f32.ln() + 0.9f32.ln()) / 2.0).abs() < 1e-5);
        assert_eq!(f[1].tokens, vec![0]);
        assert!((f[1].score - 0.5f32.ln()).abs() < 1e-5);
    }

    #[test]
    fn min_length_blocks_eos_and_max_length_forces_it() {
        let mut s = settings(2, 3);
        s.min_length = 2;
        let mut b = Beams::new();
        let mut sc = StepScratch::default();
        let out = b.step(
            &s,
            &[&cands(&s, 1, &[0.9, 0.04, 0.03, 0.02, 0.01], 4)],
            1,
            &mut sc,
        );
        assert!(!out.tokens.contains(&0), "eos is banned before min_length");
        assert!(b.finished.is_empty());
        // cur_len 2 = max_length - 1: eos is forced and every beam finishes.
        let r = cands(&s, 2, &[0.01, 0.9, 0.03, 0.03, 0.03], 4);
        let _ = b.step(&s, &[&r, &r], 2, &mut sc);
        assert!(b.is_done());
        let f = b.into_finished(2);
        assert!(f.iter().all(|h| h.tokens.len() == 2 && h.tokens[1] == 0));
        // Forced eos scores 0, so the score is the first token's over 2.
        assert!((f[0].score - 0.04f32.ln() / 2.0).abs() < 1e-5);
    }
}
