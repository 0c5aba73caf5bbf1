//! `paraforge eval-specificity`: how well a model's sentence norms (or a
//! Gaussian encoder's entropies) track human judgements of specificity,
//! with the baselines of Chen and Gimpel (2020, Table 2) that need no
//! other model (paraforge_eval::specificity has the protocol).

use std::path::PathBuf;

use anyhow::{Context, Result};
use paraforge_eval::specificity::{self, SpecData, SpecResult};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Baseline {
    /// The majority class of News training (News only).
    Majority,
    /// The number of tokens.
    Length,
    /// The sum of the words' frequency ranks (`--freq`; rarer is larger).
    FreqSum,
    /// Their mean.
    FreqAvg,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pool {
    /// The sum of the known words' vectors (what `embed` writes for vectors).
    Sum,
    /// Their mean.
    Avg,
}

#[derive(clap::Args)]
pub struct EvalSpecificityArgs {
    /// The specificity sets: news-{train,test}.{sentences,labels}.txt and
    /// {twitter,yelp,movie}.{sentences,scores}.txt (any subset).
    #[arg(long)]
    data: PathBuf,
    /// Trained models (a `.pfe`, a neural encoder's directory); repeatable.
    /// Gaussian encoders are scored by entropy, the others by norm.
    #[arg(long)]
    model: Vec<PathBuf>,
    /// Averaging models (`train --model word`, a `.pfe`) scored by the
    /// norm of the sum of their vectors instead of the mean: Chen and
    /// Gimpel (2020)'s Wordsum, which trains as Wordavg does (a sum and a
    /// mean have the same cosine, so the same loss); repeatable.
    #[arg(long)]
    wordsum: Vec<PathBuf>,
    /// GloVe-format word vectors, pooled by `--pool`; repeatable.
    #[arg(long)]
    vectors: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "sum")]
    pool: Pool,
    /// Baselines; repeatable.
    #[arg(long, value_enum)]
    baseline: Vec<Baseline>,
    /// Word frequencies (`word count` per line, most frequent first) for
    /// the frequency baselines; the bundled English list by default.
    #[arg(long, default_value = paraforge_eval::bundled::FREQ)]
    freq: PathBuf,
    /// SICK-format pairs (sentence_A, sentence_B, entailment_judgment) for
    /// the entailment analysis of Chen and Gimpel (2020, Table 4, which uses
    /// SNLI): per judgement, the share of equal-length pairs whose
    /// hypothesis each model calls less specific than its premise. The
    /// bundled SICK test set is data/sts/sick2014/SICK_test_annotated.txt.
    #[arg(long)]
    entailment: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Replace an existing --json.
    #[arg(long)]
    overwrite: bool,
}

/// The scorer of a sentence list for a model or vectors: each sentence's
/// norm, or a Gaussian's negative entropy; NaN where nothing is known.
/// `averages`: the encoder's vector is a mean of `known` rows, which
/// `Pool::Sum` turns back into their sum.
fn encoder_scores(
    enc: &dyn paraforge_core::SentenceEncoder,
    pool: Option<Pool>,
    averages: bool,
) -> impl Fn(&[String]) -> Vec<f64> + '_ {
    let gaussian = enc.short_name().ends_with("gaussian");
    move |texts: &[String]| {
        let tokens: Vec<_> = texts.iter().map(|t| paraforge_core::tokenize(t)).collect();
        let d = enc.dim();
        let mut flat = vec![0f32; texts.len() * d];
        let coverage = enc.embed_batch(&tokens, &mut flat);
        flat.chunks(d.max(1))
            .zip(coverage)
            .map(|(e, c)| {
                if c.known == 0 {
                    return f64::NAN;
                }
                let s = specificity::from_embedding(e, gaussian);
                match pool {
                    Some(Pool::Avg) => s / c.known as f64,
                    Some(Pool::Sum) if averages => s * c.known as f64,
                    _ => s,
                }
            })
            .collect()
    }
}

/// Frequency ranks (1 the most frequent) of the words of `path`.
fn ranks(path: &std::path::Path) -> Result<std::collections::HashMap<String, f64>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("--freq {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .enumerate()
        .map(|(i, w)| (w.to_lowercase(), (i + 1) as f64))
        .collect())
}

pub fn eval_specificity(a: EvalSpecificityArgs) -> Result<()> {
    anyhow::ensure!(
        !a.model.is_empty()
            || !a.wordsum.is_empty()
            || !a.vectors.is_empty()
            || !a.baseline.is_empty(),
        "give at least one --model, --wordsum, --vectors or --baseline"
    );
    let mut inputs = vec![("--data", a.data.as_path())];
    inputs.extend(a.model.iter().map(|p| ("--model", p.as_path())));
    inputs.extend(a.wordsum.iter().map(|p| ("--wordsum", p.as_path())));
    inputs.extend(a.vectors.iter().map(|p| ("--vectors", p.as_path())));
    inputs.extend(a.entailment.iter().map(|p| ("--entailment", p.as_path())));
    let json = crate::out::Out::claim_opt(
        "--json",
        a.json.as_deref(),
        crate::out::Artifact::Json,
        &inputs,
        a.overwrite,
    )?;
    let d: SpecData =
        specificity::load(&a.data).with_context(|| format!("--data {}", a.data.display()))?;
    if !d.repaired.is_empty() {
        eprintln!(
            "note: {} line(s) not UTF-8, read with U+FFFD for the bad bytes: {}",
            d.repaired.len(),
            d.repaired.join(", ")
        );
    }
    let judged = a
        .entailment
        .as_deref()
        .map(|p| {
            let p = paraforge_eval::bundled::locate(p, "--entailment")?;
            paraforge_eval::entailment::load_sick(&p)
                .with_context(|| format!("--entailment {}", p.display()))
        })
        .transpose()?;
    let mut rows: Vec<(String, SpecResult)> = Vec::new();
    let mut entailed: Vec<(String, Vec<Share>)> = Vec::new();
    for b in &a.baseline {
        let (name, r) = baseline(*b, &d, &a.freq)?;
        rows.push((name.into(), r));
    }
    let given = a
        .model
        .iter()
        .map(|p| ("--model", p))
        .chain(a.wordsum.iter().map(|p| ("--wordsum", p)))
        .chain(a.vectors.iter().map(|p| ("--vectors", p)));
    for (flag, p) in given {
        let what = || format!("{flag} {}", p.display());
        let (model, vectors, pool) = match flag {
            "--vectors" => (None, Some(p.as_path()), Some(a.pool)),
            "--wordsum" => (Some(p.as_path()), None, Some(Pool::Sum)),
            _ => (Some(p.as_path()), None, None),
        };
        let enc = paraforge_scorer::load_encoder(model, vectors)
            .with_context(what)?
            .expect("a model or vectors is given");
        let averages = flag == "--wordsum";
        // A WORD (or TRIGRAM) model's vector is the mean of one table's
        // rows, `known` of them; a combination's halves are scaled apart.
        if averages && !["word", "trigram"].contains(&enc.short_name().as_str()) {
            anyhow::bail!(
                "{}: a {} model is not the mean of one table's rows; --wordsum takes a `train --model word` (or trigram) model",
                what(),
                enc.short_name()
            );
        }
        let score = encoder_scores(enc.as_ref(), pool, averages);
        let r = specificity::evaluate(&d, &score);
        let how = match (pool, enc.short_name().ends_with("gaussian")) {
            (Some(Pool::Sum), _) if averages => format!("{}, wordsum, norm", enc.short_name()),
            (Some(Pool::Sum), _) => "norm, sum".to_string(),
            (Some(Pool::Avg), _) => "norm, avg".to_string(),
            (None, true) => format!("{}, entropy", enc.short_name()),
            (None, false) => format!("{}, norm", enc.short_name()),
        };
        let name = p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        if let Some(j) = &judged {
            entailed.push((
                format!("{name} ({how})"),
                paraforge_eval::entailment::evaluate(j, &score),
            ));
        }
        rows.push((format!("{name} ({how})"), r));
    }
    print_table(&d, &rows);
    if let Some(j) = &judged {
        print_entailment(j, &entailed);
    }
    if let Some(out) = json {
        let v: Vec<_> = rows
            .iter()
            .map(|(n, r)| {
                let e = entailed.iter().find(|e| e.0 == *n).map(|e| {
                    e.1.iter()
                        .map(|(l, share, pairs)| serde_json::json!({"judgement": l, "share": share, "pairs": pairs}))
                        .collect::<Vec<_>>()
                });
                serde_json::json!({"name": n, "result": r, "entailment": e})
            })
            .collect();
        std::fs::write(out.path(), serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("--json {}", out.path().display()))?;
        out.commit()?;
    }
    Ok(())
}

fn baseline(
    b: Baseline,
    d: &SpecData,
    freq: &std::path::Path,
) -> Result<(&'static str, SpecResult)> {
    let length = |texts: &[String]| -> Vec<f64> {
        texts
            .iter()
            .map(|t| paraforge_core::tokenize(t).texts().len() as f64)
            .collect()
    };
    Ok(match b {
        Baseline::Majority => (
            "Majority",
            SpecResult {
                news_accuracy: specificity::majority(d),
                news_threshold: None,
                rated: Vec::new(),
            },
        ),
        Baseline::Length => ("Length", specificity::evaluate(d, &length)),
        Baseline::FreqSum | Baseline::FreqAvg => {
            let freq = paraforge_eval::bundled::locate(freq, "--freq")?;
            let ranks = ranks(&freq)?;
            let unseen = ranks.len() as f64 + 1.0;
            let avg = b == Baseline::FreqAvg;
            let score = |texts: &[String]| -> Vec<f64> {
                texts
                    .iter()
                    .map(|t| {
                        let toks = paraforge_core::tokenize(t);
                        let words: Vec<f64> = toks
                            .texts()
                            .iter()
                            .filter(|w| w.chars().any(char::is_alphanumeric))
                            .map(|w| ranks.get(*w).copied().unwrap_or(unseen))
                            .collect();
                        let sum: f64 = words.iter().sum();
                        if avg {
                            sum / words.len().max(1) as f64
                        } else {
                            sum
                        }
                    })
                    .collect()
            };
            let name = if avg {
                "Word Freq. avg"
            } else {
                "Word Freq. sum"
            };
            (name, specificity::evaluate(d, &score))
        }
    })
}

/// A judgement, the share (%) of its pairs whose hypothesis is called
/// less specific, and the pairs counted.
type Share = (String, Option<f64>, usize);

/// The entailment analysis: one row per model, one column per judgement.
fn print_entailment(judged: &[paraforge_eval::entailment::Judged], rows: &[(String, Vec<Share>)]) {
    let head: Vec<String> = judged
        .iter()
        .map(|j| format!("{} ({} pairs)", j.label, j.pairs.len()))
        .collect();
    println!("\nHypothesis less specific than its premise (% of equal-length pairs):\n");
    println!("| model | {} |", head.join(" | "));
    println!("|{}|", vec!["---"; head.len() + 1].join("|"));
    for (name, shares) in rows {
        let cells: Vec<String> = shares
            .iter()
            .map(|(_, s, _)| s.map_or("-".into(), |x| format!("{x:.1}")))
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
}

fn print_table(d: &SpecData, rows: &[(String, SpecResult)]) {
    let mut head = vec!["model".to_string()];
    if d.news_test.is_some() {
        head.push("News (accuracy %)".into());
    }
    head.extend(
        d.rated
            .iter()
            .map(|r| format!("{} (Spearman x 100)", r.name)),
    );
    println!("| {} |", head.join(" | "));
    println!("|{}|", vec!["---"; head.len()].join("|"));
    for (name, r) in rows {
        let mut cells = vec![name.clone()];
        if d.news_test.is_some() {
            cells.push(r.news_accuracy.map_or("-".into(), |x| format!("{x:.1}")));
        }
        for set in &d.rated {
            let v = r
                .rated
                .iter()
                .find(|(n, _)| *n == set.name)
                .map(|(_, v)| *v);
            cells.push(v.map_or("-".into(), |x| format!("{x:.1}")));
        }
        println!("| {} |", cells.join(" | "));
    }
}
