//! `paraforge filter`: bounds on any numeric column of a scored dataset
//! (the filters of Wieting et al. (2017) on the scored corpus: n-gram overlap below 0.6-0.7,
//! sentence BLEU, perplexity, translation cost, lengths), written as a new
//! dataset with the same file layout and a `_manifest.json` saying what was
//! kept and which rule dropped the rest. The input is only read; a job
//! output without `_SUCCESS` is refused (`paraforge_core::dataset`).
//!
//! A row is kept when it passes every rule: `min COL=V` keeps `COL >= V`,
//! `max COL=V` keeps `COL <= V`; a null or NaN value passes no rule on its
//! column. A dropped row is counted under the first rule it fails, in the
//! order the rules were given (`dropped`); `failed` counts every row a
//! rule fails, whatever the others say.

use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_array::{Array, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array};
use arrow_select::filter::filter_record_batch;
use paraforge_core::schema::{DataError, PairReader};

use crate::output::{NewDataset, OutputError};
use crate::rewrite::{rewrite, At, Rewrite};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Min,
    Max,
}

/// One bound on one column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    pub bound: Side,
    pub column: String,
    pub value: f64,
}

impl Rule {
    /// Parses `COL=V` (as `--min`/`--max` take it).
    pub fn parse(bound: Side, text: &str) -> Result<Rule, FilterError> {
        let flag = match bound {
            Side::Min => "--min",
            Side::Max => "--max",
        };
        let bad = |why: &str| FilterError::BadRule(format!("{flag} {text:?}: {why}"));
        let (c, v) = text
            .split_once('=')
            .ok_or_else(|| bad("expected COLUMN=VALUE"))?;
        let value: f64 = v
            .trim()
            .parse()
            .map_err(|_| bad("the value is not a number"))?;
        if value.is_nan() {
            return Err(bad("the value is not a number"));
        }
        let column = c.trim().to_string();
        if column.is_empty() {
            return Err(bad("no column"));
        }
        Ok(Rule {
            bound,
            column,
            value,
        })
    }

    /// How the manifest names it: `min sentence_bleu=10`.
    pub fn label(&self) -> String {
        let b = match self.bound {
            Side::Min => "min",
            Side::Max => "max",
        };
        format!("{b} {}={}", self.column, self.value)
    }

    fn passes(&self, x: Option<f64>) -> bool {
        match x {
            Some(x) if !x.is_nan() => match self.bound {
                Side::Min => x >= self.value,
                Side::Max => x <= self.value,
            },
            _ => false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("{0}")]
    BadRule(String),
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("{input}: the dataset has no rows to filter")]
    Empty { input: PathBuf },
}

/// One rule's counts.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RuleCount {
    pub rule: String,
    #[serde(flatten)]
    pub spec: Rule,
    /// Rows this rule was the first to fail.
    pub dropped: u64,
    /// Rows failing this rule at all.
    pub failed: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FilteredFile {
    pub path: String,
    pub rows: u64,
    pub input_rows: u64,
    pub sha256: String,
}

/// `_manifest.json` of a filtered dataset.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FilterManifest {
    /// Always `filter` (core::layout::ManifestHead).
    pub kind: paraforge_core::layout::ManifestKind,
    pub input: String,
    pub command: &'static str,
    pub input_rows: u64,
    pub kept_rows: u64,
    pub dropped_rows: u64,
    pub rules: Vec<RuleCount>,
    pub files: Vec<FilteredFile>,
}

/// A numeric column of a batch as f64 values (None for null).
fn values(batch: &RecordBatch, name: &str, path: &Path) -> Result<Vec<Option<f64>>, DataError> {
    let c = batch
        .column_by_name(name)
        .ok_or_else(|| DataError::MissingColumn {
            path: path.to_path_buf(),
            column: name.to_string(),
            expected: batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let any = c.as_any();
    let get = |i: usize| !c.is_null(i);
    let n = c.len();
    let out: Vec<Option<f64>> = if let Some(a) = any.downcast_ref::<Float32Array>() {
        (0..n).map(|i| get(i).then(|| a.value(i) as f64)).collect()
    } else if let Some(a) = any.downcast_ref::<Float64Array>() {
        (0..n).map(|i| get(i).then(|| a.value(i))).collect()
    } else if let Some(a) = any.downcast_ref::<Int32Array>() {
        (0..n).map(|i| get(i).then(|| a.value(i) as f64)).collect()
    } else if let Some(a) = any.downcast_ref::<Int64Array>() {
        (0..n).map(|i| get(i).then(|| a.value(i) as f64)).collect()
    } else {
        return Err(DataError::WrongType {
            path: path.to_path_buf(),
            column: name.to_string(),
            found: c.data_type().to_string(),
            expected: "a number".into(),
        });
    };
    Ok(out)
}

/// The footer key every filtered file records its rules under.
const FOOTER_KEY: &str = "paraforge.filter";

/// One rule's counts over a file.
#[derive(Debug, Clone, Copy, Default)]
struct Fails {
    /// Rows this rule was the first to fail.
    first: u64,
    /// Rows failing this rule at all.
    any: u64,
}

/// The rows of `batch` that pass every rule, counting each rule's failures
/// into `fails` (one per rule).
fn filter_batch(
    rules: &[Rule],
    batch: &RecordBatch,
    path: &Path,
    fails: &mut Vec<Fails>,
) -> Result<RecordBatch, FilterError> {
    fails.resize(rules.len(), Fails::default());
    let cols: Vec<Vec<Option<f64>>> = rules
        .iter()
        .map(|r| values(batch, &r.column, path))
        .collect::<Result<_, _>>()?;
    let mut keep = vec![true; batch.num_rows()];
    for (i, k) in keep.iter_mut().enumerate() {
        for (j, r) in rules.iter().enumerate() {
            if !r.passes(cols[j][i]) {
                fails[j].any += 1;
                if *k {
                    fails[j].first += 1;
                    *k = false;
                }
            }
        }
    }
    filter_record_batch(batch, &BooleanArray::from(keep)).map_err(|source| {
        FilterError::Data(DataError::Arrow {
            path: path.to_path_buf(),
            source,
        })
    })
}

/// Filters `input` (a local dataset directory or file) into `out` (a new
/// or empty directory, or with `overwrite` a finished dataset it replaces),
/// file by file; `out` appears only when complete (`crate::output`).
pub fn run(
    input: &Path,
    rules: &[Rule],
    out: &Path,
    overwrite: bool,
) -> Result<FilterManifest, FilterError> {
    if rules.is_empty() {
        return Err(FilterError::BadRule(
            "no rules (give --min COLUMN=VALUE, --max COLUMN=VALUE or a token range)".into(),
        ));
    }
    let dataset = paraforge_core::dataset::open(input)?;
    // Every rule's column must be a number: checked on the first file
    // before anything is written (every file is checked as it is read).
    let columns: Vec<&str> = rules.iter().map(|r| r.column.as_str()).collect();
    if let Some(first) = dataset.paths().first() {
        if let Some(batch) = PairReader::open(first, &columns)?.next() {
            let batch = batch?;
            for c in &columns {
                values(&batch, c, first)?;
            }
        }
    }
    let staged = NewDataset::create(out, &[input], overwrite, "filter")?;
    let labels: Vec<String> = rules.iter().map(Rule::label).collect();
    let how = Rewrite {
        columns: &columns,
        replaced: &[FOOTER_KEY],
        added: vec![(FOOTER_KEY.into(), labels.join("; "))],
        parallel: false,
    };
    let transform = || {
        |batch: RecordBatch, at: At<'_>, fails: &mut Vec<Fails>| {
            filter_batch(rules, &batch, at.path, fails)
        }
    };
    let files = rewrite(&dataset, &staged, &how, transform, &|_| {})?;
    let mut m = FilterManifest {
        kind: paraforge_core::layout::ManifestKind::Filter,
        input: input.display().to_string(),
        command: "paraforge filter",
        input_rows: 0,
        kept_rows: 0,
        dropped_rows: 0,
        rules: rules
            .iter()
            .map(|r| RuleCount {
                rule: r.label(),
                spec: r.clone(),
                dropped: 0,
                failed: 0,
            })
            .collect(),
        files: Vec::new(),
    };
    for f in files {
        for (count, fails) in m.rules.iter_mut().zip(&f.counts) {
            count.dropped += fails.first;
            count.failed += fails.any;
        }
        m.input_rows += f.input_rows;
        m.kept_rows += f.rows;
        m.files.push(FilteredFile {
            path: f.path,
            rows: f.rows,
            input_rows: f.input_rows,
            sha256: f.sha256,
        });
    }
    m.dropped_rows = m.input_rows - m.kept_rows;
    if m.input_rows == 0 {
        return Err(FilterError::Empty {
            input: input.to_path_buf(),
        });
    }
    let text = serde_json::to_string_pretty(&m).expect("manifest serializes");
    staged.publish(text.as_bytes())?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_bound_inclusively() {
        let r = Rule::parse(Side::Max, "trigram_overlap=0.7").unwrap();
        assert_eq!(r.label(), "max trigram_overlap=0.7");
        assert!(r.passes(Some(0.7)) && !r.passes(Some(0.71)) && !r.passes(None));
        let r = Rule::parse(Side::Min, " sentence_bleu = 10 ").unwrap();
        assert!(r.passes(Some(10.0)) && !r.passes(Some(9.9)) && !r.passes(Some(f64::NAN)));
        for bad in ["x", "=3", "x=abc", "x=NaN"] {
            let e = Rule::parse(Side::Min, bad).unwrap_err().to_string();
            assert!(e.starts_with("--min"), "{e}");
        }
    }
}
