//! The model card `paraforge train` writes with every model: Hugging Face
//! Hub metadata (library, tags, training data, license, the STS figures
//! the run measured as `model-index`) and what the model is, the command
//! and settings that made it, its data and results, and how to use it.
//!
//! Where it goes: a neural encoder's directory holds it as `README.md`
//! (the Hub's name; the scorer's fingerprint and the model digest read
//! only the files that decide embeddings, so the card changes neither).
//! A model of one file (`.pfe`, word vectors) at `X` has it beside it as
//! `X.README.md`: a `README.md` beside it would take the name of whatever
//! else the directory holds.

use std::path::{Path, PathBuf};

use paraforge_core::layout::card::{front_matter, Provenance};
use serde_json::{json, Value};

use crate::options::TrainReport;
use crate::sts::{self, SetResult};

/// The card of a one-file model `X` is `X` + this.
pub const CARD_SUFFIX: &str = ".README.md";

/// Where the card of the model at `model` goes (see the module docs).
pub fn card_path(model: &Path) -> PathBuf {
    if model.is_dir() {
        return model.join(paraforge_core::layout::CARD_FILE);
    }
    let mut name = model.as_os_str().to_os_string();
    name.push(CARD_SUFFIX);
    PathBuf::from(name)
}

/// The command line as a shell reads it back, the program named
/// `paraforge` (not the path it was started by). Arguments that are not
/// UTF-8 (paths are not bound to be) are shown lossily.
pub fn command_line<A: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = A>) -> String {
    let quote = |a: &str| {
        let plain = !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-./=,+:@%".contains(&b));
        if plain {
            a.to_string()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    let mut v: Vec<String> = args
        .into_iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    if let Some(first) = v.first_mut() {
        *first = "paraforge".into();
    }
    v.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

/// A figure the card reports: Pearson's r and Spearman's rho (x 100) on one
/// STS dataset or group.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The dataset as the code names it (`STS2012`, `STSB`, `SICK-R`, or
    /// the dev set's path).
    pub dataset: String,
    /// `dev` or `test`.
    pub split: &'static str,
    pub pearson: f64,
    pub spearman: Option<f64>,
    pub note: String,
}

/// The figures of a run: the dev score of the epoch kept (mean Pearson,
/// as it chose the epoch), then each STS group `--sts` evaluated.
pub fn figures(report: &TrainReport, dev: Option<&Path>, sts: &[SetResult]) -> Vec<Figure> {
    let mut v = Vec::new();
    if let (Some(path), Some(best)) = (dev, report.best_epoch) {
        if let Some(score) = report.epochs.get(best - 1).and_then(|e| e.dev) {
            v.push(Figure {
                dataset: path.display().to_string(),
                split: "dev",
                pearson: score,
                spearman: None,
                note: format!("mean Pearson's r, the dev score that chose epoch {best}"),
            });
        }
    }
    for (group, pearson, spearman) in sts::by_group(sts) {
        let split = if group.ends_with("-dev") {
            "dev"
        } else {
            "test"
        };
        v.push(Figure {
            dataset: group,
            split,
            pearson,
            spearman: Some(spearman),
            note: String::new(),
        });
    }
    v
}

/// Two decimals, as the card shows them.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The Hub's `model-index` for `figures` (none without figures).
fn model_index(name: &str, figures: &[Figure]) -> Option<Value> {
    if figures.is_empty() {
        return None;
    }
    let results: Vec<Value> = figures
        .iter()
        .map(|f| {
            let mut metrics = vec![
                json!({"type": "pearson", "value": round2(f.pearson), "name": "Pearson's r x 100"}),
            ];
            if let Some(s) = f.spearman {
                metrics.push(
                    json!({"type": "spearman", "value": round2(s), "name": "Spearman's rho x 100"}),
                );
            }
            json!({
                "task": {"type": "sentence-similarity", "name": "Semantic Textual Similarity"},
                "dataset": {"name": f.dataset, "type": f.dataset, "split": f.split},
                "metrics": metrics,
            })
        })
        .collect();
    Some(json!([{"name": name, "results": results}]))
}

/// Everything a card says; [`ModelCard::text`] writes it.
#[derive(Debug, Clone, Default)]
pub struct ModelCard {
    /// The model's file or directory name.
    pub name: String,
    /// `--out` as given, for the usage lines.
    pub out: String,
    /// One paragraph: what the model is.
    pub summary: String,
    pub tags: Vec<String>,
    /// `sentence-similarity` for a sentence encoder.
    pub pipeline_tag: Option<&'static str>,
    /// The command that made it, when known.
    pub command: Option<String>,
    /// (setting, value) rows.
    pub settings: Vec<(String, String)>,
    /// `--data` as given, and what it held.
    pub data: String,
    pub data_rows: String,
    /// Where the data came from, as far as its manifests say.
    pub provenance: Provenance,
    pub figures: Vec<Figure>,
    /// Extra Markdown for the results section (the epochs).
    pub results_note: String,
    /// What evaluates the model, said when the run measured nothing.
    pub evaluate_with: String,
    /// Why the evaluation after training failed, when it did.
    pub evaluation_failed: Option<String>,
    /// Markdown: how to use the model.
    pub usage: String,
}

impl ModelCard {
    /// The card: Hub metadata, then the text.
    pub fn text(&self) -> String {
        let mut datasets = vec![self.data.clone()];
        datasets.extend(
            self.provenance
                .corpus()
                .map(str::to_string)
                .filter(|c| *c != self.data),
        );
        let mut fields: Vec<(&str, Value)> = vec![("library_name", json!("paraforge"))];
        if let Some(t) = self.pipeline_tag {
            fields.push(("pipeline_tag", json!(t)));
        }
        fields.push(("tags", json!(self.tags)));
        fields.push(("datasets", json!(datasets)));
        // The encoder reads the side it was trained on: the references and
        // translations, not the source the job translated from.
        let language = self.provenance.reference_language();
        if let Some(l) = &language {
            fields.push(("language", json!([l])));
        }
        fields.push(("license", json!("other")));
        if let Some(mi) = model_index(&self.name, &self.figures) {
            fields.push(("model-index", mi));
        }
        let mut s = front_matter(&fields);
        s += &format!("\n# {}\n\n{}\n\n", self.name, self.summary);
        s += "## Training\n\n";
        if let Some(c) = &self.command {
            s += &format!("```\n{c}\n```\n\n");
        }
        s += "| setting | value |\n|---|---|\n";
        for (k, v) in &self.settings {
            s += &format!("| {k} | {v} |\n");
        }
        s += &format!(
            "\n## Data\n\n`{}`: {}.\n\n{}",
            self.data,
            self.data_rows,
            self.provenance.markdown()
        );
        if language.is_none() {
            s += "\nThe data's language is not recorded in its manifests.\n";
        }
        s += "\n## Results\n\n";
        if let Some(why) = &self.evaluation_failed {
            s += &format!(
                "The evaluation after training failed: {why}\n\n`{}` evaluates the model \
                 again.\n\n",
                self.evaluate_with
            );
        } else if self.figures.is_empty() {
            s += &format!(
                "Nothing was evaluated in this run: `{}` evaluates it.\n",
                self.evaluate_with
            );
        }
        if !self.figures.is_empty() {
            s += "| dataset | split | Pearson's r x 100 | Spearman's rho x 100 | |\n\
                  |---|---|---:|---:|---|\n";
            for f in &self.figures {
                let sp = f.spearman.map_or("".into(), |x| format!("{x:.2}"));
                s += &format!(
                    "| {} | {} | {:.2} | {sp} | {} |\n",
                    f.dataset, f.split, f.pearson, f.note
                );
            }
            let semeval = self.figures.iter().any(|f| {
                f.spearman.is_some()
                    && !["STSB", "STSB-dev", "SICK-R"].contains(&f.dataset.as_str())
            });
            if semeval {
                s += "\nSemEval years are the mean over their datasets, as Wieting and Gimpel \
                      (2018) report them.\n";
            }
        }
        s += &self.results_note;
        s += &format!("\n## Use\n\n{}", self.usage);
        s += "\n## License\n\nThe weights derive from the training data, whose license \
              paraforge does not know: the metadata says `license: other` until whoever \
              publishes the model sets the data's license.\n";
        s
    }
}

/// The Hub tags of a sentence encoder: what it is and its parts.
pub fn encoder_tags(parts: &[String]) -> Vec<String> {
    let mut tags = vec![
        "sentence-similarity".to_string(),
        "paraphrastic-embeddings".to_string(),
        "paraforge".to_string(),
    ];
    for p in parts {
        let tag = match p.as_str() {
            "word" | "avg" => "word-averaging".to_string(),
            "trigram" => "char-trigram".to_string(),
            other => other.to_string(),
        };
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    tags
}

/// A table of the epochs, for the results section.
pub fn epochs_table(report: &TrainReport) -> String {
    if report.epochs.is_empty() {
        return "\nNo epoch was trained (`--epochs 0`): these are the initial weights.\n".into();
    }
    let mut s = String::from(
        "\n| epoch | pairs | mean loss | pairs/s | dev |\n|---:|---:|---:|---:|---:|\n",
    );
    for e in &report.epochs {
        let dev = e.dev.map_or(String::new(), |d| format!("{d:.2}"));
        s += &format!(
            "| {} | {} | {:.4} | {:.0} | {dev} |\n",
            e.epoch, e.pairs, e.mean_loss, e.pairs_per_second
        );
    }
    if let Some(r) = report.resumed_after {
        s += &format!(
            "\nResumed after epoch {r} from a checkpoint (the model of an uninterrupted run).\n"
        );
    }
    s += &match report.best_epoch {
        Some(b) => format!("\nKept: epoch {b}, the best dev score.\n"),
        None => "\nKept: the last epoch (no dev set).\n".into(),
    };
    s
}

/// How to use a sentence encoder written to `out`.
pub fn encoder_usage(out: &str, neural: bool) -> String {
    let what = if neural {
        "a directory: `model.safetensors` (the weights) and `config.json` (encoder, sizes, \
         vocabulary, tokenisation), which Python opens with `safetensors` and `json`"
    } else {
        "a `.pfe` file (paraforge embedding model: a JSON header, then the word and trigram \
         tables)"
    };
    format!(
        "The model is {what}. With paraforge:\n\n\
         ```\n\
         paraforge eval-sts --model {out}                          # STS, as above\n\
         paraforge embed --model {out} --input sentences.txt --out embeddings.npy\n\
         paraforge rescore --data OUTPUT --model {out} --out RESCORED\n\
         ```\n\n\
         and as a job's para_score model, in its config:\n\n\
         ```toml\n[scoring]\nmodel = \"{out}\"\n```\n"
    )
}

/// The card of `train --model paragram-words`: GloVe text at `out`.
pub struct ParagramCard<'a> {
    pub out: &'a Path,
    pub data: &'a Path,
    pub init_vectors: &'a Path,
    pub command: Option<String>,
    pub options: &'a crate::paragram::ParagramOptions,
    /// `--lexicon-min-count` and `--lexicon-min-pmi`, for a lexicon.
    pub lexicon: Option<(u64, f64)>,
    pub report: &'a crate::paragram::ParagramReport,
    /// Vectors written and their dimension.
    pub vectors: (usize, usize),
}

impl ParagramCard<'_> {
    pub fn card(&self) -> ModelCard {
        let o = self.options;
        let out = self.out.display().to_string();
        let mut settings = vec![
            (
                "init vectors".to_string(),
                format!("`{}`", self.init_vectors.display()),
            ),
            ("epochs".into(), o.epochs.to_string()),
            ("batch size".into(), o.batch_size.to_string()),
            ("AdaGrad learning rate".into(), o.lr.to_string()),
            ("margin".into(), o.margin.to_string()),
            (
                "lambda (pull to the initial vectors)".into(),
                o.lambda.to_string(),
            ),
            ("seed".into(), o.seed.to_string()),
        ];
        if let Some((count, pmi)) = self.lexicon {
            settings.push(("lexicon min count".into(), count.to_string()));
            settings.push(("lexicon min adjusted PMI".into(), pmi.to_string()));
        }
        let r = self.report;
        let loss: Vec<String> = r.loss.iter().map(|l| format!("{l:.4}")).collect();
        ModelCard {
            name: self
                .out
                .file_name()
                .map_or_else(|| out.clone(), |n| n.to_string_lossy().into_owned()),
            out: out.clone(),
            summary: format!(
                "PARAGRAM word vectors (Wieting et al., 2015): `{}` tuned by `paraforge train \
                 --model paragram-words` on paraphrase word pairs, as GloVe text ({} vectors x \
                 {} dimensions; only the trained words moved).",
                self.init_vectors.display(),
                self.vectors.0,
                self.vectors.1
            ),
            tags: vec![
                "word-embeddings".into(),
                "paraphrastic-embeddings".into(),
                "paraforge".into(),
                "paragram".into(),
            ],
            pipeline_tag: None,
            command: self.command.clone(),
            settings,
            data: self.data.display().to_string(),
            data_rows: format!(
                "{} of {} word pairs trained ({} with a word the vectors lack, {} repeated), {} words moved",
                r.pairs, r.pairs_given, r.unknown, r.repeated, r.words
            ),
            provenance: paraforge_core::dataset::trace(self.data),
            figures: Vec::new(),
            results_note: format!(
                "\nMean hinge loss before training and after each epoch: {}.\n",
                loss.join(", ")
            ),
            evaluate_with: format!("paraforge eval-words --vectors {out}"),
            evaluation_failed: None,
            usage: format!(
                "GloVe text: one word and its values a line.\n\n\
                 ```\n\
                 paraforge eval-words --vectors {out}             # SimLex-999, WordSim-353\n\
                 paraforge eval-sts --vectors {out}               # averaged, on STS\n\
                 paraforge train --init-vectors {out} ...         # a sentence encoder's start\n\
                 ```\n\n\
                 and as a job's para_score vectors: `[scoring] vectors = \"{out}\"`.\n"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paraforge_core::layout::card::read_front_matter;

    #[test]
    fn cards_go_inside_a_directory_and_beside_a_file() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(card_path(d.path()), d.path().join("README.md"));
        let f = d.path().join("m.pfe");
        std::fs::write(&f, "x").unwrap();
        assert_eq!(card_path(&f), d.path().join("m.pfe.README.md"));
        assert_eq!(
            command_line(
                ["/x/paraforge", "train", "--out", "a b", "--lr", "0.1"].map(String::from)
            ),
            "paraforge train --out 'a b' --lr 0.1"
        );
        // clap takes a path that is not UTF-8; the card shows it lossily.
        use std::os::unix::ffi::OsStringExt;
        let odd = std::ffi::OsString::from_vec(b"m\xff.pfe".to_vec());
        assert_eq!(
            command_line([std::ffi::OsString::from("p"), "--out".into(), odd]),
            "paraforge --out 'm\u{fffd}.pfe'"
        );
    }

    #[test]
    fn figures_become_the_model_index() {
        let report = TrainReport {
            epochs: (1..=2)
                .map(|epoch| crate::options::EpochReport {
                    epoch,
                    pairs: 10,
                    mean_loss: 0.1,
                    seconds: 1.0,
                    pairs_per_second: 10.0,
                    dev: Some(60.0 + epoch as f64 * 0.126),
                })
                .collect(),
            best_epoch: Some(2),
            ..TrainReport::default()
        };
        let sts = [
            ("STS2012", 50.0, 51.0),
            ("STS2012", 60.0, 61.0),
            ("STSB", 72.123, 72.456),
        ]
        .map(|(g, p, s)| SetResult {
            group: g.into(),
            name: "x".into(),
            pairs: 3,
            pearson: p,
            spearman: s,
        });
        let card = ModelCard {
            name: "m.pfe".into(),
            tags: encoder_tags(&["word".into(), "trigram".into()]),
            data: "bins/train".into(),
            figures: figures(&report, Some(Path::new("dev.csv")), &sts),
            ..ModelCard::default()
        };
        let text = card.text();
        let (meta, body) = read_front_matter(&text).unwrap();
        let get = |k: &str| meta.iter().find(|(key, _)| key == k).unwrap().1.clone();
        assert_eq!(get("library_name"), "paraforge");
        assert_eq!(
            get("tags"),
            json!([
                "sentence-similarity",
                "paraphrastic-embeddings",
                "paraforge",
                "word-averaging",
                "char-trigram"
            ])
        );
        let results = &get("model-index")[0]["results"];
        assert_eq!(results[0]["dataset"]["split"], "dev");
        assert_eq!(results[0]["metrics"][0]["value"], 60.25);
        assert_eq!(results[1]["dataset"]["name"], "STS2012");
        assert_eq!(results[1]["metrics"][0]["value"], 55.0);
        assert_eq!(results[1]["metrics"][1]["type"], "spearman");
        assert_eq!(results[2]["metrics"][1]["value"], 72.46);
        assert!(body.contains("| STSB | test | 72.12 | 72.46 |"), "{body}");
        assert!(body.contains("SemEval years are the mean"), "{body}");
        // No SemEval set scored: no word of SemEval years.
        let stsb_only = ModelCard {
            figures: figures(&report, None, &sts[2..]),
            ..ModelCard::default()
        };
        assert!(!stsb_only.text().contains("SemEval"));
        // An evaluation that failed is said, with why.
        let failed = ModelCard {
            evaluation_failed: Some("STS2015 x: the cosine is NaN".into()),
            evaluate_with: "paraforge eval-sts --model m".into(),
            ..ModelCard::default()
        };
        let text = failed.text();
        assert!(
            text.contains("evaluation after training failed: STS2015 x: the cosine is NaN"),
            "{text}"
        );
        assert!(!text.contains("Nothing was evaluated"), "{text}");
        // Without figures, no model-index.
        let bare = ModelCard::default().text();
        let (meta, _) = read_front_matter(&bare).unwrap();
        assert!(meta.iter().all(|(k, _)| k != "model-index"));
    }
}
