//! `paraforge eval-paraphrase`: a paraphraser (an English-to-English
//! MarianMT model, e.g. models/paraphrase-en) on held-out corpus pairs,
//! against copying the input. Each pair's reference is the input and its
//! translation the reference paraphrase, the direction the paraphraser is
//! trained in (Wieting and Gimpel, 2018, section 6).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arrow_array::{Array, Float32Array, Int32Array, StringArray};
use paraforge_core::schema::{self, col};
use paraforge_core::{PairReader, Scorer, SentenceEncoder};
use paraforge_nmt::{GenerateOptions, LoadOptions, Translator};

#[derive(clap::Args)]
pub struct EvalParaphraseArgs {
    /// The paraphraser: a MarianMT directory in Optimum's ONNX layout.
    #[arg(long)]
    model: PathBuf,
    /// A finished corpus output held out from the paraphraser's training
    /// (e.g. the demo's, out/demo): its pairs are the test set.
    #[arg(long)]
    data: PathBuf,
    /// The encoder of para_score(input, output).
    #[arg(long, default_value = "models/scorer-trigram")]
    scorer: PathBuf,
    /// Test pairs: para_score at least this (the training data's bound).
    #[arg(long, default_value_t = 0.6)]
    min_para_score: f32,
    /// Test pairs: trigram overlap at most this.
    #[arg(long, default_value_t = 0.7)]
    max_trigram_overlap: f32,
    /// Test pairs: both sides at most this many tokens.
    #[arg(long, default_value_t = 30)]
    max_tokens: i32,
    /// The first N pairs that pass, in the output's manifest order.
    #[arg(long, default_value_t = 500)]
    limit: usize,
    #[arg(long, default_value_t = 12)]
    beam: usize,
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// No n-gram of this size twice in an output (transformers'
    /// `no_repeat_ngram_size`; 0: off).
    #[arg(long)]
    no_repeat_ngram_size: Option<usize>,
    /// transformers' `repetition_penalty` (1.0: off).
    #[arg(long)]
    repetition_penalty: Option<f32>,
    /// ONNX Runtime threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Print this many (input, reference, output) examples.
    #[arg(long, default_value_t = 5)]
    examples: usize,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Replace an existing --json (a JSON result; anything else is refused
    /// even so).
    #[arg(long)]
    overwrite: bool,
    /// Syntactic control (a paraphraser trained on templates,
    /// tools/models/scpn.sh): also paraphrase each input to its reference
    /// paraphrase's template (`paraforge parse --template 2`), and report
    /// for every system how often its output has that template. Pairs
    /// whose reference the parser cannot parse are left out.
    #[arg(long)]
    templates: bool,
}

/// What one system's outputs score against the inputs and references.
#[derive(Debug)]
struct Figures {
    system: String,
    pairs: usize,
    /// Corpus BLEU against the reference paraphrases (sacrebleu's).
    bleu: f64,
    /// Mean trigram overlap of output and input: lower is more diverse.
    trigram_overlap_with_input: f64,
    /// Mean para_score(input, output) over pairs where both have one.
    para_score_with_input: f64,
    /// Outputs identical to their input.
    identical_to_input: f64,
    /// With --templates: outputs whose template is the reference's.
    template_match: Option<f64>,
}

/// Each sentence's template at two levels (`(S (NP) (VP) (.))`), `None`
/// where the parser found no linkage.
fn templates(sentences: &[String]) -> Result<Vec<Option<String>>> {
    Ok(paraforge_encoders::link_grammar::shared()?
        .parse_lines(sentences)?
        .into_iter()
        .map(|p| p.and_then(|p| paraforge_encoders::tree::template(&p, 2)))
        .collect())
}

/// The share of `outputs` whose template is `wanted`'s.
fn template_match(outputs: &[String], wanted: &[String]) -> Result<f64> {
    let got = templates(outputs)?;
    let same = got
        .iter()
        .zip(wanted)
        .filter(|(g, w)| g.as_deref() == Some(w.as_str()))
        .count();
    Ok(same as f64 / wanted.len().max(1) as f64)
}

pub fn eval(a: EvalParaphraseArgs) -> Result<()> {
    use paraforge_job::config::{MAX_BATCH_SIZE, MAX_BEAM};
    for (flag, value, max) in [
        ("--limit", a.limit, usize::MAX),
        ("--beam", a.beam, MAX_BEAM),
        ("--batch-size", a.batch_size, MAX_BATCH_SIZE),
    ] {
        if value == 0 || value > max {
            bail!("{flag} {value}: must be between 1 and {max}");
        }
    }
    crate::check_threads(a.threads)?;
    let json = crate::out::Out::claim_opt(
        "--json",
        a.json.as_deref(),
        crate::out::Artifact::Json,
        &[
            ("--model", a.model.as_path()),
            ("--data", a.data.as_path()),
            ("--scorer", a.scorer.as_path()),
        ],
        a.overwrite,
    )?;
    let (inputs, refs, wanted) = test_set(&a)?;
    if inputs.is_empty() {
        bail!(
            "--data {}: no pair has para_score >= {}, trigram_overlap <= {} and both sides \
             within {} tokens",
            a.data.display(),
            a.min_para_score,
            a.max_trigram_overlap,
            a.max_tokens
        );
    }
    let encoder = paraforge_scorer::load_encoder(Some(&a.scorer), None)
        .with_context(|| format!("--scorer {}", a.scorer.display()))?
        .expect("a scorer is given");
    let load = LoadOptions {
        threads: a.threads,
        ..Default::default()
    };
    let mut model = Translator::load(&a.model, &load)
        .with_context(|| format!("loading --model {}", a.model.display()))?;
    let opts = GenerateOptions {
        num_beams: a.beam,
        nbest: 1,
        batch_size: a.batch_size,
        no_repeat_ngram_size: a.no_repeat_ngram_size,
        repetition_penalty: a.repetition_penalty,
        ..Default::default()
    };
    let mut paraphrase = |sources: &[String]| -> Result<Vec<String>> {
        let bar = indicatif::ProgressBar::new(sources.len() as u64);
        let out = model
            .translate_with_progress(sources, &opts, |n| bar.inc(n as u64))?
            .into_iter()
            .map(|t| t.text)
            .collect();
        bar.finish_and_clear();
        Ok(out)
    };
    let outputs = paraphrase(&inputs)?;
    let mut rows = vec![
        figures("copy the input", &inputs, &inputs, &refs, &*encoder),
        figures(&model_name(&a.model), &inputs, &outputs, &refs, &*encoder),
    ];
    if a.templates {
        let sources: Vec<String> = inputs
            .iter()
            .zip(&wanted)
            .map(|(i, t)| crate::translate::with_template(t, i))
            .collect();
        let controlled = paraphrase(&sources)?;
        rows[0].template_match = Some(template_match(&inputs, &wanted)?);
        rows[1].template_match = Some(template_match(&outputs, &wanted)?);
        let name = format!("{} + the reference's template", model_name(&a.model));
        let mut f = figures(&name, &inputs, &controlled, &refs, &*encoder);
        f.template_match = Some(template_match(&controlled, &wanted)?);
        rows.push(f);
    }
    print_table(&a, &rows, &inputs, &refs, &outputs);
    if let Some(j) = json {
        j.write_all(serde_json::to_string_pretty(&figures_json(&a, &rows))?.as_bytes())?;
    }
    Ok(())
}

/// The test pairs (input, reference paraphrase) and, with --templates,
/// only those whose reference has a template, with it.
fn test_set(a: &EvalParaphraseArgs) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
    let (inputs, refs) = test_pairs(a)?;
    if !a.templates {
        return Ok((inputs, refs, Vec::new()));
    }
    crate::translate::check_template_model(&a.model)?;
    let all = inputs.len();
    let t = templates(&refs)?;
    let (inputs, refs): (Vec<String>, Vec<String>) = inputs
        .into_iter()
        .zip(refs)
        .zip(&t)
        .filter(|(_, t)| t.is_some())
        .map(|(pair, _)| pair)
        .unzip();
    println!(
        "--templates: {} of {all} pairs kept, the rest's reference having no parse",
        inputs.len()
    );
    if inputs.is_empty() {
        bail!(
            "--data {}: the parser found no reference's template",
            a.data.display()
        );
    }
    Ok((inputs, refs, t.into_iter().flatten().collect()))
}

/// The systems' figures as a Markdown table, then examples.
fn print_table(
    a: &EvalParaphraseArgs,
    rows: &[Figures],
    inputs: &[String],
    refs: &[String],
    outputs: &[String],
) {
    println!(
        "{} held-out pairs of {} (para_score >= {}, trigram overlap <= {}, <= {} tokens)",
        inputs.len(),
        a.data.display(),
        a.min_para_score,
        a.max_trigram_overlap,
        a.max_tokens
    );
    let extra = if a.templates {
        (" template as the reference's |", "---:|")
    } else {
        ("", "")
    };
    println!(
        "| system | BLEU vs reference paraphrase | trigram overlap with input | para_score(input, output) | identical to input |{}",
        extra.0
    );
    println!("|---|---:|---:|---:|---:|{}", extra.1);
    for f in rows {
        let m = f
            .template_match
            .map_or(String::new(), |m| format!(" {:.1}% |", 100.0 * m));
        println!(
            "| {} | {:.1} | {:.3} | {:.3} | {:.1}% |{m}",
            f.system,
            f.bleu,
            f.trigram_overlap_with_input,
            f.para_score_with_input,
            100.0 * f.identical_to_input
        );
    }
    for i in 0..a.examples.min(inputs.len()) {
        println!(
            "\ninput:     {}\nreference: {}\noutput:    {}",
            inputs[i], refs[i], outputs[i]
        );
    }
}

/// What `--json` holds.
fn figures_json(a: &EvalParaphraseArgs, rows: &[Figures]) -> serde_json::Value {
    serde_json::json!({
        "model": a.model, "data": a.data, "scorer": a.scorer, "beam": a.beam,
        "min_para_score": a.min_para_score, "max_trigram_overlap": a.max_trigram_overlap,
        "max_tokens": a.max_tokens,
        "systems": rows.iter().map(|f| serde_json::json!({
            "system": f.system, "pairs": f.pairs, "bleu": f.bleu,
            "trigram_overlap_with_input": f.trigram_overlap_with_input,
            "para_score_with_input": f.para_score_with_input,
            "identical_to_input": f.identical_to_input,
            "template_match": f.template_match,
        })).collect::<Vec<_>>(),
    })
}

fn model_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
}

/// (input, reference paraphrase) = (reference, translation) of the first
/// `limit` best-candidate pairs within the bounds.
fn test_pairs(a: &EvalParaphraseArgs) -> Result<(Vec<String>, Vec<String>)> {
    let dataset = paraforge_core::dataset::open(&a.data)
        .with_context(|| format!("--data {}", a.data.display()))?;
    let (mut inputs, mut refs) = (Vec::new(), Vec::new());
    let wanted = [
        col::REFERENCE,
        col::TRANSLATION,
        col::CANDIDATE_RANK,
        col::PARA_SCORE,
        col::TRIGRAM_OVERLAP,
        col::REFERENCE_LEN,
        col::TRANSLATION_LEN,
    ];
    'files: for path in dataset.paths() {
        for batch in PairReader::open(&path, &wanted)? {
            let b = batch?;
            let reference = schema::column::<StringArray>(&b, col::REFERENCE, &path)?;
            let translation = schema::column::<StringArray>(&b, col::TRANSLATION, &path)?;
            let rank = schema::column::<Int32Array>(&b, col::CANDIDATE_RANK, &path)?;
            let para = schema::column::<Float32Array>(&b, col::PARA_SCORE, &path)?;
            let tri = schema::column::<Float32Array>(&b, col::TRIGRAM_OVERLAP, &path)?;
            let rl = schema::column::<Int32Array>(&b, col::REFERENCE_LEN, &path)?;
            let tl = schema::column::<Int32Array>(&b, col::TRANSLATION_LEN, &path)?;
            for i in 0..b.num_rows() {
                let keep = rank.value(i) == 1
                    && para.is_valid(i)
                    && para.value(i) >= a.min_para_score
                    && tri.value(i) <= a.max_trigram_overlap
                    && rl.value(i) <= a.max_tokens
                    && tl.value(i) <= a.max_tokens;
                if keep {
                    inputs.push(reference.value(i).to_string());
                    refs.push(translation.value(i).to_string());
                    if inputs.len() == a.limit {
                        break 'files;
                    }
                }
            }
        }
    }
    Ok((inputs, refs))
}

fn figures(
    system: &str,
    inputs: &[String],
    outputs: &[String],
    refs: &[String],
    encoder: &dyn SentenceEncoder,
) -> Figures {
    let mut scorer = Scorer::new(Some(encoder)).without_bleu();
    let (mut overlap, mut para, mut with_para, mut same) = (0.0, 0.0, 0usize, 0usize);
    for (i, o) in inputs.iter().zip(outputs) {
        let s = scorer.score(i, o);
        overlap += f64::from(s.trigram_overlap);
        if let Some(p) = s.para_score {
            para += f64::from(p);
            with_para += 1;
        }
        same += usize::from(i.trim() == o.trim());
    }
    let n = inputs.len() as f64;
    Figures {
        system: system.to_string(),
        pairs: inputs.len(),
        bleu: paraforge_core::bleu::corpus_bleu(outputs, refs),
        trigram_overlap_with_input: overlap / n,
        para_score_with_input: para / with_para.max(1) as f64,
        identical_to_input: same as f64 / n,
        template_match: None,
    }
}
