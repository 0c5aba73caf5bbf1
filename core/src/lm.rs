//! n-gram language models in ARPA format (what KenLM's `lmplz` writes):
//! reading and querying them as KenLM does, and training one
//! (interpolated modified Kneser-Ney) for `paraforge lm-train`.
//! docs/DEFINITIONS.md section 3 says what is followed.
//!
//! Query semantics (KenLM's `Model::FullScore` from the begin-of-sentence
//! state, `bos=True, eos=True` in its Python module): the words of a
//! sentence are the tokens of [`crate::tokenize`]; the context starts as
//! `<s>`; every word and then `</s>` is scored; a word the model does not
//! have is `<unk>` (log10 probability -100 when the model has no `<unk>`).
//! The log10 probability of `w` after context `h` (at most order - 1 words)
//! is that of the n-gram `h w` when the model has it, else the backoff
//! weight of `h` (0 when `h` is not in the model) plus the probability of
//! `w` after `h` without its first word. Perplexity is
//! `10^(-log10 P(sentence) / (words + 1))`, the `+ 1` for `</s>`, as
//! KenLM's `perplexity`.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

pub const BOS: &str = "<s>";
pub const EOS: &str = "</s>";
pub const UNK: &str = "<unk>";
/// KenLM's probability for `<unk>` when the model has none.
pub const MISSING_UNK_LOG10: f32 = -100.0;

#[derive(Debug, thiserror::Error)]
pub enum LmError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: line {line}: {message}")]
    Format {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{0}")]
    Train(String),
}

/// What [`ArpaModel::read`] has read so far.
struct ArpaReader<'p> {
    path: &'p Path,
    counts: Vec<u64>,
    vocab: FxHashMap<String, u32>,
    grams: FxHashMap<Box<[u32]>, (f32, f32)>,
    /// n-grams read, per order.
    seen: Vec<u64>,
    ids: Vec<u32>,
}

impl ArpaReader<'_> {
    /// A `ngram N=COUNT` line of `\data\`.
    fn count_line(&mut self, t: &str, ln: usize) -> Result<(), LmError> {
        let path = self.path;
        let rest = t
            .strip_prefix("ngram ")
            .ok_or_else(|| fmt_err(path, ln, format!("expected `ngram N=COUNT`, found {t:?}")))?;
        let (n, c) = rest
            .split_once('=')
            .ok_or_else(|| fmt_err(path, ln, format!("expected `ngram N=COUNT`, found {t:?}")))?;
        let (n, c): (usize, u64) = match (n.trim().parse(), c.trim().parse()) {
            (Ok(n), Ok(c)) => (n, c),
            _ => return Err(fmt_err(path, ln, format!("bad count line {t:?}"))),
        };
        if n != self.counts.len() + 1 {
            return Err(fmt_err(
                path,
                ln,
                "ngram counts must be listed in order 1, 2, ...",
            ));
        }
        self.counts.push(c);
        self.seen.push(0);
        Ok(())
    }

    /// A line of the `n`-grams section: probability, `n` words, backoff.
    fn gram_line(&mut self, n: usize, t: &str, ln: usize) -> Result<(), LmError> {
        let path = self.path;
        let fields: Vec<&str> = t.split_whitespace().collect();
        if fields.len() != n + 1 && fields.len() != n + 2 {
            return Err(fmt_err(
                path,
                ln,
                format!("a {n}-gram line needs a probability, {n} words and an optional backoff"),
            ));
        }
        let num = |s: &str| -> Result<f32, LmError> {
            s.parse::<f32>()
                .map_err(|_| fmt_err(path, ln, format!("{s:?} is not a number")))
        };
        let p = num(fields[0])?;
        let bo = if fields.len() == n + 2 {
            num(fields[n + 1])?
        } else {
            0.0
        };
        if p > 0.0 {
            return Err(fmt_err(
                path,
                ln,
                format!("log10 probability {p} is above 0"),
            ));
        }
        self.ids.clear();
        for w in &fields[1..=n] {
            let id = match self.vocab.get(*w) {
                Some(&id) => id,
                None if n == 1 => {
                    let id = self.vocab.len() as u32;
                    self.vocab.insert(w.to_string(), id);
                    id
                }
                None => return Err(fmt_err(path, ln, format!("{w:?} is not among the 1-grams"))),
            };
            self.ids.push(id);
        }
        if self
            .grams
            .insert(self.ids.clone().into_boxed_slice(), (p, bo))
            .is_some()
        {
            return Err(fmt_err(
                path,
                ln,
                format!("the {n}-gram {:?} appears twice", &fields[1..=n]),
            ));
        }
        self.seen[n - 1] += 1;
        Ok(())
    }

    /// The model, once every declared n-gram was read and the sentence
    /// markers are among them.
    fn finish(self) -> Result<ArpaModel, LmError> {
        let path = self.path;
        if self.counts.is_empty() {
            return Err(fmt_err(path, 0, "no \\data\\ section"));
        }
        for (n, (c, s)) in self.counts.iter().zip(&self.seen).enumerate() {
            if c != s {
                return Err(fmt_err(
                    path,
                    0,
                    format!("\\data\\ declares {c} {}-grams, the file has {s}", n + 1),
                ));
            }
        }
        let bos = *self
            .vocab
            .get(BOS)
            .ok_or_else(|| fmt_err(path, 0, "the model has no <s> 1-gram"))?;
        if !self.vocab.contains_key(EOS) {
            return Err(fmt_err(path, 0, "the model has no </s> 1-gram"));
        }
        let unk = self.vocab.get(UNK).copied();
        Ok(ArpaModel {
            order: self.counts.len(),
            vocab: self.vocab,
            grams: self.grams,
            bos,
            unk,
            counts: self.counts,
        })
    }
}

/// An ARPA model in memory: every n-gram's log10 probability and backoff.
#[derive(Debug)]
pub struct ArpaModel {
    order: usize,
    vocab: FxHashMap<String, u32>,
    /// n-gram (word ids) -> (log10 prob, log10 backoff).
    grams: FxHashMap<Box<[u32]>, (f32, f32)>,
    bos: u32,
    unk: Option<u32>,
    counts: Vec<u64>,
}

fn fmt_err(path: &Path, line: usize, message: impl Into<String>) -> LmError {
    LmError::Format {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

impl ArpaModel {
    /// Reads a local ARPA file (plain, `.gz` or `.zst`); [`ArpaModel::read`]
    /// reads one from any reader (the worker's from object storage).
    pub fn load(path: &Path) -> Result<ArpaModel, LmError> {
        let r = crate::text::open_local(path).map_err(|source| LmError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::read(r, path)
    }

    /// Reads ARPA text; `path` names the source in errors.
    pub fn read(reader: impl BufRead, path: &Path) -> Result<ArpaModel, LmError> {
        let mut a = ArpaReader {
            path,
            counts: Vec::new(),
            vocab: FxHashMap::default(),
            grams: FxHashMap::default(),
            seen: Vec::new(),
            ids: Vec::new(),
        };
        // 0: before \data\, 1: in \data\, n+1: in \n-grams:, usize::MAX: after \end\.
        let mut section = 0usize;
        for (i, line) in crate::text::bounded_lines(reader).enumerate() {
            let ln = i + 1;
            let line = line.map_err(|source| LmError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            if t == "\\data\\" {
                section = 1;
                continue;
            }
            if t == "\\end\\" {
                section = usize::MAX;
                break;
            }
            if let Some(n) = t.strip_prefix('\\').and_then(|r| r.strip_suffix("-grams:")) {
                let n: usize = n
                    .parse()
                    .map_err(|_| fmt_err(path, ln, format!("bad section header {t:?}")))?;
                if n == 0 || n > a.counts.len() {
                    return Err(fmt_err(
                        path,
                        ln,
                        format!("section {t:?}: \\data\\ declares {} orders", a.counts.len()),
                    ));
                }
                section = n + 1;
                continue;
            }
            match section {
                0 => continue, // text before \data\ (lmplz writes none; SRILM may)
                1 => a.count_line(t, ln)?,
                usize::MAX => break,
                s => a.gram_line(s - 1, t, ln)?,
            }
        }
        if section != usize::MAX {
            return Err(fmt_err(path, 0, "no \\end\\ line (truncated file?)"));
        }
        a.finish()
    }

    pub fn order(&self) -> usize {
        self.order
    }

    /// n-grams per order, as `\data\` declares them.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The vocabulary (1-gram words).
    pub fn words(&self) -> impl Iterator<Item = &str> {
        self.vocab.keys().map(String::as_str)
    }

    /// A word's id, or `None` for a word the model does not have.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.vocab.get(word).copied()
    }

    /// The stored (log10 prob, log10 backoff) of an n-gram of ids.
    pub fn entry(&self, gram: &[u32]) -> Option<(f32, f32)> {
        self.grams.get(gram).copied()
    }

    /// log10 P(w | context), with `context` oldest word first (only its
    /// last order - 1 words matter); `None` for `w` means an unknown word.
    pub fn log10_prob(&self, context: &[u32], w: Option<u32>) -> f32 {
        let Some(w) = w.or(self.unk) else {
            return MISSING_UNK_LOG10;
        };
        let keep = context.len().min(self.order - 1);
        let ctx = &context[context.len() - keep..];
        let mut gram: Vec<u32> = Vec::with_capacity(keep + 1);
        let mut backoff = 0.0f32;
        for start in 0..=ctx.len() {
            gram.clear();
            gram.extend_from_slice(&ctx[start..]);
            gram.push(w);
            if let Some(&(p, _)) = self.grams.get(gram.as_slice()) {
                return backoff + p;
            }
            if start < ctx.len() {
                if let Some(&(_, b)) = self.grams.get(&ctx[start..]) {
                    backoff += b;
                }
            }
        }
        // Only a word that is in the vocabulary has an id, so its 1-gram exists.
        backoff + MISSING_UNK_LOG10
    }

    /// log10 P(sentence) with `<s>` context and `</s>` scored, and the
    /// number of words scored (tokens + 1).
    pub fn score_words<'a>(&self, words: impl IntoIterator<Item = &'a str>) -> (f64, usize) {
        let mut context: Vec<u32> = vec![self.bos];
        let mut total = 0.0f64;
        let mut n = 0usize;
        let mut add = |ctx: &mut Vec<u32>, w: Option<u32>| {
            total += self.log10_prob(ctx, w) as f64;
            n += 1;
            // An unknown word continues the context as <unk> (or as
            // nothing the model knows: an id past the vocabulary).
            ctx.push(w.or(self.unk).unwrap_or(u32::MAX));
            if ctx.len() >= self.order {
                ctx.remove(0);
            }
        };
        for word in words {
            add(&mut context, self.id(word));
        }
        add(&mut context, self.id(EOS));
        (total, n)
    }

    /// Perplexity of a sentence's [`crate::tokenize`] tokens.
    pub fn perplexity_tokens(&self, tokens: &crate::tokenize::Tokens) -> f64 {
        let (lp, n) = self.score_words(tokens.iter().map(|t| t.text));
        10f64.powf(-lp / n as f64)
    }

    /// Perplexity of a sentence (tokenized by [`crate::tokenize`]).
    pub fn perplexity(&self, sentence: &str) -> f64 {
        self.perplexity_tokens(&crate::tokenize(sentence))
    }
}

/// Counts, discounts and probabilities of a trained model before writing.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainSummary {
    pub order: usize,
    pub sentences: u64,
    pub tokens: u64,
    /// n-grams per order written.
    pub counts: Vec<u64>,
    /// (D1, D2, D3+) per order.
    pub discounts: Vec<[f64; 3]>,
}

/// Discounts of modified Kneser-Ney (Chen and Goodman) from the counts of
/// counts t1..t4 of one order; `(0.5, 1.0, 1.5)` where a count of counts
/// is zero or a discount would fall outside (0, k).
fn discounts(t: [u64; 4]) -> [f64; 3] {
    let fallback = [0.5, 1.0, 1.5];
    if t.contains(&0) {
        return fallback;
    }
    let t: Vec<f64> = t.iter().map(|&x| x as f64).collect();
    let y = t[0] / (t[0] + 2.0 * t[1]);
    let d = [
        1.0 - 2.0 * y * t[1] / t[0],
        2.0 - 3.0 * y * t[2] / t[1],
        3.0 - 4.0 * y * t[3] / t[2],
    ];
    let mut out = fallback;
    for k in 0..3 {
        if d[k].is_finite() && d[k] > 0.0 && d[k] < (k + 1) as f64 {
            out[k] = d[k];
        }
    }
    out
}

/// Trains an interpolated modified Kneser-Ney model of `order` on
/// sentences (each a list of words; `<s>`/`</s>` are added) and writes it
/// as ARPA. What it does, as `lmplz` does unless said otherwise:
///
/// * the highest order counts n-grams; every lower order counts, for each
///   n-gram, the distinct words seen before it (continuation counts),
///   except n-grams starting with `<s>`, which keep their raw counts;
/// * three discounts per order (D1, D2, D3+) from that order's counts of
///   counts;
/// * p(w | h) = (c(h w) - D(c(h w))) / c(h) + gamma(h) p(w | h minus its
///   first word), gamma(h) = (D1 N1(h) + D2 N2(h) + D3 N3+(h)) / c(h);
///   1-grams interpolate with the uniform distribution over the vocabulary
///   (every word seen, `</s>` and `<unk>`; not `<s>`, which is never
///   predicted and gets log10 probability -99);
/// * a stored n-gram's probability is the interpolated one and its backoff
///   weight is gamma of it as a context, so that the backoff rule of
///   [`ArpaModel::log10_prob`] gives the interpolated probability of every
///   word after every context, and the probabilities after each context sum
///   to 1.
pub fn train_arpa<I, S>(
    sentences: I,
    order: usize,
    out: &mut dyn Write,
) -> Result<TrainSummary, LmError>
where
    I: IntoIterator<Item = Vec<S>>,
    S: AsRef<str>,
{
    if !(1..=6).contains(&order) {
        return Err(LmError::Train(format!("order {order}: use 1 to 6")));
    }
    let c = count(sentences, order);
    if c.sentences == 0 {
        return Err(LmError::Train("no sentences to train on".into()));
    }
    let adj = adjusted(&c.raw, order);
    // Discounts per order.
    let disc: Vec<[f64; 3]> = adj
        .iter()
        .map(|a| {
            let mut t = [0u64; 4];
            for &c in a.values() {
                if (1..=4).contains(&c) {
                    t[c as usize - 1] += 1;
                }
            }
            discounts(t)
        })
        .collect();
    let ctx = contexts(&adj, &disc);
    let prob = interpolate(&adj, &disc, &ctx, c.names.len());
    let sections = sections(&prob, &ctx, &c.names);
    write_arpa(out, &sections)?;
    Ok(TrainSummary {
        order,
        sentences: c.sentences,
        tokens: c.tokens,
        counts: sections.iter().map(|s| s.len() as u64).collect(),
        discounts: disc,
    })
}

/// Word ids (0 = `<s>`, 1 = `</s>`, 2 = `<unk>`).
const BOS_ID: u32 = 0;
const EOS_ID: u32 = 1;
const UNK_ID: u32 = 2;

/// n-gram (word ids) -> a count, one map per order.
type GramCounts = Vec<FxHashMap<Vec<u32>, u64>>;

/// The raw counts of every order, the words by id and the corpus size.
struct Counted {
    raw: GramCounts,
    names: Vec<String>,
    sentences: u64,
    tokens: u64,
}

fn count<I, S>(sentences: I, order: usize) -> Counted
where
    I: IntoIterator<Item = Vec<S>>,
    S: AsRef<str>,
{
    let mut vocab: HashMap<String, u32> = HashMap::new();
    let mut names: Vec<String> = Vec::new();
    for w in [BOS, EOS, UNK] {
        vocab.insert(w.to_string(), names.len() as u32);
        names.push(w.to_string());
    }
    let mut raw: GramCounts = vec![FxHashMap::default(); order];
    let (mut sentences_n, mut tokens_n) = (0u64, 0u64);
    for s in sentences {
        let mut ids = vec![BOS_ID];
        for w in &s {
            let w = w.as_ref();
            let next = names.len() as u32;
            let id = *vocab.entry(w.to_string()).or_insert_with(|| {
                names.push(w.to_string());
                next
            });
            ids.push(id);
        }
        ids.push(EOS_ID);
        sentences_n += 1;
        tokens_n += s.len() as u64;
        for n in 1..=order {
            for g in ids.windows(n) {
                if n == 1 && g[0] == BOS_ID {
                    continue; // <s> is context only
                }
                *raw[n - 1].entry(g.to_vec()).or_insert(0) += 1;
            }
        }
    }
    Counted {
        raw,
        names,
        sentences: sentences_n,
        tokens: tokens_n,
    }
}

/// Adjusted counts: raw for the highest order and for n-grams starting
/// with `<s>`; continuation counts otherwise.
fn adjusted(raw: &GramCounts, order: usize) -> GramCounts {
    let mut adj: GramCounts = vec![FxHashMap::default(); order];
    adj[order - 1] = raw[order - 1].clone();
    for n in (1..order).rev() {
        let mut a: FxHashMap<Vec<u32>, u64> = FxHashMap::default();
        for g in raw[n].keys() {
            *a.entry(g[1..].to_vec()).or_insert(0) += 1;
        }
        for (g, &c) in &raw[n - 1] {
            if g[0] == BOS_ID {
                a.insert(g.clone(), c);
            } else {
                // Every other n-gram has a word before it in its sentence.
                debug_assert!(a.contains_key(g));
            }
        }
        adj[n - 1] = a;
    }
    adj
}

/// The discount of an adjusted count `c` of order `n + 1`.
fn discount_of(disc: &[[f64; 3]], n: usize, c: u64) -> f64 {
    match c {
        0 => 0.0,
        1 => disc[n][0],
        2 => disc[n][1],
        _ => disc[n][2],
    }
}

/// n-gram context -> (total count, gamma), one map per order.
type Contexts = Vec<FxHashMap<Vec<u32>, (f64, f64)>>;

/// Per context of each order: its total count and gamma.
fn contexts(adj: &GramCounts, disc: &[[f64; 3]]) -> Contexts {
    adj.iter()
        .enumerate()
        .map(|(n, a)| {
            let mut tot: FxHashMap<Vec<u32>, (u64, f64)> = FxHashMap::default();
            for (g, &c) in a {
                let e = tot.entry(g[..n].to_vec()).or_insert((0, 0.0));
                e.0 += c;
                e.1 += discount_of(disc, n, c);
            }
            tot.into_iter()
                .map(|(h, (t, d))| (h, (t as f64, d / t as f64)))
                .collect()
        })
        .collect()
}

/// Interpolated probabilities, lowest order first.
fn interpolate(
    adj: &GramCounts,
    disc: &[[f64; 3]],
    ctx: &Contexts,
    words: usize,
) -> Vec<FxHashMap<Vec<u32>, f64>> {
    let vocab_size = (words - 1) as f64; // all but <s>
    let mut prob: Vec<FxHashMap<Vec<u32>, f64>> = Vec::with_capacity(adj.len());
    for (n, a) in adj.iter().enumerate() {
        let mut p: FxHashMap<Vec<u32>, f64> = FxHashMap::default();
        for (g, &c) in a {
            let (total, gamma) = ctx[n][&g[..n]];
            let lower = if n == 0 {
                1.0 / vocab_size
            } else {
                prob[n - 1][&g[1..]]
            };
            p.insert(
                g.clone(),
                (c as f64 - discount_of(disc, n, c)) / total + gamma * lower,
            );
        }
        if n == 0 {
            // Words never seen as a 1-gram (only <unk>): gamma / |V|.
            let gamma = ctx[0][&Vec::new()].1;
            p.entry(vec![UNK_ID]).or_insert(gamma / vocab_size);
        }
        prob.push(p);
    }
    prob
}

/// One line of an n-grams section: the words, log10 probability, backoff.
type Row = (String, f64, Option<f64>);

/// Each order's lines, n-grams sorted by their words for a stable file.
fn sections(prob: &[FxHashMap<Vec<u32>, f64>], ctx: &Contexts, names: &[String]) -> Vec<Vec<Row>> {
    let order = prob.len();
    let mut sections: Vec<Vec<Row>> = Vec::new();
    for n in 0..order {
        let mut rows: Vec<Row> = Vec::new();
        let mut grams: Vec<Vec<u32>> = prob[n].keys().cloned().collect();
        if n == 0 {
            grams.push(vec![BOS_ID]);
        }
        for g in &grams {
            let text = g
                .iter()
                .map(|&i| names[i as usize].as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let lp = if n == 0 && g[0] == BOS_ID {
                -99.0
            } else {
                prob[n][g].log10()
            };
            let bo = (n + 1 < order)
                .then(|| ctx[n + 1].get(g).map(|&(_, gamma)| gamma.log10()))
                .flatten();
            rows.push((text, lp, bo));
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        sections.push(rows);
    }
    sections
}

fn write_arpa(out: &mut dyn Write, sections: &[Vec<Row>]) -> Result<(), LmError> {
    let io = |source| LmError::Io {
        path: PathBuf::from("<output>"),
        source,
    };
    let mut w = std::io::BufWriter::new(out);
    writeln!(w, "\\data\\").map_err(io)?;
    for (n, rows) in sections.iter().enumerate() {
        writeln!(w, "ngram {}={}", n + 1, rows.len()).map_err(io)?;
    }
    for (n, rows) in sections.iter().enumerate() {
        writeln!(w, "\n\\{}-grams:", n + 1).map_err(io)?;
        for (text, lp, bo) in rows {
            match bo {
                Some(b) => writeln!(w, "{lp:.7}\t{text}\t{b:.7}"),
                None => writeln!(w, "{lp:.7}\t{text}"),
            }
            .map_err(io)?;
        }
    }
    writeln!(w, "\n\\end\\").map_err(io)?;
    w.flush().map_err(io)
}

/// Trains a model on the lines of text files (plain or `.gz`): each line
/// one sentence, or with `column` its 0-based tab-separated column (lines
/// without it are skipped and counted), tokenized by [`crate::tokenize`] as
/// the perplexity column's translations are. Writes `out` through a
/// temporary file renamed at the end. Returns the summary and the skipped
/// lines.
pub fn train_files(
    inputs: &[PathBuf],
    column: Option<usize>,
    order: usize,
    out: &Path,
) -> Result<(TrainSummary, u64), LmError> {
    let mut sentences: Vec<Vec<String>> = Vec::new();
    let mut skipped = 0u64;
    for path in inputs {
        let io = |source| LmError::Io {
            path: path.clone(),
            source,
        };
        for line in crate::text::open_lines(path).map_err(io)? {
            let line = line.map_err(io)?;
            let text = match column {
                None => Some(line.as_str()),
                Some(c) => line.split('\t').nth(c),
            };
            match text {
                Some(t) => sentences.push(
                    crate::tokenize(t)
                        .texts()
                        .into_iter()
                        .map(String::from)
                        .collect(),
                ),
                None => skipped += 1,
            }
        }
    }
    let partial = out.with_extension("arpa.partial");
    let io = |source| LmError::Io {
        path: partial.clone(),
        source,
    };
    let mut f = std::fs::File::create(&partial).map_err(io)?;
    let summary = train_arpa(sentences, order, &mut f)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&partial, out).map_err(|source| LmError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    Ok((summary, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_sentences(n: usize) -> Vec<Vec<String>> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text =
            std::fs::read_to_string(root.join("data/sample/czeng16-heldout.cs-en.tsv")).unwrap();
        text.lines()
            .take(n)
            .map(|l| {
                let en = l.split('\t').nth(3).unwrap();
                crate::tokenize(en)
                    .texts()
                    .into_iter()
                    .map(String::from)
                    .collect()
            })
            .collect()
    }

    fn train(sents: &[Vec<String>], order: usize) -> (ArpaModel, TrainSummary) {
        let mut buf = Vec::new();
        let s = train_arpa(sents.iter().cloned(), order, &mut buf).unwrap();
        let m = ArpaModel::read(&buf[..], Path::new("mem.arpa")).unwrap();
        (m, s)
    }

    /// Every context's probabilities over the vocabulary (all words but
    /// `<s>`) sum to 1: each 1-gram and 2-gram in the model as context,
    /// plus the empty one, on a 3-gram model of 300 real references.
    #[test]
    fn probabilities_after_every_context_sum_to_one() {
        let sents = sample_sentences(300);
        let (m, s) = train(&sents, 3);
        assert_eq!(s.sentences, 300);
        assert!(s.counts[2] > 3000, "{:?}", s.counts);
        let words: Vec<u32> = m
            .words()
            .filter(|w| *w != BOS)
            .map(|w| m.id(w).unwrap())
            .collect();
        let mut contexts: Vec<Vec<u32>> = vec![vec![]];
        for g in m.grams.keys() {
            if g.len() < 3 && g.last() != m.id(EOS).as_ref() {
                contexts.push(g.to_vec());
            }
        }
        assert!(contexts.len() > 3000);
        let mut worst = 0.0f64;
        for c in &contexts {
            let sum: f64 = words
                .iter()
                .map(|&w| 10f64.powf(m.log10_prob(c, Some(w)) as f64))
                .sum();
            worst = worst.max((sum - 1.0).abs());
        }
        eprintln!(
            "{} contexts over {} words: worst |sum - 1| = {worst:e}",
            contexts.len(),
            words.len()
        );
        assert!(worst < 1e-4, "worst |sum - 1| = {worst}");
    }

    #[test]
    fn backoff_follows_the_arpa_rule() {
        let arpa = "\\data\\\nngram 1=5\nngram 2=2\n\n\\1-grams:\n-1.0\t<unk>\n-99\t<s>\t-0.5\n-0.5\t</s>\n-0.7\ta\t-0.2\n-0.9\tb\t-0.3\n\n\\2-grams:\n-0.1\t<s> a\n-0.2\ta b\n\n\\end\\\n";
        let m = ArpaModel::read(arpa.as_bytes(), Path::new("t.arpa")).unwrap();
        let (a, b, s) = (m.id("a"), m.id("b"), m.id(BOS).unwrap());
        // Seen bigram.
        assert_eq!(m.log10_prob(&[s], a), -0.1);
        // Unseen bigram: backoff(<s>) + p(b).
        assert!((m.log10_prob(&[s], b) - (-0.5 - 0.9)).abs() < 1e-6);
        // Unknown word: <unk>'s probability after the backoff.
        assert!((m.log10_prob(&[s], None) - (-0.5 - 1.0)).abs() < 1e-6);
        // Whole sentence "a b": p(a|<s>) + p(b|a) + bo(b) + p(</s>).
        let (lp, n) = m.score_words(["a", "b"]);
        assert_eq!(n, 3);
        assert!((lp - (-0.1 - 0.2 - 0.3 - 0.5)).abs() < 1e-6, "{lp}");
        assert!((m.perplexity("a b") - 10f64.powf(1.1 / 3.0)).abs() < 1e-5);
        // Broken files are refused with the line.
        let bad = arpa.replace("ngram 2=2", "ngram 2=3");
        let e = ArpaModel::read(bad.as_bytes(), Path::new("t.arpa")).unwrap_err();
        assert!(e.to_string().contains("declares 3 2-grams"), "{e}");
        let bad = arpa.replace("-0.2\ta b", "-0.2\ta c");
        let e = ArpaModel::read(bad.as_bytes(), Path::new("t.arpa")).unwrap_err();
        assert!(
            e.to_string().contains("line 14") && e.to_string().contains("\"c\""),
            "{e}"
        );
    }

    #[test]
    fn a_model_prefers_text_like_its_training_text() {
        let sents = sample_sentences(2000);
        let (m, _) = train(&sents[..1500], 3);
        // Held-out English references against their Czech sources.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text =
            std::fs::read_to_string(root.join("data/sample/czeng16-heldout.cs-en.tsv")).unwrap();
        let (mut en, mut cs) = (0.0, 0.0);
        for l in text.lines().skip(1500).take(300) {
            let f: Vec<&str> = l.split('\t').collect();
            en += m.perplexity(f[3]).ln();
            cs += m.perplexity(f[2]).ln();
        }
        assert!(
            en < cs - 300.0,
            "English {en} vs Czech {cs} (sum of log perplexities)"
        );
    }
}
