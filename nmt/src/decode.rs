//! The decoding loop, apart from the model that runs it (as CTranslate2
//! keeps its decoder interface apart from search). A [`StepDecoder`] turns
//! each row's last token into logits, or into the row's best candidates,
//! and keeps its own state (KV caches) in step with the rows the search
//! keeps; [`decode`] runs the search of `search.rs` over them until every
//! sentence is done. The ONNX
//! decoder is `engine::OnnxStep`; the tests here drive the loop with
//! synthetic logits.

use rayon::prelude::*;

use crate::error::NmtError;
use crate::processors::{controlled_candidates, RowScratch};
use crate::search::{
    row_candidates, top_candidates, Beams, Finished, Greedy, Settings, StepMask, StepScratch,
};

/// What one call gives the search for each of its rows.
pub(crate) enum Rows<'a> {
    /// `rows x width` logits, row-major.
    Logits { data: &'a [f32], width: usize },
    /// Each row's `width` best log-probabilities, best first, and their
    /// token ids (a graph ending in TopK, `top_k.rs`).
    Top {
        logprobs: &'a [f32],
        ids: &'a [i64],
        width: usize,
    },
}

impl Rows<'_> {
    /// The number of rows, once the output is known to be what the search
    /// can use: logits as wide as config.json's vocabulary, or candidates
    /// of that vocabulary, at least `need` a row (fewer only where the
    /// vocabulary is smaller).
    fn count(&self, need: usize, vocab: usize) -> Result<usize, NmtError> {
        let bad = |m: String| Err(NmtError::inference("decoder", m));
        match *self {
            Rows::Logits { data, width } => {
                if width != vocab {
                    return bad(format!(
                        "logits have {width} columns but config.json has a vocabulary of {vocab}"
                    ));
                }
                Ok(data.len() / width)
            }
            Rows::Top {
                logprobs,
                ids,
                width,
            } => {
                let need = need.min(vocab);
                if ids.len() != logprobs.len() || width < need {
                    return bad(format!(
                        "{} candidate log-probabilities and {} ids, {width} per row: too few (need {need} per row)",
                        logprobs.len(),
                        ids.len()
                    ));
                }
                if let Some(&id) = ids.iter().find(|&&id| id < 0 || id as usize >= vocab) {
                    return bad(format!(
                        "candidate token id {id} outside config.json's vocabulary of {vocab}"
                    ));
                }
                Ok(logprobs.len() / width.max(1))
            }
        }
    }
}

/// The output of one decoder call, as the search reads it.
pub(crate) trait StepOutput {
    fn rows(&self) -> Result<Rows<'_>, NmtError>;
}

/// What the loop needs from a model.
pub(crate) trait StepDecoder {
    type Output: StepOutput;
    /// Logits or candidates for every row, given each row's last token. The first call
    /// has one row per sentence (every beam starts the same).
    fn step(&mut self, last: &[i64]) -> Result<Self::Output, NmtError>;
    /// The rows of the next call: row i continues row `parents[i]` of the
    /// last call and belongs to sentence `sentences[i]` (indices into the
    /// batch). Called only when there is a next call.
    fn reorder(&mut self, parents: &[usize], sentences: &[usize]) -> Result<(), NmtError>;
}

/// Buffers reused across batches.
#[derive(Default)]
pub(crate) struct DecodeScratch {
    /// Every row's best candidates of the current step.
    row_cands: Vec<Vec<(f32, u32)>>,
    step: StepScratch,
}

/// Per sentence of a batch.
enum SearchState {
    Beam(Vec<Beams>),
    Greedy(Vec<Greedy>),
}

/// Decodes `n` sentences with `dec`, each starting from `start_id`.
/// Returns, per sentence, its finished hypotheses best first, and the
/// seconds spent in the search itself (log-softmax, top-k, beams).
pub(crate) fn decode<D: StepDecoder>(
    dec: &mut D,
    n: usize,
    start_id: u32,
    s: &Settings,
    vocab: usize,
    scratch: &mut DecodeScratch,
) -> Result<(Vec<Vec<Finished>>, f64), NmtError> {
    let mut state = if s.num_beams == 1 {
        SearchState::Greedy(vec![Greedy::default(); n])
    } else {
        SearchState::Beam(vec![Beams::new(); n])
    };
    let mut results: Vec<Vec<Finished>> = vec![Vec::new(); n];
    let mut live: Vec<usize> = (0..n).collect();
    let mut last = vec![start_id as i64; n];
    let mut search_s = 0.0;
    let mut cur_len = 1;
    while !live.is_empty() {
        let logits = dec.step(&last)?;
        let t0 = std::time::Instant::now();
        let k = s.candidates_per_row();
        let mask = s.step_mask(cur_len);
        let view = logits.rows()?;
        let nrows = view.count(k + mask.banned_len(), vocab)?;
        let fed = match &state {
            SearchState::Beam(beams) => live.iter().map(|&i| beams[i].rows()).sum(),
            SearchState::Greedy(_) => live.len(),
        };
        if nrows != fed {
            return Err(NmtError::inference(
                "decoder",
                format!("{nrows} rows of output for {fed} rows fed"),
            ));
        }
        all_candidates(&view, nrows, k, &mask, s, &state, &live, start_id, scratch)?;
        let cands = &scratch.row_cands;

        // Each live sentence's rows of the next call: (row of this call it
        // continues, token); None once the sentence is done.
        let mut outs: Vec<Option<(Vec<usize>, Vec<i64>)>> = Vec::with_capacity(live.len());
        let mut r0 = 0;
        match &mut state {
            SearchState::Beam(beams) => {
                for &sent in &live {
                    let bm = &mut beams[sent];
                    let rows = bm.rows();
                    let rc: Vec<&[(f32, u32)]> =
                        cands[r0..r0 + rows].iter().map(Vec::as_slice).collect();
                    let out = bm.step(s, &rc, cur_len, &mut scratch.step);
                    if bm.is_done() {
                        results[sent] = std::mem::take(bm).into_finished(s.nbest);
                        outs.push(None);
                    } else {
                        outs.push(Some((
                            out.parents.iter().map(|p| r0 + p).collect(),
                            out.tokens.iter().map(|&t| t as i64).collect(),
                        )));
                    }
                    r0 += rows;
                }
            }
            SearchState::Greedy(gs) => {
                for &sent in &live {
                    let g = &mut gs[sent];
                    let tok = g.step(s, &cands[r0], cur_len);
                    if g.is_done() {
                        results[sent] = vec![std::mem::take(g).into_finished(s)];
                        outs.push(None);
                    } else {
                        outs.push(Some((vec![r0], vec![tok as i64])));
                    }
                    r0 += 1;
                }
            }
        }
        let mut parents: Vec<usize> = Vec::new();
        let mut tokens: Vec<i64> = Vec::new();
        let mut sentences: Vec<usize> = Vec::new();
        let mut next_live = Vec::new();
        for i in fill_from_end(&outs) {
            let (p, t) = outs[i].as_ref().map_or((&[][..], &[][..]), |(p, t)| (p, t));
            next_live.push(live[i]);
            sentences.extend(std::iter::repeat_n(live[i], p.len()));
            parents.extend_from_slice(p);
            tokens.extend_from_slice(t);
        }
        drop(logits);
        search_s += t0.elapsed().as_secs_f64();
        if !next_live.is_empty() {
            dec.reorder(&parents, &sentences)?;
        }
        live = next_live;
        last = tokens;
        cur_len += 1;
    }
    Ok((results, search_s))
}

/// Every row's best `k` candidates into `scratch.row_cands`, in parallel:
/// from logits, this pass reads rows x vocab values and dominates the
/// search time. With repetition controls each row also reads its history.
#[allow(clippy::too_many_arguments)]
fn all_candidates(
    view: &Rows<'_>,
    nrows: usize,
    k: usize,
    mask: &StepMask,
    s: &Settings,
    state: &SearchState,
    live: &[usize],
    start_id: u32,
    scratch: &mut DecodeScratch,
) -> Result<(), NmtError> {
    scratch.row_cands.resize_with(nrows, Vec::new);
    let rows = &mut scratch.row_cands[..nrows];
    if s.controls_repetition() {
        let &Rows::Logits { data, width } = view else {
            return Err(NmtError::BadOption {
                option: "repetition_penalty",
                reason: "no_repeat_ngram_size and repetition_penalty need every row's logits: use the host top-k (model.top_k_on = \"host\"), not a graph ending in TopK".into(),
            });
        };
        let histories = row_histories(state, live, start_id);
        rows.par_iter_mut()
            .zip(histories.par_iter())
            .enumerate()
            .for_each_init(RowScratch::default, |rs, (r, (out, h))| {
                let row = &data[r * width..(r + 1) * width];
                controlled_candidates(row, k, mask, s, h, rs, out)
            });
        return Ok(());
    }
    rows.par_iter_mut()
        .enumerate()
        .for_each(|(r, out)| match *view {
            Rows::Logits { data, width } => {
                row_candidates(&data[r * width..(r + 1) * width], k, mask, out)
            }
            Rows::Top {
                logprobs,
                ids,
                width,
            } => {
                let at = r * width..(r + 1) * width;
                top_candidates(&logprobs[at.clone()], &ids[at], k, mask, out)
            }
        });
    Ok(())
}

/// Every row's decoder ids so far, start token first, in the order the
/// rows were fed.
fn row_histories(state: &SearchState, live: &[usize], start_id: u32) -> Vec<Vec<u32>> {
    let with_start = |h: &[u32]| std::iter::once(start_id).chain(h.iter().copied()).collect();
    match state {
        SearchState::Beam(beams) => live
            .iter()
            .flat_map(|&i| (0..beams[i].rows()).map(move |r| with_start(beams[i].history(r))))
            .collect(),
        SearchState::Greedy(gs) => live.iter().map(|&i| with_start(gs[i].history())).collect(),
    }
}

/// The order of the sentences that go on, as positions in `outs` (None =
/// done): a sentence that is done leaves its place to the last one that
/// goes on, so the rest keep their rows. Every position in the result is at
/// or after its own index, which lets a decoder drop finished sentences
/// from its caches in place, moving one sentence's rows per leaver instead
/// of every row after it.
fn fill_from_end<T>(outs: &[Option<T>]) -> Vec<usize> {
    let mut order = Vec::with_capacity(outs.len());
    let mut end = outs.len();
    let mut i = 0;
    while i < end {
        if outs[i].is_some() {
            order.push(i);
        } else {
            while end > i + 1 && outs[end - 1].is_none() {
                end -= 1;
            }
            if end <= i + 1 {
                break;
            }
            end -= 1;
            order.push(end);
        }
        i += 1;
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EarlyStopping;

    const EOS: u32 = 0;

    enum Synthetic {
        Logits(Vec<f32>, usize),
        Top(Vec<f32>, Vec<i64>, usize),
    }

    impl StepOutput for Synthetic {
        fn rows(&self) -> Result<Rows<'_>, NmtError> {
            Ok(match self {
                Synthetic::Logits(data, width) => Rows::Logits {
                    data,
                    width: *width,
                },
                Synthetic::Top(logprobs, ids, width) => Rows::Top {
                    logprobs,
                    ids,
                    width: *width,
                },
            })
        }
    }

    /// A model whose logits are a fixed function of each row's history
    /// (sentence and tokens so far). It keeps the histories through
    /// `reorder` as a real decoder keeps its cache, so a wrong reorder
    /// gives wrong logits, and it records each call's rows.
    struct HistoryModel {
        vocab: usize,
        /// (sentence, tokens so far) per row of the next call.
        rows: Vec<(usize, Vec<u32>)>,
        calls: Vec<usize>,
        /// Return each row's best this many log-probabilities and ids, as
        /// a graph ending in TopK does, instead of the logits.
        top: Option<usize>,
    }

    fn logit(sent: usize, hist: &[u32], tok: usize) -> f32 {
        // Deterministic, history-dependent, with eos likelier as the
        // history grows, so sentences end at different steps.
        let h = hist.iter().fold(sent as u64 * 7919 + 1, |a, &t| {
            a.wrapping_mul(31).wrapping_add(t as u64 + 3)
        });
        let x = (h.wrapping_mul(2654435761).wrapping_add(tok as u64 * 40503)) % 1000;
        let eos_boost = if tok == EOS as usize {
            hist.len() as f32 * 0.5 * (1.0 + sent as f32)
        } else {
            0.0
        };
        x as f32 / 250.0 + eos_boost
    }

    impl StepDecoder for HistoryModel {
        type Output = Synthetic;
        fn step(&mut self, last: &[i64]) -> Result<Synthetic, NmtError> {
            assert_eq!(last.len(), self.rows.len(), "one token per row");
            for (row, &t) in self.rows.iter_mut().zip(last) {
                if t >= 0 && t != START as i64 {
                    row.1.push(t as u32);
                }
            }
            self.calls.push(self.rows.len());
            let mut data = Vec::with_capacity(self.rows.len() * self.vocab);
            for (sent, hist) in &self.rows {
                data.extend((0..self.vocab).map(|t| logit(*sent, hist, t)));
            }
            let Some(width) = self.top else {
                return Ok(Synthetic::Logits(data, self.vocab));
            };
            let (mut logprobs, mut ids) = (Vec::new(), Vec::new());
            for row in data.chunks(self.vocab) {
                let m = row.iter().cloned().fold(f32::MIN, f32::max);
                let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f32>().ln();
                let mut order: Vec<usize> = (0..self.vocab).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                for &t in &order[..width] {
                    logprobs.push(row[t] - lse);
                    ids.push(t as i64);
                }
            }
            Ok(Synthetic::Top(logprobs, ids, width))
        }

        fn reorder(&mut self, parents: &[usize], sentences: &[usize]) -> Result<(), NmtError> {
            let old = std::mem::take(&mut self.rows);
            for (&p, &s) in parents.iter().zip(sentences) {
                assert_eq!(old[p].0, s, "a row continues a row of its own sentence");
                self.rows.push(old[p].clone());
            }
            Ok(())
        }
    }

    const START: u32 = 99;

    fn settings(num_beams: usize) -> Settings {
        Settings {
            num_beams,
            max_length: 10,
            min_length: 0,
            length_penalty: 1.0,
            no_repeat_ngram_size: 0,
            repetition_penalty: 1.0,
            early_stopping: EarlyStopping::False,
            eos_id: EOS,
            banned_ids: Vec::new(),
            forced_bos_id: None,
            forced_eos_id: None,
            nbest: num_beams,
        }
    }

    fn run(n: usize, beams: usize) -> (Vec<Vec<Finished>>, Vec<usize>) {
        run_with(n, &settings(beams), 6, None)
    }

    fn run_with(
        n: usize,
        s: &Settings,
        vocab: usize,
        top: Option<usize>,
    ) -> (Vec<Vec<Finished>>, Vec<usize>) {
        let mut m = HistoryModel {
            vocab,
            rows: (0..n).map(|s| (s, Vec::new())).collect(),
            calls: Vec::new(),
            top,
        };
        let (out, _) = decode(&mut m, n, START, s, vocab, &mut DecodeScratch::default()).unwrap();
        (out, m.calls)
    }

    /// The error of decoding `n` sentences of a `vocab`-token model (its
    /// rows' best `top` candidates, or its logits) when the loop is told
    /// the vocabulary is `told`.
    fn decode_error(
        n: usize,
        vocab: usize,
        top: Option<usize>,
        s: &Settings,
        told: usize,
    ) -> String {
        let mut m = HistoryModel {
            vocab,
            rows: (0..n).map(|s| (s, Vec::new())).collect(),
            calls: Vec::new(),
            top,
        };
        decode(&mut m, n, START, s, told, &mut DecodeScratch::default())
            .unwrap_err()
            .to_string()
    }

    /// log_softmax of the model's logits along a hypothesis, summed.
    fn path_score(sent: usize, tokens: &[u32]) -> f32 {
        let mut total = 0.0;
        for (i, &t) in tokens.iter().enumerate() {
            let row: Vec<f32> = (0..6).map(|x| logit(sent, &tokens[..i], x)).collect();
            let m = row.iter().cloned().fold(f32::MIN, f32::max);
            let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f32>().ln();
            total += row[t as usize] - lse;
        }
        total
    }

    #[test]
    fn greedy_follows_the_best_logit_of_each_rows_own_history() {
        let (out, calls) = run(3, 1);
        for (sent, hyps) in out.iter().enumerate() {
            assert_eq!(hyps.len(), 1);
            let h = &hyps[0];
            // Each token is the argmax given the history before it.
            for (i, &t) in h.tokens.iter().enumerate() {
                let best = (0..6u32)
                    .max_by(|&a, &b| {
                        logit(sent, &h.tokens[..i], a as usize)
                            .total_cmp(&logit(sent, &h.tokens[..i], b as usize))
                            .then(b.cmp(&a))
                    })
                    .unwrap();
                assert_eq!(t, best, "sentence {sent} step {i}");
            }
        }
        // Rows only shrink: a finished sentence leaves the batch.
        assert!(calls.windows(2).all(|w| w[1] <= w[0]), "{calls:?}");
    }

    #[test]
    fn beam_scores_are_their_paths_scores_so_every_reorder_was_right() {
        let beams = 4;
        let (out, calls) = run(3, beams);
        assert_eq!(calls[0], 3, "the first call has one row per sentence");
        assert!(calls[1..].iter().all(|&r| r <= 3 * beams), "{calls:?}");
        for (sent, hyps) in out.iter().enumerate() {
            assert!(!hyps.is_empty());
            // Best first, and each score is the length-normalised sum of
            // the log-probabilities along its own tokens: a row whose cache
            // (history) was reordered wrongly would score another path.
            assert!(hyps.windows(2).all(|w| w[0].score >= w[1].score));
            for h in hyps {
                let want = path_score(sent, &h.tokens) / h.tokens.len() as f32;
                assert!(
                    (h.score - want).abs() < 1e-4,
                    "sentence {sent} {:?}: {} vs {want}",
                    h.tokens,
                    h.score
                );
            }
        }
        // Sentences leave as they finish: the row count falls before the end.
        assert!(calls.windows(2).any(|w| w[1] < w[0]), "{calls:?}");
    }

    #[test]
    fn finished_sentences_leave_their_place_to_the_last_live_one() {
        // Every pattern of done/live over 7 sentences.
        for mask in 0u32..128 {
            let outs: Vec<Option<()>> =
                (0..7).map(|i| (mask >> i & 1 == 1).then_some(())).collect();
            let order = fill_from_end(&outs);
            let mut live: Vec<usize> = (0..7).filter(|&i| outs[i].is_some()).collect();
            let mut got = order.clone();
            got.sort_unstable();
            assert_eq!(got, live, "mask {mask:07b}: every live sentence once");
            assert!(
                order.iter().enumerate().all(|(k, &i)| i >= k),
                "mask {mask:07b}: {order:?} moves a sentence forward"
            );
            // Sentences before the first leaver keep their place.
            live.retain(|&i| (0..=i).all(|j| outs[j].is_some()));
            assert_eq!(&order[..live.len()], &live[..]);
        }
    }

    #[test]
    fn each_rows_best_candidates_give_the_search_over_all_logits() {
        // A vocabulary wider than any row's candidates, and one narrower
        // than beam 4's (the search then takes the whole row).
        for (beams, vocab, forced_eos) in
            [(1, 40, false), (2, 40, false), (4, 40, true), (4, 6, false)]
        {
            let mut s = settings(beams);
            // A banned id, and eos banned for the first steps: the rows
            // must carry enough candidates to leave k once those are out.
            s.banned_ids = vec![3];
            s.min_length = 3;
            if forced_eos {
                // The last step may only end the sentence.
                s.max_length = 6;
                s.forced_eos_id = Some(EOS);
            }
            let width = (s.candidates_per_row() + s.most_banned()).min(vocab);
            let (want, want_calls) = run_with(3, &s, vocab, None);
            let (got, calls) = run_with(3, &s, vocab, Some(width));
            assert_eq!(calls, want_calls, "beams {beams}");
            for (g, w) in got.iter().zip(&want) {
                let tokens =
                    |h: &[Finished]| h.iter().map(|f| f.tokens.clone()).collect::<Vec<_>>();
                assert_eq!(tokens(g), tokens(w), "beams {beams}");
                assert!(g
                    .iter()
                    .zip(w)
                    .all(|(a, b)| (a.score - b.score).abs() < 1e-5));
                assert!(
                    g.iter().all(|h| !h.tokens.contains(&3)),
                    "a banned id was chosen"
                );
            }
            // Too few candidates per row for k plus the banned ids is refused.
            if width > 1 {
                let e = decode_error(3, vocab, Some(width - 1), &s, vocab);
                assert!(e.contains(&format!("{} per row", width - 1)), "{e}");
            }
            if forced_eos {
                assert!(
                    got.iter().flatten().all(|h| h.tokens.len() < 6),
                    "the forced eos step was not the last"
                );
            }
        }
        // An id the vocabulary does not have is an error, not a token.
        let e = decode_error(1, 6, Some(6), &settings(2), 5);
        assert!(e.contains("outside config.json's vocabulary of 5"), "{e}");
    }

    #[test]
    fn logits_of_the_wrong_width_are_an_error_naming_both() {
        let e = decode_error(1, 6, None, &settings(2), 7);
        assert!(
            e.contains("6 columns") && e.contains("vocabulary of 7"),
            "{e}"
        );
    }
}
