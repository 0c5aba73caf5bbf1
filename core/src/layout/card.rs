//! The dataset cards paraforge writes (Hugging Face's `README.md`): their
//! Hub metadata and their text, for a job's output, its bins and the
//! lexicon, from what the manifests record. One owner, so that every card
//! says the same things the same way: where the pairs came from (inputs,
//! `[filters]`, the translation model, the para_score model and their
//! digests), how many rows each part holds, and what is not known (the
//! license).
//!
//! The metadata is YAML front matter whose values are written as JSON,
//! YAML's flow style: every YAML parser reads it as the Hub does, no value
//! needs YAML's own quoting rules, and [`read_front_matter`] reads it back
//! exactly (tests check cards with it).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Front matter with `fields` in order: `key: <JSON value>`, a plain word
/// where YAML reads one as itself, else JSON on one line when short, else
/// broken into one line per element with every continuation line indented
/// (a flow collection's lines must be indented under its key).
pub fn front_matter(fields: &[(&str, Value)]) -> String {
    let mut s = String::from("---\n");
    for (key, value) in fields {
        let text = match value {
            Value::String(v) if is_plain(v) => v.clone(),
            _ => yaml_safe(&flow(value, 2, 0)),
        };
        s += &format!("{key}: {text}\n");
    }
    s += "---\n";
    s
}

/// JSON text with the characters YAML forbids or reads as line breaks
/// escaped, which serde_json leaves as they are: DEL and the C1 controls
/// (PyYAML refuses DEL and folds U+0085, NEL, as a line break) and the
/// Unicode line and paragraph separators. They only occur inside strings,
/// where `\uXXXX` means the same character.
fn yaml_safe(json: &str) -> String {
    let mut s = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' => {
                s += &format!("\\u{:04x}", c as u32);
            }
            _ => s.push(c),
        }
    }
    s
}

/// `v` as JSON, each collection too long for one line (100 characters for
/// a key's value, 160 for an element) broken over lines indented `indent`
/// (its closing bracket) and `indent + 2` (its elements); three levels
/// deep and more only past [`DEEP_LINE`], so that a bin's config or a
/// `model-index` result is one line and a job's list of files is not.
fn flow(v: &Value, indent: usize, depth: usize) -> String {
    let line = match depth {
        0 => 100,
        1 | 2 => 160,
        _ => DEEP_LINE,
    };
    let compact = serde_json::to_string(v).unwrap_or_default();
    if compact.len() <= line {
        return compact;
    }
    let (pad, inner) = (" ".repeat(indent), " ".repeat(indent + 2));
    let items: Vec<String> = match v {
        Value::Array(a) => a.iter().map(|x| flow(x, indent + 2, depth + 1)).collect(),
        Value::Object(o) => o
            .iter()
            .map(|(k, x)| {
                let x = flow(x, indent + 2, depth + 1);
                format!("{}: {x}", Value::String(k.clone()))
            })
            .collect(),
        _ => return compact,
    };
    let (open, close) = if v.is_array() { ('[', ']') } else { ('{', '}') };
    format!(
        "{open}\n{inner}{}\n{pad}{close}",
        items.join(&format!(",\n{inner}"))
    )
}

/// The longest line of a collection three levels deep or more.
const DEEP_LINE: usize = 1000;

/// A string YAML reads as itself without quotes: no YAML 1.1 boolean or
/// null (`no` is also Norwegian's language code), no number.
fn is_plain(v: &str) -> bool {
    const SPECIAL: [&str; 11] = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", "",
    ];
    v.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !SPECIAL.contains(&v)
}

/// The front matter of a card that [`front_matter`] wrote, key by key, and
/// the text after it; `None` when the card does not start with one or a
/// value is not what it writes. Not a YAML reader: it reads these cards.
pub fn read_front_matter(card: &str) -> Option<(Vec<(String, Value)>, &str)> {
    let rest = card.strip_prefix("---\n")?;
    let end = rest.find("\n---\n")?;
    let (block, body) = (&rest[..end + 1], &rest[end + 5..]);
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        match (line.starts_with(' '), fields.last_mut()) {
            (true, Some((_, v))) => {
                v.push('\n');
                v.push_str(line);
            }
            (true, None) => return None,
            (false, _) => {
                let (k, v) = line.split_once(": ")?;
                fields.push((k.to_string(), v.to_string()));
            }
        }
    }
    let parsed = fields
        .into_iter()
        .map(|(k, v)| {
            let value = serde_json::from_str(&v).unwrap_or(Value::String(v));
            (k, value)
        })
        .collect();
    Some((parsed, body))
}

/// The Hub's size category of a dataset of `rows` rows.
pub fn size_category(rows: u64) -> &'static str {
    const BOUNDS: [(u64, &str); 10] = [
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
        (10_000_000, "1M<n<10M"),
        (100_000_000, "10M<n<100M"),
        (1_000_000_000, "100M<n<1B"),
        (10_000_000_000, "1B<n<10B"),
        (100_000_000_000, "10B<n<100B"),
        (1_000_000_000_000, "100B<n<1T"),
    ];
    BOUNDS
        .iter()
        .find(|(bound, _)| rows < *bound)
        .map_or("n>1T", |(_, c)| c)
}

/// What a dataset card's metadata says besides its configs.
#[derive(Debug, Clone, Default)]
pub struct CardMeta {
    pub pretty_name: String,
    /// Hub task categories (`sentence-similarity`, ...); none for a lexicon.
    pub task_categories: Vec<String>,
    /// ISO 639 codes, as far as known.
    pub languages: Vec<String>,
    pub tags: Vec<String>,
    /// Rows, for `size_categories`.
    pub rows: u64,
}

/// Why every card says `license: other`.
const LICENSE: &str = "## License\n\nNot known to paraforge: the rows derive from the input \
bitext (and the models that translated and scored it), whose terms decide what may be done \
with them. The metadata says `license: other` until whoever publishes the data sets the \
input's license.\n";

/// A dataset card: the metadata (`configs` are (name, paths or globs
/// relative to the directory), the first the default), `about` (Markdown),
/// then the license note every card ends with.
pub fn dataset_card(meta: &CardMeta, configs: &[(String, Vec<String>)], about: &str) -> String {
    let configs: Vec<Value> = configs
        .iter()
        .enumerate()
        .map(|(i, (name, paths))| {
            let mut c = json!({"config_name": name});
            if i == 0 {
                c["default"] = json!(true);
            }
            let path = match paths.as_slice() {
                [one] => json!(one),
                many => json!(many),
            };
            c["data_files"] = json!([{"split": "train", "path": path}]);
            c
        })
        .collect();
    let mut fields: Vec<(&str, Value)> = vec![("pretty_name", json!(meta.pretty_name))];
    if !meta.languages.is_empty() {
        fields.push(("language", json!(meta.languages)));
    }
    fields.push(("license", json!("other")));
    fields.push(("size_categories", json!([size_category(meta.rows)])));
    if !meta.task_categories.is_empty() {
        fields.push(("task_categories", json!(meta.task_categories)));
    }
    fields.push(("tags", json!(meta.tags)));
    fields.push(("configs", Value::Array(configs)));
    let mut s = front_matter(&fields);
    s += "\n";
    s += about;
    if !about.ends_with("\n\n") {
        s += "\n";
    }
    s += LICENSE;
    s
}

/// A job manifest's translation model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestModel {
    /// `model.dir` as the config names it.
    pub dir: String,
    /// `paraforge_core::model_digest` of its files, as every file's footer
    /// has it.
    pub sha256: String,
}

/// What a job translated: `[input]`'s format and files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestInput {
    pub format: String,
    pub paths: Vec<String>,
    /// The reference files of an `aligned` input.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_paths: Vec<String>,
}

/// A para_score model as the files' footers name it (`paraforge.para_scorer*`),
/// and how many of the job's pairs files name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestScorer {
    pub file: String,
    pub kind: String,
    /// Its fingerprint: the SHA-256 of every file that decides its
    /// embeddings (`paraforge_scorer::fingerprint`).
    pub sha256: String,
    pub files: u64,
}

/// The languages of a job's two sides (ISO 639 codes) and where they were
/// read; each `None` when not known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Languages {
    /// The side that was translated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The references, and so the translations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub from: String,
}

impl Languages {
    pub fn is_empty(&self) -> bool {
        self.source.is_none() && self.reference.is_none()
    }

    /// Reference first: the language of the pairs; as the Hub's
    /// `language` has them ([`hub_language`]).
    fn codes(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .reference
            .iter()
            .chain(&self.source)
            .map(|c| hub_language(c))
            .collect();
        v.dedup();
        v
    }
}

/// ISO 639-3 codes (as `[filters]` and its detector, whatlang, name
/// languages) and their ISO 639-1 codes: every language whatlang detects
/// has one.
#[rustfmt::skip]
const ISO639_3_TO_1: [(&str, &str); 70] = [
    ("afr", "af"), ("aka", "ak"), ("amh", "am"), ("ara", "ar"), ("aze", "az"),
    ("bel", "be"), ("ben", "bn"), ("bul", "bg"), ("cat", "ca"), ("ces", "cs"),
    ("cmn", "zh"), ("cym", "cy"), ("dan", "da"), ("deu", "de"), ("ell", "el"), ("eng", "en"),
    ("epo", "eo"), ("est", "et"), ("fin", "fi"), ("fra", "fr"), ("guj", "gu"),
    ("heb", "he"), ("hin", "hi"), ("hrv", "hr"), ("hun", "hu"), ("hye", "hy"),
    ("ind", "id"), ("ita", "it"), ("jav", "jv"), ("jpn", "ja"), ("kan", "kn"),
    ("kat", "ka"), ("khm", "km"), ("kor", "ko"), ("lat", "la"), ("lav", "lv"),
    ("lit", "lt"), ("mal", "ml"), ("mar", "mr"), ("mkd", "mk"), ("mya", "my"),
    ("nep", "ne"), ("nld", "nl"), ("nob", "nb"), ("ori", "or"), ("pan", "pa"),
    ("pes", "fa"), ("pol", "pl"), ("por", "pt"), ("ron", "ro"), ("rus", "ru"),
    ("sin", "si"), ("slk", "sk"), ("slv", "sl"), ("sna", "sn"), ("spa", "es"),
    ("srp", "sr"), ("swe", "sv"), ("tam", "ta"), ("tel", "te"), ("tgl", "tl"),
    ("tha", "th"), ("tuk", "tk"), ("tur", "tr"), ("ukr", "uk"), ("urd", "ur"),
    ("uzb", "uz"), ("vie", "vi"), ("yid", "yi"), ("zul", "zu"),
];

/// A language code as the Hub's `language` metadata wants it: ISO 639-1
/// where the language has one, else the code as given (lower case).
pub fn hub_language(code: &str) -> String {
    let code = code.trim().to_ascii_lowercase();
    ISO639_3_TO_1
        .iter()
        .find(|(three, _)| *three == code)
        .map_or(code, |(_, one)| one.to_string())
}

/// The language a model's card says it reads (the `language` of its
/// README's front matter, as `paraforge train` writes it from its data's
/// manifest), if the card says.
pub fn card_language(model: &Path) -> Option<String> {
    // A directory's README.md; a file's `<file>.README.md` as `paraforge
    // train` writes it, else its directory's README.md.
    let card = if model.is_dir() {
        std::fs::read_to_string(model.join(super::CARD_FILE)).ok()?
    } else {
        let mut beside = model.as_os_str().to_os_string();
        beside.push(".README.md");
        match std::fs::read_to_string(beside) {
            Ok(card) => card,
            Err(_) => std::fs::read_to_string(model.parent()?.join(super::CARD_FILE)).ok()?,
        }
    };
    let front = card.strip_prefix("---\n")?.split("\n---").next()?;
    let line = front.lines().find_map(|l| l.strip_prefix("language:"))?;
    let langs: Vec<String> = serde_json::from_str(line.trim()).ok()?;
    langs.into_iter().next()
}

/// Refuses a scorer whose card names another language than the data's
/// references (the side para_score reads): its scores would be
/// meaningless. `whence` says where the data's language was read.
/// Either language unknown: let through.
pub fn check_language(
    model: &Path,
    data_language: Option<&str>,
    whence: &str,
) -> Result<(), String> {
    let (Some(scorer), Some(data)) = (card_language(model), data_language) else {
        return Ok(());
    };
    let data = hub_language(data);
    if hub_language(&scorer) == data {
        return Ok(());
    }
    Err(format!(
        "{}: its card says it reads {scorer:?}, but the data's references are {data:?} ({whence}): para_score would measure nothing. Learn a scorer from the data after the job (paraforge rescore --bootstrap trigram) or give one trained on {data:?} text",
        model.display()
    ))
}

/// What a job's `_manifest.json` records about the corpus, as cards read
/// it. Manifests from before a field existed read with it empty.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct JobFacts {
    #[serde(default)]
    pub job: String,
    #[serde(default)]
    pub paraforge_version: String,
    #[serde(default)]
    pub shards_total: u64,
    #[serde(default)]
    pub pairs: u64,
    #[serde(default)]
    pub beam_candidates: u64,
    #[serde(default)]
    pub model: Option<ManifestModel>,
    #[serde(default)]
    pub rejects: u64,
    #[serde(default)]
    pub rejects_by_reason: BTreeMap<String, u64>,
    #[serde(default)]
    pub input: Option<ManifestInput>,
    /// `[filters]` as set; rules left out are off. `None` in manifests
    /// from before paraforge recorded it (as `para_scorers`).
    #[serde(default)]
    pub filters: Option<BTreeMap<String, Value>>,
    #[serde(default)]
    pub para_scorers: Option<Vec<ManifestScorer>>,
    /// Pairs files whose footer could not be read for its scorer.
    #[serde(default)]
    pub para_scorer_footers_unread: u64,
    #[serde(default)]
    pub languages: Languages,
    /// The pairs files, as the manifest lists them.
    #[serde(default)]
    pub files: Vec<JobFile>,
}

/// A pairs file of a job's manifest, as cards read it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct JobFile {
    pub path: String,
}

impl JobFacts {
    pub fn parse(bytes: &[u8]) -> Result<JobFacts, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not a job manifest: {e}"))
    }
}

/// A job's source and translation, its rules and its scorer, as Markdown
/// list items.
fn job_source(f: &JobFacts) -> String {
    let mut s = String::new();
    let code = |v: &[String]| {
        v.iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &f.input {
        Some(i) => {
            s += &format!("- input ({}): {}\n", i.format, code(&i.paths));
            if !i.reference_paths.is_empty() {
                s += &format!("- references: {}\n", code(&i.reference_paths));
            }
        }
        None => s += "- input: not recorded (a manifest from before paraforge recorded it)\n",
    }
    if !f.languages.is_empty() {
        let name = |l: &Option<String>| l.clone().unwrap_or_else(|| "not known".into());
        s += &format!(
            "- languages: source `{}`, reference and translation `{}` ({})\n",
            name(&f.languages.source),
            name(&f.languages.reference),
            f.languages.from
        );
    }
    match &f.model {
        Some(m) => {
            s += &format!(
                "- translation model: `{}`, model digest `{}` (SHA-256 over every file that \
                 decides a translation, as every file's footer has it in \
                 `paraforge.model_sha256`)",
                m.dir, m.sha256
            );
            if f.beam_candidates > 1 {
                s += &format!(
                    "; the {} best hypotheses of each beam, one row each (`candidate_rank`)",
                    f.beam_candidates
                );
            }
            s += "\n";
        }
        None => s += "- translation model: none (the input held its translations)\n",
    }
    match &f.filters {
        None => {
            s += "- filters: not recorded (a manifest from before paraforge recorded them; its \
                  `config` has the job's)\n"
        }
        Some(rules) if rules.is_empty() => s += "- filters: none (`[filters]` not set)\n",
        Some(rules) => {
            let rules: Vec<String> = rules.iter().map(|(k, v)| format!("`{k} = {v}`")).collect();
            s += &format!(
                "- filters (`[filters]`, before translation): {}\n",
                rules.join(", ")
            );
        }
    }
    s += &scorers(
        f.para_scorers.as_deref(),
        f.files.len() as u64,
        f.para_scorer_footers_unread,
    );
    s
}

/// What para_score is, from the scorers the `files` pairs files' footers
/// name and the footers that could not be read: one model only when every
/// file names it.
fn scorers(list: Option<&[ManifestScorer]>, files: u64, unread: u64) -> String {
    let Some(list) = list else {
        return "- para_score: not recorded (a manifest from before paraforge recorded it; the \
                files' footers name it in `paraforge.para_scorer*`)\n"
            .into();
    };
    let named: u64 = list.iter().map(|m| m.files).sum();
    // A manifest that lists no files still counts those that name a model.
    let files = files.max(named + unread);
    match list {
        [] if unread == 0 => {
            "- para_score: none (no `[scoring]` model or vectors; the column is null)\n".into()
        }
        [one] if one.files == files => format!(
            "- para_score: the cosine of `{}` (kind: {}), fingerprint `{}`\n",
            one.file, one.kind, one.sha256
        ),
        some => {
            let mut s = "- para_score, as each file's footer names its model:\n".to_string();
            for m in some {
                s += &format!(
                    "  - `{}` (kind: {}), fingerprint `{}`: {} of {files} files\n",
                    m.file, m.kind, m.sha256, m.files
                );
            }
            let none = files.saturating_sub(named + unread);
            if none > 0 {
                s += &format!("  - no model (the column is null): {none} of {files} files\n");
            }
            if unread > 0 {
                s += &format!(
                    "  - not known: {unread} of {files} files, whose footer could not be read\n"
                );
            }
            s
        }
    }
}

/// The card of a job's output, from its manifest as written: the pairs as
/// one config, the files the manifest lists (a glob would also take a
/// file the job did not write that sits among them).
pub fn job_card(f: &JobFacts) -> String {
    let rejects = if f.rejects_by_reason.is_empty() {
        String::new()
    } else {
        let by: Vec<String> = f
            .rejects_by_reason
            .iter()
            .map(|(code, n)| format!("{code} {n}"))
            .collect();
        format!(" ({})", by.join(", "))
    };
    let columns: Vec<String> = crate::schema::schema()
        .fields()
        .iter()
        .map(|c| format!("`{}`", c.name()))
        .collect();
    let about = format!(
        "# {job}: paraphrase pairs by back-translation\n\n\
         ParaNMT-style paraphrase pairs (Wieting and Gimpel, 2018) written by `paraforge run` \
         (job `{job}`, paraforge {version}): each sentence of the source side translated by the \
         translation model, paired with its reference and scored.\n\n\
         ## Source\n\n{source}\n\
         ## Rows\n\n\
         | part | rows |\n|---|---:|\n\
         | pairs (config `default`, split `train`) | {pairs} |\n\
         | input lines rejected (`_rejects/`) | {rej}{rejects} |\n\n\
         {shards} shards; `_manifest.json` lists every file with its rows and SHA-256.\n\n\
         ## Columns\n\n{columns}: docs/DEFINITIONS.md in paraforge defines each.\n\n\
         ## This card\n\n\
         paraforge writes it as `_README.md`, not `README.md`: pyarrow, Spark and other \
         Hive-style readers take every file of the directory whose name does not start with \
         `_` or `.` for data, and would fail on a `README.md`. To publish the pairs on the \
         Hugging Face Hub, upload it as the repository's `README.md` with the `shard=*` \
         folders: its `configs` then name the pairs.\n\n",
        job = f.job,
        version = f.paraforge_version,
        source = job_source(f),
        pairs = f.pairs,
        rej = f.rejects,
        shards = f.shards_total,
        columns = columns.join(", "),
    );
    let meta = CardMeta {
        pretty_name: format!("{} (paraforge)", f.job),
        task_categories: vec!["sentence-similarity".into(), "text2text-generation".into()],
        languages: f.languages.codes(),
        tags: vec![
            "paraphrase".into(),
            "back-translation".into(),
            "paraforge".into(),
        ],
        rows: f.pairs,
    };
    let mut files: Vec<String> = f.files.iter().map(|x| x.path.clone()).collect();
    if files.is_empty() {
        // A manifest without its list: the job's layout.
        files.push("shard=*/*.parquet".into());
    }
    dataset_card(&meta, &[("default".into(), files)], &about)
}

/// A step between a dataset and the job whose pairs it holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `paraforge filter`: rows dropped by bounds on scores.
    Filter { dir: String },
    /// `paraforge rescore`: para_score by another model.
    Rescore { dir: String, scorer: ManifestScorer },
    /// `paraforge bin`: the data is one of its partitions.
    Bins { dir: String },
    /// `paraforge lexicon`: word pairs counted from the pairs.
    Lexicon { dir: String },
}

/// Where a dataset's pairs came from, as far as the manifests on this
/// machine say ([`crate::dataset::trace`]): the commands between it and its job (nearest first) and
/// the job's facts, when its manifest was found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Provenance {
    pub steps: Vec<Step>,
    /// The job's output directory, as the last manifest named it.
    pub job_dir: Option<String>,
    pub job: Option<JobFacts>,
}

impl Provenance {
    /// The languages the job recorded.
    pub fn languages(&self) -> Vec<String> {
        self.job
            .as_ref()
            .map(|j| j.languages.codes())
            .unwrap_or_default()
    }

    /// The language of the references and translations: the side a
    /// paraphrase model trained on the pairs reads.
    pub fn reference_language(&self) -> Option<String> {
        self.job
            .as_ref()
            .and_then(|j| j.languages.reference.as_deref())
            .map(hub_language)
    }

    /// Names the directory `dir` as `name` wherever the trace found it: a
    /// local copy staged from an object store is named by its URL.
    pub fn rename_dir(&mut self, from: &str, name: &str) {
        let rename = |d: &mut String| {
            if d == from {
                *d = name.to_string();
            }
        };
        if let Some(d) = &mut self.job_dir {
            rename(d);
        }
        for step in &mut self.steps {
            match step {
                Step::Filter { dir }
                | Step::Rescore { dir, .. }
                | Step::Bins { dir }
                | Step::Lexicon { dir } => rename(dir),
            }
        }
    }

    /// The job's output directory, if the trace reached it.
    pub fn corpus(&self) -> Option<&str> {
        self.job_dir.as_deref()
    }

    /// A Markdown section: the commands between the data and its job, then
    /// the job's source, rules and scorer; the nearest rescore's scorer is
    /// the one para_score now holds.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        for step in &self.steps {
            s += &match step {
                Step::Filter { dir } => {
                    format!(
                        "- `paraforge filter` at `{dir}` (its `_manifest.json` has the rules)\n"
                    )
                }
                Step::Rescore { dir, scorer } => format!(
                    "- `paraforge rescore` at `{dir}`: para_score by `{}` (kind: {}), fingerprint `{}`\n",
                    scorer.file, scorer.kind, scorer.sha256
                ),
                Step::Bins { dir } => format!("- a bin of `paraforge bin` at `{dir}`\n"),
                Step::Lexicon { dir } => {
                    format!("- `paraforge lexicon` at `{dir}`: word pairs counted from the pairs below\n")
                }
            };
        }
        match (&self.job, &self.job_dir) {
            (Some(j), Some(dir)) => {
                let job = if j.job.is_empty() {
                    "a job".to_string()
                } else {
                    format!("job `{}`", j.job)
                };
                let pairs = if j.pairs > 0 {
                    format!(" ({} pairs)", j.pairs)
                } else {
                    String::new()
                };
                s += &format!("- the pairs of {job} at `{dir}`{pairs}:\n");
                let rescored = self
                    .steps
                    .iter()
                    .any(|st| matches!(st, Step::Rescore { .. }));
                for line in job_source(j).lines() {
                    if rescored && line.starts_with("- para_score") {
                        s += "  - para_score at translation time (replaced by the rescore above):\n";
                        s += &format!("    {}\n", line.trim_start_matches("- para_score: "));
                    } else {
                        s += &format!("  {line}\n");
                    }
                }
            }
            _ => s += "- the job that translated the pairs: not found from here (its manifest is not a local directory the input chain names)\n",
        }
        s
    }
}

/// What a bins card says.
pub struct BinsCard<'a> {
    /// `paraforge bin --data` as given.
    pub input: &'a str,
    pub input_rows: u64,
    pub kept_rows: u64,
    pub dropped_duplicates: u64,
    pub dropped_length: u64,
    /// (config name, glob, rows), sorted by name.
    pub configs: &'a [(String, String, u64)],
    pub provenance: &'a Provenance,
}

/// The card of `paraforge bin`'s output: every bin a config, with its rows.
pub fn bins_card(b: &BinsCard) -> String {
    let mut rows = String::from("| config | rows |\n|---|---:|\n");
    for (name, _, n) in b.configs {
        rows += &format!("| `{name}` | {n} |\n");
    }
    let about = format!(
        "# Bins of {input}\n\n\
         paraforge's bins (`paraforge bin`): the para_score ranges (`range-LABEL`), ten folds \
         per ranked score (`decile-SCORE-FOLD`, fold 0 the lowest tenth) and the training \
         sample (`train`). `_manifest.json` has the counts and boundaries.\n\n\
         ## Source\n\n{source}\n\
         ## Rows\n\n\
         {kept} of the input's {all} rows binned ({dup} dropped as duplicates, {len} for their \
         length); every config holds a part of them, the ranges and each score's folds all \
         of them once.\n\n{rows}\n",
        input = b.input,
        source = b.provenance.markdown(),
        kept = b.kept_rows,
        all = b.input_rows,
        dup = b.dropped_duplicates,
        len = b.dropped_length,
    );
    let configs: Vec<(String, Vec<String>)> = b
        .configs
        .iter()
        .map(|(n, g, _)| (n.clone(), vec![g.clone()]))
        .collect();
    let meta = CardMeta {
        pretty_name: format!("Bins of {}", b.input),
        task_categories: vec!["sentence-similarity".into(), "text2text-generation".into()],
        languages: b.provenance.languages(),
        tags: vec![
            "paraphrase".into(),
            "back-translation".into(),
            "paraforge".into(),
        ],
        rows: b.kept_rows,
    };
    dataset_card(&meta, &configs, &about)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bundled scorer's card says English; it is refused for Czech
    /// references (by their three-letter code too), let through for
    /// English or an unknown language, and a model without a card is let
    /// through.
    #[test]
    fn a_scorer_of_another_language_is_refused_by_its_card() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let bundled = root.join("models/scorer-trigram");
        assert_eq!(card_language(&bundled).as_deref(), Some("en"));
        assert_eq!(
            card_language(&bundled.join("model.pfe")).as_deref(),
            Some("en")
        );
        for cs in ["cs", "ces"] {
            let e = check_language(&bundled, Some(cs), "its manifest's languages").unwrap_err();
            assert!(
                e.contains("scorer-trigram")
                    && e.contains("\"cs\" (its manifest's languages)")
                    && e.contains("--bootstrap"),
                "{e}"
            );
        }
        assert!(check_language(&bundled, Some("eng"), "").is_ok());
        assert!(check_language(&bundled, None, "").is_ok());
        let bare = tempfile::tempdir().unwrap();
        assert_eq!(card_language(bare.path()), None);
        assert!(check_language(bare.path(), Some("cs"), "").is_ok());
    }

    #[test]
    fn front_matter_reads_back_and_sizes_follow_the_hub() {
        let fields = [
            ("library_name", json!("paraforge")),
            ("language", json!(["no"])),
            ("license", json!("other")),
            ("odd", json!("a: b # c")),
            // YAML forbids DEL and C1 controls and reads NEL and U+2028 as
            // line breaks; serde_json leaves all of them as they are.
            (
                "controls",
                json!(["a\u{7f}b\u{85}c\u{9f}d\u{2028}e", "\u{80}"]),
            ),
            (
                "model-index",
                json!([{"name": "m", "results": [{"metrics": [{"type": "pearson", "value": 72.13}], "dataset": {"name": "a \"quoted\" name with a long tail to make it pretty-printed"}}]}]),
            ),
        ];
        let card = front_matter(&fields) + "\n# Title\n";
        assert!(card.contains("\nlibrary_name: paraforge\n"), "{card}");
        assert!(card.contains("\nodd: \"a: b # c\"\n"), "{card}");
        assert!(
            card.contains(r#"controls: ["a\u007fb\u0085c\u009fd\u2028e","\u0080"]"#),
            "{card}"
        );
        assert!(!card.contains(|c: char| ('\u{7f}'..='\u{9f}').contains(&c) || c == '\u{2028}'));
        // Continuation lines of a long value stay under their key.
        let mi = card.split("model-index: ").nth(1).unwrap();
        assert!(mi
            .lines()
            .skip(1)
            .take_while(|l| *l != "---")
            .all(|l| l.starts_with("  ")));
        let (back, body) = read_front_matter(&card).unwrap();
        assert_eq!(body, "\n# Title\n");
        assert_eq!(back.len(), fields.len());
        for ((k, v), (k2, v2)) in fields.iter().zip(&back) {
            assert_eq!((*k, v), (k2.as_str(), v2));
        }
        assert!(read_front_matter("# no front matter\n").is_none());
        for (rows, cat) in [
            (0, "n<1K"),
            (999, "n<1K"),
            (1_000, "1K<n<10K"),
            (4_068, "1K<n<10K"),
            (84_612, "10K<n<100K"),
            (51_400_000, "10M<n<100M"),
            (u64::MAX, "n>1T"),
        ] {
            assert_eq!(size_category(rows), cat, "{rows}");
        }
    }

    #[test]
    fn a_job_card_says_what_its_manifest_records() {
        let m = br#"{"kind":"job","job":"demo","paraforge_version":"0.1.0","shards_total":9,
            "pairs":4068,"beam_candidates":1,"rejects":3,"rejects_by_reason":{"columns":3},
            "model":{"dir":"models/demo-cs-en","sha256":"abcd"},
            "input":{"format":"czeng16","paths":["data/sample/x.tsv"]},
            "filters":{"min_tokens":3,"source_lang":"ces"},
            "para_scorers":[{"file":"models/scorer-trigram/model.pfe","kind":"TRIGRAM","sha256":"bb9c","files":2}],
            "languages":{"source":"ces","reference":"eng","from":"[filters]"},
            "files":[{"path":"shard=0/a.parquet","rows":1},{"path":"shard=1/b.parquet","rows":2}]}"#;
        let f = JobFacts::parse(m).unwrap();
        let card = job_card(&f);
        let (meta, body) = read_front_matter(&card).unwrap();
        let get = |k: &str| meta.iter().find(|(key, _)| key == k).unwrap().1.clone();
        assert_eq!(get("language"), json!(["en", "cs"]));
        assert_eq!(get("size_categories"), json!(["1K<n<10K"]));
        assert_eq!(get("license"), json!("other"));
        // The files the manifest lists, not a glob that would take any
        // other file among them.
        assert_eq!(
            get("configs")[0]["data_files"][0]["path"],
            json!(["shard=0/a.parquet", "shard=1/b.parquet"])
        );
        for want in [
            "`data/sample/x.tsv`",
            "`min_tokens = 3`",
            "`source_lang = \"ces\"`",
            "`models/demo-cs-en`, model digest `abcd`",
            "para_score: the cosine of `models/scorer-trigram/model.pfe` (kind: TRIGRAM), fingerprint `bb9c`",
            "| 4068 |",
            "| 3 (columns 3) |",
            "## License",
        ] {
            assert!(body.contains(want), "{want} not in\n{body}");
        }
        // A manifest from before these fields still makes a card, which says
        // what it does not know rather than "none".
        let old = job_card(&JobFacts::parse(br#"{"kind":"job","job":"old","pairs":5}"#).unwrap());
        for want in [
            "input: not recorded",
            "filters: not recorded",
            "para_score: not recorded",
        ] {
            assert!(old.contains(want), "{want} not in\n{old}");
        }
    }
}
