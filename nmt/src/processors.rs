//! The repetition controls of transformers' `generate` on one row of
//! logits: `RepetitionPenaltyLogitsProcessor` and
//! `NoRepeatNGramLogitsProcessor`, applied where transformers applies them
//! (beam search: to the log-softmax of the row; greedy: to the raw logits
//! before the argmax), before the masks of [`StepMask`] and the top-k.
//! A row's history is its decoder ids so far, the start token included,
//! as transformers' `input_ids` are.

use crate::fastmath;
use crate::search::{Settings, StepMask};

/// Buffers of one row's processing, reused across rows and steps.
#[derive(Default)]
pub struct RowScratch {
    banned: Vec<u32>,
    seen: Vec<u32>,
}

impl Settings {
    /// Whether any repetition control is on.
    pub fn controls_repetition(&self) -> bool {
        self.no_repeat_ngram_size > 0 || self.repetition_penalty != 1.0
    }
}

/// Tokens that would complete an n-gram already in `history` (n =
/// `size`): every token that followed an earlier occurrence of the last
/// n - 1 tokens. None before the history has n - 1 tokens.
fn repeated_ngram_ends(history: &[u32], size: usize, out: &mut Vec<u32>) {
    if size == 0 || history.len() + 1 < size {
        return;
    }
    let prefix = &history[history.len() + 1 - size..];
    for w in history.windows(size) {
        if w[..size - 1] == *prefix {
            out.push(w[size - 1]);
        }
    }
}

fn penalise(v: f32, p: f32) -> f32 {
    if v < 0.0 {
        v * p
    } else {
        v / p
    }
}

/// [`crate::search::row_candidates`] with the repetition controls of `s`
/// on the row whose decoder ids so far are `history`. The value of each
/// candidate is what the search adds to the hypothesis: for beam search
/// the processed log-probability (transformers' `sequences_scores` sum
/// these); for greedy search (k = 1) the token is the argmax of the
/// processed logits and its value the model's own log-probability.
pub fn controlled_candidates(
    logits: &[f32],
    k: usize,
    mask: &StepMask,
    s: &Settings,
    history: &[u32],
    scratch: &mut RowScratch,
    out: &mut Vec<(f32, u32)>,
) {
    if let Some(id) = mask.forced() {
        out.clear();
        out.push((0.0, id));
        return;
    }
    let RowScratch { banned, seen } = scratch;
    banned.clear();
    banned.extend_from_slice(mask.banned());
    repeated_ngram_ends(history, s.no_repeat_ngram_size, banned);
    banned.sort_unstable();
    banned.dedup();
    // The penalised tokens are taken out of the fused top-k (which sees
    // raw values) and put back with their processed value.
    seen.clear();
    if s.repetition_penalty != 1.0 {
        seen.extend(
            history
                .iter()
                .copied()
                .filter(|&t| (t as usize) < logits.len()),
        );
        seen.sort_unstable();
        seen.dedup();
        seen.retain(|t| banned.binary_search(t).is_err());
    }
    let n_banned = banned.len();
    banned.extend_from_slice(seen);
    let lse = fastmath::log_sum_exp_top_k(logits, k, banned, out);
    banned.truncate(n_banned);
    let p = s.repetition_penalty;
    if s.num_beams == 1 {
        // Greedy: the argmax of the processed logits, valued by its
        // log-probability.
        let best = seen
            .iter()
            .map(|&t| (penalise(logits[t as usize], p), t))
            .chain(out.first().map(|&(v, t)| (v, t)))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        out.clear();
        if let Some((_, t)) = best {
            out.push((logits[t as usize] - lse, t));
        }
        return;
    }
    for c in out.iter_mut() {
        c.0 -= lse;
    }
    out.extend(
        seen.iter()
            .map(|&t| (penalise(logits[t as usize] - lse, p), t)),
    );
    // Best first, ties to the lower id, as the fused top-k orders them.
    out.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    out.truncate(k);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ngram_seen_before_bans_its_last_token() {
        let mut out = Vec::new();
        // start=9, then 1 2 3 1 2: the bigram prefix (1, 2) was followed by 3.
        repeated_ngram_ends(&[9, 1, 2, 3, 1, 2], 3, &mut out);
        assert_eq!(out, vec![3]);
        out.clear();
        // size 2: after 2, token 3 followed it before.
        repeated_ngram_ends(&[9, 1, 2, 3, 1, 2], 2, &mut out);
        assert_eq!(out, vec![3]);
        out.clear();
        repeated_ngram_ends(&[9, 1], 3, &mut out);
        assert!(out.is_empty());
        // size 1 bans every token seen (transformers' behaviour).
        repeated_ngram_ends(&[9, 1, 2], 1, &mut out);
        assert_eq!(out, vec![9, 1, 2]);
    }
}
