//! The job configuration (TOML). Every key is documented here and in
//! `pipeline-configs/*.toml`; unknown keys are errors, and every check names
//! the key it is about, so a typo never silently falls back to a default.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bitext::Format;
pub use crate::model::{Model, TopKOnName};
pub use crate::scoring::{Scoring, BOOTSTRAP_KINDS};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: `{key}`: {message}")]
    Invalid {
        path: PathBuf,
        key: &'static str,
        message: String,
    },
}

/// A whole job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    pub job: Job,
    pub input: Input,
    /// The translation model; none for `input.format = "pairs"`, whose
    /// translations exist already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Model>,
    /// Rules that drop pairs before translation (`crate::filters`).
    #[serde(default, skip_serializing_if = "crate::filters::Filters::is_empty")]
    pub filters: crate::filters::Filters,
    #[serde(default)]
    pub scoring: Scoring,
    #[serde(default)]
    pub bins: Option<Bins>,
    #[serde(default)]
    pub coordinator: Coordinator,
    #[serde(default)]
    pub workers: Workers,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Names the job in metrics, logs and the manifest.
    pub name: String,
    /// Output root: a local directory, `s3://bucket/prefix` or `gs://bucket/prefix`.
    pub output: String,
    /// Target number of pairs per shard (shards are cut at line starts).
    #[serde(default = "default_shard_pairs")]
    pub shard_pairs: u64,
    /// Leases of a shard before it is marked failed.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// A lease not extended by a heartbeat for this long expires.
    #[serde(default = "default_lease_seconds")]
    pub lease_seconds: u32,
    /// A job that rejects a larger share of its input lines fails (no
    /// `_SUCCESS`): a wrong `input.format` or encoding rejects everything.
    #[serde(default = "default_max_reject_rate")]
    pub max_reject_rate: f64,
}

fn default_max_reject_rate() -> f64 {
    0.5
}

fn default_shard_pairs() -> u64 {
    50_000
}
fn default_max_attempts() -> u32 {
    3
}
fn default_lease_seconds() -> u32 {
    120
}

/// Input format names as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FormatName {
    Czeng16,
    Czeng20,
    Aligned,
    Tsv,
    /// Pairs that are already translated (a reference and its paraphrase,
    /// e.g. the released ParaNMT-50M TSV): scored without a model.
    Pairs,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Source files (paths or object-store URLs), plain, `.gz` or `.zst`.
    pub paths: Vec<String>,
    pub format: FormatName,
    /// For `aligned`: the reference file of each source file, in order.
    #[serde(default)]
    pub reference_paths: Vec<String>,
    /// For `tsv`: 0-based columns.
    #[serde(default)]
    pub id_column: Option<usize>,
    #[serde(default)]
    pub source_column: Option<usize>,
    #[serde(default)]
    pub reference_column: Option<usize>,
    /// For `pairs`: the translation's column (default 1; the reference's
    /// default is 0, the source column is optional and carried as is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translation_column: Option<usize>,
    /// For `pairs`: a column with the translation model's score of each
    /// translation (`translation_score`); without it that column is null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translation_score_column: Option<usize>,
    /// Lines with a longer side (in characters) are rejected.
    #[serde(default = "default_max_chars")]
    pub max_chars: usize,
    /// Only the first N lines of the input (across its files, in order):
    /// to try a job on a small part before the whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

fn default_max_chars() -> usize {
    1000
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bins {
    /// Where `paraforge bin` writes at the end of the job: a path or an
    /// object-store URL (default `<output>-bins`, next to the output; see
    /// [`JobConfig::bins_output`]).
    #[serde(default)]
    pub output: Option<String>,
    #[serde(default = "default_deciles")]
    pub deciles: Vec<String>,
    #[serde(default)]
    pub train_sample: Option<usize>,
    #[serde(default)]
    pub dedup: bool,
}

fn default_deciles() -> Vec<String> {
    vec!["para_score".into()]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Coordinator {
    /// gRPC listen address.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Prometheus metrics and status over HTTP.
    #[serde(default = "default_metrics")]
    pub metrics: String,
    /// The coordinator's durable state (default `<output>/_coordinator.redb`
    /// for local outputs; required for object-store outputs).
    #[serde(default)]
    pub state: Option<String>,
    /// TLS: the coordinator's certificate chain and private key (PEM files).
    /// Both or neither; with them, workers connect with `https://` URLs.
    #[serde(default)]
    pub tls_cert: Option<String>,
    #[serde(default)]
    pub tls_key: Option<String>,
    /// CA certificate (PEM) that `paraforge run`'s own workers trust
    /// (default: `tls_cert`, right for a self-signed certificate).
    #[serde(default)]
    pub tls_ca: Option<String>,
    /// A file whose first line is the shared secret every request must
    /// carry; without it the `PARAFORGE_TOKEN` environment variable is used,
    /// and without either no token is required.
    #[serde(default)]
    pub auth_token_file: Option<String>,
    /// Largest gRPC message accepted, in bytes (default 4 MiB).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
}

impl Default for Coordinator {
    fn default() -> Self {
        Coordinator {
            listen: default_listen(),
            metrics: default_metrics(),
            state: None,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            auth_token_file: None,
            max_message_bytes: default_max_message_bytes(),
        }
    }
}

/// Largest gRPC message either side accepts unless configured otherwise.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;

fn default_max_message_bytes() -> usize {
    DEFAULT_MAX_MESSAGE_BYTES
}

fn default_listen() -> String {
    "127.0.0.1:50051".into()
}
fn default_metrics() -> String {
    "127.0.0.1:9464".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workers {
    /// Workers that `paraforge run` starts in its own process.
    #[serde(default = "default_local")]
    pub local: usize,
}

impl Default for Workers {
    fn default() -> Self {
        Workers {
            local: default_local(),
        }
    }
}

fn default_local() -> usize {
    1
}

pub use crate::limits::{
    check_streams, cores, max_threads, MAX_BATCH_SIZE, MAX_BATCH_TOKENS, MAX_BEAM, MAX_CHARS,
    MAX_STREAMS, THREADS_PER_CORE,
};

const SCORES: [&str; 7] = [
    "para_score",
    "trigram_overlap",
    "translation_score",
    "bigram_overlap",
    "unigram_overlap",
    "sentence_bleu",
    "translation_perplexity",
];

impl JobConfig {
    pub fn load(path: &Path) -> Result<JobConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        JobConfig::parse(&text, path)
    }

    /// Parses and validates; `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<JobConfig, ConfigError> {
        let cfg: JobConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        // Section by section, in the order the keys are read: the first
        // error found is the one reported.
        self.check_job()
            .and_then(|()| self.check_reads())
            .and_then(|()| self.check_input_files())
            .and_then(|()| self.check_model())
            .and_then(|()| self.check_bins())
            .and_then(|()| self.check_coordinator())
            .map_err(|(key, message)| ConfigError::Invalid {
                path: path.to_path_buf(),
                key,
                message,
            })
    }

    /// `[job]`'s keys but `max_reject_rate`.
    fn check_job(&self) -> Result<(), (&'static str, String)> {
        if self.job.name.trim().is_empty() {
            return bad("job.name", "must not be empty".into());
        }
        if self.job.output.trim().is_empty() {
            return bad("job.output", "must not be empty".into());
        }
        if let Some((scheme, _)) = self.job.output.split_once("://") {
            if !matches!(scheme, "s3" | "gs" | "file") {
                return bad(
                    "job.output",
                    format!("unsupported scheme {scheme:?} (use a path, s3:// or gs://)"),
                );
            }
        }
        if self.job.shard_pairs == 0 {
            return bad("job.shard_pairs", "must be at least 1".into());
        }
        if self.job.max_attempts == 0 {
            return bad("job.max_attempts", "must be at least 1".into());
        }
        if self.job.lease_seconds < 5 {
            return bad("job.lease_seconds", "must be at least 5".into());
        }
        Ok(())
    }

    /// What the job reads besides the bitext's lines: that there are
    /// inputs, `[filters]`, and `[scoring]`'s files.
    fn check_reads(&self) -> Result<(), (&'static str, String)> {
        if self.input.paths.is_empty() {
            return bad("input.paths", "needs at least one file".into());
        }
        if let Err(e) = self.filters.validate() {
            return bad(e.key, e.message);
        }
        if self.scoring.model.is_some() && self.scoring.vectors.is_some() {
            return bad(
                "scoring.model",
                "give scoring.model or scoring.vectors for para_score, not both".into(),
            );
        }
        for (key, v) in [
            ("scoring.model", &self.scoring.model),
            ("scoring.vectors", &self.scoring.vectors),
            ("scoring.lm", &self.scoring.lm),
        ] {
            if v.as_deref().is_some_and(|p| p.trim().is_empty()) {
                return bad(key, "must not be empty (leave the key out instead)".into());
            }
        }
        self.check_bootstrap()?;
        if let Some(lm) = &self.scoring.lm {
            if !(lm.ends_with(".arpa") || lm.ends_with(".arpa.gz")) {
                return bad(
                    "scoring.lm",
                    format!("{lm:?}: an ARPA model is read (a .arpa or .arpa.gz file; KenLM's binary format is not)"),
                );
            }
        }
        Ok(())
    }

    /// `[scoring] bootstrap` and its keys.
    fn check_bootstrap(&self) -> Result<(), (&'static str, String)> {
        crate::scoring::check_bootstrap(&self.scoring, &self.job.output, self.bootstrap_output())
    }

    /// `[input]`: its files' schemes, no file twice, what the format
    /// needs, the side bound and the columns.
    fn check_input_files(&self) -> Result<(), (&'static str, String)> {
        for (key, list) in [
            ("input.paths", &self.input.paths),
            ("input.reference_paths", &self.input.reference_paths),
        ] {
            for (i, p) in list.iter().enumerate() {
                if let Some((scheme, _)) = p.split_once("://") {
                    if !matches!(scheme, "s3" | "gs" | "file") {
                        return bad(
                            key,
                            format!("entry {i} ({p}): unsupported scheme {scheme:?} (use a path, s3:// or gs://)"),
                        );
                    }
                }
            }
        }
        for (key, list) in [
            ("input.paths", &self.input.paths),
            ("input.reference_paths", &self.input.reference_paths),
        ] {
            let mut seen: std::collections::HashMap<String, usize> = Default::default();
            for (i, p) in list.iter().enumerate() {
                if let Some(first) = seen.insert(crate::storage::same_input(p), i) {
                    return bad(
                        key,
                        format!(
                            "entry {i} ({p}) is entry {first} ({}) again: the file would be read twice and every pair in it doubled",
                            list[first]
                        ),
                    );
                }
            }
        }
        match self.input.format {
            FormatName::Aligned if self.input.reference_paths.len() != self.input.paths.len() => {
                return bad(
                    "input.reference_paths",
                    format!(
                        "format \"aligned\" needs one reference file per source file ({} sources, {} references)",
                        self.input.paths.len(),
                        self.input.reference_paths.len()
                    ),
                );
            }
            FormatName::Tsv => {
                if self.input.source_column.is_none() {
                    return bad("input.source_column", "format \"tsv\" needs it".into());
                }
                if self.input.reference_column.is_none() {
                    return bad("input.reference_column", "format \"tsv\" needs it".into());
                }
                if self.input.source_column == self.input.reference_column {
                    return bad(
                        "input.reference_column",
                        "must differ from input.source_column".into(),
                    );
                }
            }
            _ => {}
        }
        if self.input.max_chars == 0 || self.input.max_chars > MAX_CHARS {
            return bad(
                "input.max_chars",
                format!("{} must be between 1 and {MAX_CHARS}", self.input.max_chars),
            );
        }
        if self.input.limit == Some(0) {
            return bad("input.limit", "0 would plan no line: at least 1".into());
        }
        self.check_input_columns()
    }

    /// `[model]`, and the share of malformed lines a job may reject.
    fn check_model(&self) -> Result<(), (&'static str, String)> {
        if let Some(m) = &self.model {
            m.validate()?;
        }
        if !(0.0..=1.0).contains(&self.job.max_reject_rate) {
            return bad(
                "job.max_reject_rate",
                format!(
                    "{} is not a share between 0 and 1",
                    self.job.max_reject_rate
                ),
            );
        }
        Ok(())
    }

    /// `[bins]`.
    fn check_bins(&self) -> Result<(), (&'static str, String)> {
        // `<output>-bins` of a bucket's root would be another bucket.
        if self.bins.as_ref().is_some_and(|b| b.output.is_none()) {
            let root = self
                .job
                .output
                .split_once("://")
                .is_some_and(|(_, rest)| !rest.trim_end_matches('/').contains('/'));
            if root {
                return bad(
                    "bins.output",
                    format!(
                        "must be set when job.output ({}) is a bucket's root (the default is a directory next to the output)",
                        self.job.output
                    ),
                );
            }
        }
        if let Some(b) = &self.bins {
            for d in &b.deciles {
                if !SCORES.contains(&d.as_str()) {
                    return bad(
                        "bins.deciles",
                        format!("{d:?} is not a score (use {})", SCORES.join(", ")),
                    );
                }
            }
            if b.train_sample == Some(0) {
                return bad("bins.train_sample", "must be at least 1".into());
            }
            // Bins are para_score ranges: without a scorer every pair's
            // para_score is null, every range empty, and the job would end
            // "successfully" with nothing binned.
            if !self.scoring.scores() {
                return bad(
                    "bins",
                    "bins are para_score ranges, and para_score needs scoring.model (e.g. \"models/scorer-trigram\"), scoring.vectors or scoring.bootstrap".into(),
                );
            }
            if self.scoring.lm.is_none() && b.deciles.iter().any(|d| d == "translation_perplexity")
            {
                return bad(
                    "bins.deciles",
                    "\"translation_perplexity\" is null without scoring.lm".into(),
                );
            }
        }
        Ok(())
    }

    /// `[coordinator]` and `[workers]`.
    fn check_coordinator(&self) -> Result<(), (&'static str, String)> {
        for (key, addr) in [
            ("coordinator.listen", &self.coordinator.listen),
            ("coordinator.metrics", &self.coordinator.metrics),
        ] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return bad(
                    key,
                    format!("{addr:?} is not a socket address like 127.0.0.1:50051"),
                );
            }
        }
        if self.coordinator.tls_cert.is_some() != self.coordinator.tls_key.is_some() {
            return bad(
                if self.coordinator.tls_cert.is_some() {
                    "coordinator.tls_key"
                } else {
                    "coordinator.tls_cert"
                },
                "TLS needs both tls_cert and tls_key".into(),
            );
        }
        if self.coordinator.tls_ca.is_some() && self.coordinator.tls_cert.is_none() {
            return bad(
                "coordinator.tls_ca",
                "is only used with tls_cert and tls_key".into(),
            );
        }
        if !(1024..=1 << 30).contains(&self.coordinator.max_message_bytes) {
            return bad(
                "coordinator.max_message_bytes",
                "must be between 1024 and 1073741824".into(),
            );
        }
        if self.workers.local > 256 {
            return bad("workers.local", "at most 256".into());
        }
        Ok(())
    }

    /// What `input.format` needs of the other `[input]` keys and of
    /// `[model]`: (key, what is wrong).
    fn check_input_columns(&self) -> Result<(), (&'static str, String)> {
        let i = &self.input;
        let pairs = i.format == FormatName::Pairs;
        if !pairs {
            for (key, v) in [
                ("input.translation_column", i.translation_column),
                ("input.translation_score_column", i.translation_score_column),
            ] {
                if v.is_some() {
                    return Err((key, "only format \"pairs\" reads it".into()));
                }
            }
            if self.model.is_none() {
                return Err((
                    "model",
                    "the [model] section is missing: it translates the input's source side (input.format = \"pairs\" reads translations that exist instead)".into(),
                ));
            }
            return Ok(());
        }
        if self.model.is_some() {
            return Err((
                "model",
                "input.format = \"pairs\" reads pairs that are already translated: a [model] section would translate nothing; remove it".into(),
            ));
        }
        if !i.reference_paths.is_empty() {
            return Err((
                "input.reference_paths",
                "format \"pairs\" reads both sides from one file".into(),
            ));
        }
        let Format::Pairs {
            id,
            source,
            reference,
            translation,
            score,
        } = self.format(0)
        else {
            unreachable!("format pairs reads as Format::Pairs")
        };
        let named = [
            ("input.id_column", id),
            ("input.source_column", source),
            ("input.reference_column", Some(reference)),
            ("input.translation_column", Some(translation)),
            ("input.translation_score_column", score),
        ];
        for (n, (key, col)) in named.iter().enumerate() {
            if let Some(col) = col {
                if let Some((other, _)) = named[..n].iter().find(|(_, c)| *c == Some(*col)) {
                    return Err((key, format!("column {col} is {other} already")));
                }
            }
        }
        Ok(())
    }

    /// The reader format of input file `i`.
    pub fn format(&self, i: usize) -> Format {
        match self.input.format {
            FormatName::Czeng16 => Format::Czeng16,
            FormatName::Czeng20 => Format::Czeng20,
            FormatName::Tsv => Format::Tsv {
                id: self.input.id_column,
                source: self.input.source_column.unwrap_or(0),
                reference: self.input.reference_column.unwrap_or(1),
            },
            FormatName::Aligned => Format::Aligned {
                reference: PathBuf::from(&self.input.reference_paths[i]),
            },
            FormatName::Pairs => Format::Pairs {
                id: self.input.id_column,
                source: self.input.source_column,
                reference: self.input.reference_column.unwrap_or(0),
                translation: self.input.translation_column.unwrap_or(1),
                score: self.input.translation_score_column,
            },
        }
    }

    /// Where `[bins]` writes: `bins.output`, or `<output>-bins` next to the
    /// output. Not inside it: Hugging Face `datasets.load_dataset(output)`
    /// would take the bins' `train/` folder for the job's train split.
    pub fn bins_output(&self) -> Option<String> {
        let b = self.bins.as_ref()?;
        Some(
            b.output
                .clone()
                .unwrap_or_else(|| format!("{}-bins", self.job.output.trim_end_matches('/'))),
        )
    }

    /// Where `[scoring] bootstrap` writes the scored corpus:
    /// `scoring.bootstrap_output`, or `<output>-scored` next to the output.
    pub fn bootstrap_output(&self) -> Option<String> {
        self.scoring.bootstrap.as_ref()?;
        Some(
            self.scoring
                .bootstrap_output
                .clone()
                .unwrap_or_else(|| format!("{}-scored", self.job.output.trim_end_matches('/'))),
        )
    }

    /// Hypotheses kept per input pair: `model.beam_candidates`, one
    /// without a model.
    pub fn beam_candidates(&self) -> usize {
        self.model.as_ref().map_or(1, |m| m.beam_candidates)
    }

    /// The config as TOML, for the manifest and the Parquet metadata.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// The keys that decide a job's output, flattened (`model.beam` ->
    /// value): a job resumed with any of them changed would mix two corpora.
    /// Where and how fast it runs (device, threads, batch size, workers,
    /// leases, bins) may change between runs: the output does not depend
    /// on them.
    pub fn output_keys(&self) -> std::collections::BTreeMap<String, String> {
        let mut out = std::collections::BTreeMap::new();
        let mut put = |k: &str, v: &dyn erased::Value| {
            out.insert(k.to_string(), v.text());
        };
        put("job.name", &self.job.name);
        put("job.output", &self.job.output);
        put("job.shard_pairs", &self.job.shard_pairs);
        put("input", &self.input);
        // No model (pairs input): `input` says so.
        if let Some(m) = &self.model {
            put("model.dir", &m.dir);
            put("model.quantized", &m.quantized);
            put("model.beam", &m.beam);
            put("model.max_new_tokens", &m.max_new_tokens);
            // Left out at its default, so jobs from before it keep their key.
            if m.beam_candidates != 1 {
                put("model.beam_candidates", &m.beam_candidates);
            }
            // Each left out unset, so jobs from before them keep their keys.
            if let Some(n) = m.no_repeat_ngram_size {
                put("model.no_repeat_ngram_size", &n);
            }
            if let Some(p) = m.repetition_penalty {
                put("model.repetition_penalty", &p);
            }
            if let Some(p) = m.length_penalty {
                put("model.length_penalty", &p);
            }
        }
        put("scoring", &self.scoring.output_keys());
        // Left out when empty, so jobs from before `[filters]` keep their
        // key. `max_drop_rate` decides the verdict, not the output.
        let filters = crate::filters::Filters {
            max_drop_rate: None,
            ..self.filters.clone()
        };
        if !filters.is_empty() {
            put("filters", &filters);
        }
        out
    }
}

/// A key's error, as the section checks return it.
fn bad(key: &'static str, message: String) -> Result<(), (&'static str, String)> {
    Err((key, message))
}

/// Any serializable value as compact JSON text.
mod erased {
    pub trait Value {
        fn text(&self) -> String;
    }
    impl<T: serde::Serialize> Value for T {
        fn text(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[job]
name = "t"
output = "out/t"

[input]
paths = ["a.tsv"]
format = "czeng16"

[model]
dir = "models/tiny-cs-en"
"#;

    fn parse(s: &str) -> Result<JobConfig, ConfigError> {
        JobConfig::parse(s, Path::new("job.toml"))
    }

    #[test]
    fn defaults_fill_what_a_minimal_config_leaves_out() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.model.as_ref().unwrap().beam, 12);
        assert_eq!(c.job.shard_pairs, 50_000);
        assert_eq!(c.workers.local, 1);
        assert_eq!(c.format(0), Format::Czeng16);
        // Round trip through TOML keeps everything.
        assert_eq!(parse(&c.to_toml()).unwrap(), c);
    }

    /// The same file twice in `input.paths`, however spelled, would double
    /// every pair of it.
    #[test]
    fn an_input_listed_twice_is_refused_naming_the_key_and_entries() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.tsv");
        std::fs::write(&a, "").unwrap();
        let a = a.display().to_string();
        let with = |paths: &[String]| {
            let list: Vec<String> = paths.iter().map(|p| format!("{p:?}")).collect();
            parse(&MINIMAL.replace("[\"a.tsv\"]", &format!("[{}]", list.join(", "))))
        };
        let parent = dir.path().file_name().unwrap().to_str().unwrap();
        for twice in [
            a.clone(),
            format!("file://{a}"),
            format!("{}/./a.tsv", dir.path().display()),
            format!("{}/../{parent}/a.tsv", dir.path().display()),
        ] {
            let e = with(&[a.clone(), "b.tsv".into(), twice.clone()])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("`input.paths`")
                    && e.contains(&format!("entry 2 ({twice}) is entry 0 ({a}) again")),
                "{e}"
            );
        }
        // Files that do not exist here (a worker's view) compare as written.
        let e = with(&["x/a.tsv".into(), "x//./a.tsv".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("entry 1 (x//./a.tsv) is entry 0 (x/a.tsv) again"),
            "{e}"
        );
        let e = with(&["s3://b/k/a.tsv".into(), "s3://b/k//a.tsv".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("input.paths"), "{e}");
        with(&[a.clone(), "s3://b/a.tsv".into(), "b.tsv".into()]).unwrap();
    }

    /// `filters.max_drop_rate` is checked at load and, deciding only the
    /// verdict, leaves the keys a resumed job compares alone.
    #[test]
    fn max_drop_rate_is_validated_and_not_an_output_key() {
        let e = parse(&format!("{MINIMAL}[filters]\nmax_drop_rate = 1.5\n"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("job.toml: `filters.max_drop_rate`"), "{e}");
        let plain = parse(&format!("{MINIMAL}[filters]\nmin_tokens = 2\n")).unwrap();
        let set = parse(&format!(
            "{MINIMAL}[filters]\nmin_tokens = 2\nmax_drop_rate = 0.9\n"
        ))
        .unwrap();
        assert_eq!(set.filters.max_drop_rate, Some(0.9));
        assert_eq!(set.output_keys(), plain.output_keys());
        let only = parse(&format!("{MINIMAL}[filters]\nmax_drop_rate = 0.9\n")).unwrap();
        assert_eq!(only.output_keys(), parse(MINIMAL).unwrap().output_keys());
    }

    /// A bootstrap writes its scored corpus next to the output, bins from
    /// it are allowed, and adding one leaves the output's keys (what a
    /// resume checks) as they were.
    #[test]
    fn a_bootstrap_scores_next_to_the_output() {
        let boot = MINIMAL.to_string() + "\n[scoring]\nbootstrap = \"word,trigram\"\n[bins]\n";
        let c = parse(&boot).unwrap();
        assert_eq!(c.bootstrap_output().as_deref(), Some("out/t-scored"));
        assert_eq!(c.scoring.folds(), 2);
        assert_eq!(c.output_keys(), parse(MINIMAL).unwrap().output_keys());
        assert_eq!(parse(MINIMAL).unwrap().bootstrap_output(), None);
    }

    #[test]
    fn bins_go_next_to_the_output_unless_told() {
        let scored = MINIMAL.to_string() + "\n[scoring]\nvectors = \"v.txt\"\n";
        let with = |extra: &str| parse(&(scored.clone() + extra)).unwrap().bins_output();
        assert_eq!(with(""), None);
        assert_eq!(with("\n[bins]\n").as_deref(), Some("out/t-bins"));
        assert_eq!(
            with("\n[bins]\noutput = \"elsewhere\"\n").as_deref(),
            Some("elsewhere")
        );
        let s3 = scored.replace("out/t", "s3://b/jobs/t/") + "\n[bins]\n";
        assert_eq!(
            parse(&s3).unwrap().bins_output().as_deref(),
            Some("s3://b/jobs/t-bins")
        );
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (MINIMAL.replace("[model]", "[model]\nbeem = 4"), "beem"),
            (
                MINIMAL.replace("[model]", "[model]\nbeam = 0"),
                "model.beam",
            ),
            (
                MINIMAL.replace("[model]", "[model]\nbeam = 4\nbeam_candidates = 5"),
                "model.beam_candidates",
            ),
            (
                MINIMAL.replace("[model]", "[model]\nbeam_candidates = 0"),
                "model.beam_candidates",
            ),
            (
                MINIMAL.replace("[model]", "[model]\nbatch_tokens = 0"),
                "model.batch_tokens",
            ),
            (
                MINIMAL.replace("[model]", "[model]\nrepetition_penalty = 0.0"),
                "model.repetition_penalty",
            ),
            (
                MINIMAL.replace(
                    "[model]",
                    "[model]\nno_repeat_ngram_size = 3\ndevice = \"cuda\"",
                ),
                "model.top_k_on",
            ),
            (
                MINIMAL.replace("output = \"out/t\"", "output = \"s3://bucket\"")
                    + "\n[scoring]\nvectors = \"v.txt\"\n[bins]\n",
                "bins.output",
            ),
            (MINIMAL.to_string() + "\n[bins]\n", "scoring.model"),
            (
                MINIMAL.to_string() + "\n[scoring]\nbootstrap = \"lstm\"\n",
                "scoring.bootstrap",
            ),
            (
                MINIMAL.to_string() + "\n[scoring]\nbootstrap = \"trigram\"\nvectors = \"v.txt\"\n",
                "scoring.bootstrap",
            ),
            (
                MINIMAL.to_string() + "\n[scoring]\nbootstrap = \"word\"\nbootstrap_folds = 1\n",
                "scoring.bootstrap_folds",
            ),
            (
                MINIMAL.to_string() + "\n[scoring]\nbootstrap = \"word\"\nbootstrap_epochs = 0\n",
                "scoring.bootstrap_epochs",
            ),
            (
                MINIMAL.to_string() + "\n[scoring]\nbootstrap_output = \"x\"\n",
                "scoring.bootstrap_output",
            ),
            (
                MINIMAL.to_string()
                    + "\n[scoring]\nbootstrap = \"trigram\"\nbootstrap_output = \"out/t/scored\"\n",
                "scoring.bootstrap_output",
            ),
            (
                MINIMAL.replace("output = \"out/t\"", "output = \"s3://b/t\"")
                    + "\n[scoring]\nbootstrap = \"trigram\"\n",
                "scoring.bootstrap",
            ),
            (
                MINIMAL.to_string()
                    + "\n[scoring]\nvectors = \"v.txt\"\n[bins]\ndeciles = [\"translation_perplexity\"]\n",
                "scoring.lm",
            ),
            (MINIMAL.replace("czeng16", "czeng17"), "czeng17"),
            (MINIMAL.replace("czeng16", "tsv"), "input.source_column"),
            (
                MINIMAL.replace("czeng16", "aligned"),
                "input.reference_paths",
            ),
            (MINIMAL.replace("out/t", "ftp://x/y"), "job.output"),
            (
                MINIMAL.replace("format = \"czeng16\"", "format = \"czeng16\"\nmax_chars = 1000001"),
                "input.max_chars",
            ),
            (
                MINIMAL.replace("format = \"czeng16\"", "format = \"czeng16\"\nlimit = 0"),
                "input.limit",
            ),
            (
                format!("{MINIMAL}[coordinator]\ntls_cert = \"c.pem\"\n"),
                "coordinator.tls_key",
            ),
            (
                format!("{MINIMAL}[coordinator]\nmax_message_bytes = 10\n"),
                "coordinator.max_message_bytes",
            ),
            (
                MINIMAL.replace("paths = [", "paths = [\"http://h/a.tsv\", "),
                "input.paths",
            ),
            (
                MINIMAL.replace("[model]", "[model]\ndevice = \"tpu\""),
                "model.device",
            ),
            (
                MINIMAL.to_string() + "\n[bins]\ndeciles = [\"bleu\"]\n",
                "bins.deciles",
            ),
            (
                MINIMAL.to_string() + "\n[coordinator]\nlisten = \"here\"\n",
                "coordinator.listen",
            ),
            (MINIMAL.replace("name = \"t\"", "name = 3"), "name"),
            (MINIMAL.replace("[input]", "[inptu]"), "inptu"),
            (
                MINIMAL.to_string() + "\n[scoring]\nmodel = \"m.pfe\"\nvectors = \"v.txt\"\n",
                "scoring.model",
            ),
            (
                MINIMAL.to_string() + "\n[scoring]\nvectors = \" \"\n",
                "scoring.vectors",
            ),
            (
                MINIMAL.to_string() + "\n[scoring]\nlm = \"\"\n",
                "scoring.lm",
            ),
            (
                MINIMAL.to_string() + "\n[scoring]\nlm = \"model.bin\"\n",
                "scoring.lm",
            ),
        ];
        for (text, key) in cases {
            let e = parse(&text).expect_err(key).to_string();
            assert!(e.contains(key) && e.starts_with("job.toml"), "{key}: {e}");
        }
    }

    /// `[scoring] bleu` takes the two smoothings and names itself when
    /// wrong; the default is not written into the config (a job planned
    /// before the key existed resumes).
    #[test]
    fn scoring_bleu_is_sacrebleu_or_nakov() {
        let with = |v: &str| {
            JobConfig::parse(
                &format!("{MINIMAL}\n[scoring]\nbleu = \"{v}\"\n"),
                Path::new("job.toml"),
            )
        };
        assert_eq!(
            with("nakov").unwrap().scoring.bleu,
            paraforge_core::bleu::Smoothing::Nakov
        );
        let e = with("nist").unwrap_err().to_string();
        assert!(e.contains("bleu") && e.contains("nist"), "{e}");
        let plain = JobConfig::parse(MINIMAL, Path::new("job.toml")).unwrap();
        assert!(!plain.to_toml().contains("bleu"), "{}", plain.to_toml());
    }
}

#[cfg(test)]
mod bounds {
    use super::*;

    /// `format = "pairs"` reads translations that exist: it takes no
    /// `[model]`, every other format needs one, and the pairs columns are
    /// refused elsewhere and where two keys name one column.
    #[test]
    fn pairs_input_has_no_model_and_its_own_columns() {
        let parse = |input: &str, model: &str| {
            let text = format!(
                "[job]\nname = \"t\"\noutput = \"o\"\n[input]\npaths = [\"a\"]\n{input}\n{model}"
            );
            JobConfig::parse(&text, Path::new("job.toml"))
        };
        let key = |r: Result<JobConfig, ConfigError>| match r {
            Err(ConfigError::Invalid { key, message, .. }) => (key, message),
            other => panic!("{other:?}"),
        };
        let c = parse("format = \"pairs\"", "").unwrap();
        assert!(c.model.is_none());
        assert_eq!(c.beam_candidates(), 1);
        assert_eq!(
            c.format(0),
            Format::Pairs {
                id: None,
                source: None,
                reference: 0,
                translation: 1,
                score: None
            }
        );
        let (k, m) = key(parse("format = \"pairs\"", "[model]\ndir = \"m\""));
        assert_eq!(k, "model");
        assert!(m.contains("already translated"), "{m}");
        let (k, m) = key(parse("format = \"czeng16\"", ""));
        assert_eq!(k, "model");
        assert!(m.contains("missing"), "{m}");
        let (k, _) = key(parse(
            "format = \"czeng16\"\ntranslation_column = 3",
            "[model]\ndir = \"m\"",
        ));
        assert_eq!(k, "input.translation_column");
        let (k, m) = key(parse(
            "format = \"pairs\"\ntranslation_score_column = 0",
            "",
        ));
        assert_eq!(k, "input.translation_score_column");
        assert!(m.contains("input.reference_column"), "{m}");
    }

    fn model_with(line: &str) -> Result<JobConfig, ConfigError> {
        let text = format!(
            "[job]\nname = \"t\"\noutput = \"o\"\n[input]\npaths = [\"a\"]\nformat = \"czeng16\"\n[model]\ndir = \"m\"\n{line}\n"
        );
        JobConfig::parse(&text, Path::new("job.toml"))
    }

    #[test]
    fn beam_batch_size_and_threads_have_upper_bounds_naming_key_and_limit() {
        let t = max_threads();
        for (line, key, limit) in [
            ("beam = 10000".to_string(), "model.beam", MAX_BEAM),
            (
                "batch_size = 1000000".to_string(),
                "model.batch_size",
                MAX_BATCH_SIZE,
            ),
            ("threads = 100000".to_string(), "model.threads", t),
            (format!("threads = {}", t + 1), "model.threads", t),
            ("streams = 0".to_string(), "model.streams", MAX_STREAMS),
            ("streams = 65".to_string(), "model.streams", MAX_STREAMS),
            (format!("threads = {t}\nstreams = 2"), "model.streams", t),
            // Unset streams are CUDA's default of 4 there.
            (
                format!("threads = {t}\ndevice = \"cuda\""),
                "model.streams",
                t,
            ),
        ] {
            let e = model_with(&line).expect_err(&line).to_string();
            assert!(
                e.starts_with("job.toml: `") && e.contains(key) && e.contains(&limit.to_string()),
                "{line}: {e}"
            );
        }
        for line in [
            format!("beam = {MAX_BEAM}"),
            format!("batch_size = {MAX_BATCH_SIZE}"),
            format!("threads = {t}"),
            "threads = 0".to_string(),
            format!("threads = {}\ndevice = \"cuda\"", (t / 4).max(1)),
        ] {
            model_with(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    #[test]
    fn top_k_on_takes_its_three_names_and_refuses_others_by_key() {
        assert_eq!(
            model_with("").unwrap().model.unwrap().top_k_on,
            TopKOnName::Auto
        );
        for (line, want) in [
            ("top_k_on = \"auto\"", TopKOnName::Auto),
            ("top_k_on = \"host\"", TopKOnName::Host),
            ("top_k_on = \"graph\"", TopKOnName::Graph),
        ] {
            assert_eq!(
                model_with(line).unwrap().model.unwrap().top_k_on,
                want,
                "{line}"
            );
        }
        let e = model_with("top_k_on = \"gpu\"").unwrap_err().to_string();
        assert!(e.contains("top_k_on") && e.contains("gpu"), "{e}");
    }
}

#[cfg(test)]
mod shipped {
    use super::*;

    /// The configs in pipeline-configs/ stay valid as the schema changes.
    #[test]
    fn every_shipped_config_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipeline-configs");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                JobConfig::load(&p).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 3, "found {n} configs");
    }
}
