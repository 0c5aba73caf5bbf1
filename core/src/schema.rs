//! The output table (docs/DEFINITIONS.md section 4): one row per scored pair, written
//! as Parquet with zstd and file-level key-value metadata naming the model,
//! its checksum, the config and the pipeline version. Every stage after the
//! worker (bins, report, training) reads it through [`PairReader`].

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float32Builder, Int32Builder, StringBuilder};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::score::PairScores;

/// Column names, in file order.
pub mod col {
    pub const ID: &str = "id";
    pub const SOURCE: &str = "source";
    pub const REFERENCE: &str = "reference";
    pub const TRANSLATION: &str = "translation";
    /// 1 for the best hypothesis of the beam, up to `model.beam_candidates`.
    pub const CANDIDATE_RANK: &str = "candidate_rank";
    pub const TRANSLATION_SCORE: &str = "translation_score";
    pub const PARA_SCORE: &str = "para_score";
    pub const UNIGRAM_OVERLAP: &str = "unigram_overlap";
    pub const BIGRAM_OVERLAP: &str = "bigram_overlap";
    pub const TRIGRAM_OVERLAP: &str = "trigram_overlap";
    pub const SENTENCE_BLEU: &str = "sentence_bleu";
    pub const TRANSLATION_PERPLEXITY: &str = "translation_perplexity";
    /// Set by `paraforge rescore --classifier`; null from the workers.
    pub const REFERENCE_PROBABILITY: &str = "reference_probability";
    pub const SOURCE_LEN: &str = "source_len";
    pub const REFERENCE_LEN: &str = "reference_len";
    pub const TRANSLATION_LEN: &str = "translation_len";
    pub const TRUNCATED: &str = "truncated";
}

/// The scores a dataset can be ranked or binned by.
pub const SCORE_COLUMNS: [&str; 8] = [
    col::PARA_SCORE,
    col::TRIGRAM_OVERLAP,
    col::TRANSLATION_SCORE,
    col::BIGRAM_OVERLAP,
    col::UNIGRAM_OVERLAP,
    col::SENTENCE_BLEU,
    col::TRANSLATION_PERPLEXITY,
    col::REFERENCE_PROBABILITY,
];

/// Metadata keys written into every Parquet file's footer.
pub mod meta {
    pub const VERSION: &str = "paraforge.version";
    pub const MODEL: &str = "paraforge.model";
    pub const MODEL_SHA256: &str = "paraforge.model_sha256";
    pub const CONFIG: &str = "paraforge.config";
    /// The model or vectors file the para_score column comes from, what it
    /// is, and its fingerprint (the SHA-256 of every file that decides its
    /// embeddings, `paraforge_scorer::fingerprint`): set by the worker
    /// where `[scoring]` names one, replaced by `paraforge rescore`.
    pub const PARA_SCORER: &str = "paraforge.para_scorer";
    pub const PARA_SCORER_KIND: &str = "paraforge.para_scorer_kind";
    pub const PARA_SCORER_SHA256: &str = "paraforge.para_scorer_sha256";
    /// With a cross-fitted scorer, k: row r was scored by the model trained
    /// without fold `fold_of(id, k)` (`paraforge_core::folds`).
    pub const PARA_SCORER_FOLDS: &str = "paraforge.para_scorer_folds";
    /// What rescore wrote before it took trained models (dropped on rescoring).
    pub const PARA_VECTORS: &str = "paraforge.para_vectors";
    pub const PARA_VECTORS_SHA256: &str = "paraforge.para_vectors_sha256";
    /// Set by `paraforge rescore --classifier`: the classifier that filled
    /// `reference_probability` and the SHA-256 of its weights.
    pub const REFERENCE_CLASSIFIER: &str = "paraforge.reference_classifier";
    pub const REFERENCE_CLASSIFIER_SHA256: &str = "paraforge.reference_classifier_sha256";
}

pub fn schema() -> SchemaRef {
    let f32n = |n: &str, nullable| Field::new(n, DataType::Float32, nullable);
    let i32n = |n: &str, nullable| Field::new(n, DataType::Int32, nullable);
    let text = |n: &str| Field::new(n, DataType::Utf8, false);
    Arc::new(Schema::new(vec![
        text(col::ID),
        text(col::SOURCE),
        text(col::REFERENCE),
        text(col::TRANSLATION),
        i32n(col::CANDIDATE_RANK, false),
        // Null where no model translated the pair (an input of pairs).
        f32n(col::TRANSLATION_SCORE, true),
        f32n(col::PARA_SCORE, true),
        f32n(col::UNIGRAM_OVERLAP, false),
        f32n(col::BIGRAM_OVERLAP, false),
        f32n(col::TRIGRAM_OVERLAP, false),
        f32n(col::SENTENCE_BLEU, false),
        f32n(col::TRANSLATION_PERPLEXITY, true),
        f32n(col::REFERENCE_PROBABILITY, true),
        // The model's source tokens: null without a model.
        i32n(col::SOURCE_LEN, true),
        i32n(col::REFERENCE_LEN, false),
        i32n(col::TRANSLATION_LEN, false),
        Field::new(col::TRUNCATED, DataType::Boolean, false),
    ]))
}

/// One output row, owned.
#[derive(Debug, Clone, PartialEq)]
pub struct PairRow {
    pub id: String,
    pub source: String,
    pub reference: String,
    pub translation: String,
    /// The hypothesis's place in the beam's finished list, 1 = best.
    pub candidate_rank: i32,
    /// The model's score; none where the input held the translation
    /// without one.
    pub translation_score: Option<f32>,
    /// Source tokens as the model counts them; none without a model.
    pub source_len: Option<i32>,
    pub truncated: bool,
    pub scores: PairScores,
}

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("{path}: {source}")]
    Arrow {
        path: PathBuf,
        #[source]
        source: arrow_schema::ArrowError,
    },
    #[error("{path}: missing column {column:?} (a paraforge output file has {expected})")]
    MissingColumn {
        path: PathBuf,
        column: String,
        expected: String,
    },
    #[error("{path}: column {column:?} has type {found}, expected {expected}")]
    WrongType {
        path: PathBuf,
        column: String,
        found: String,
        expected: String,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

impl DataError {
    pub fn io(path: &Path, source: std::io::Error) -> DataError {
        DataError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Builds record batches of output rows.
pub struct RowsBuilder {
    id: StringBuilder,
    source: StringBuilder,
    reference: StringBuilder,
    translation: StringBuilder,
    candidate_rank: Int32Builder,
    translation_score: Float32Builder,
    para_score: Float32Builder,
    unigram: Float32Builder,
    bigram: Float32Builder,
    trigram: Float32Builder,
    bleu: Float32Builder,
    perplexity: Float32Builder,
    reference_probability: Float32Builder,
    source_len: Int32Builder,
    reference_len: Int32Builder,
    translation_len: Int32Builder,
    truncated: BooleanBuilder,
    len: usize,
}

impl Default for RowsBuilder {
    fn default() -> Self {
        RowsBuilder {
            id: StringBuilder::new(),
            source: StringBuilder::new(),
            reference: StringBuilder::new(),
            translation: StringBuilder::new(),
            candidate_rank: Int32Builder::new(),
            translation_score: Float32Builder::new(),
            para_score: Float32Builder::new(),
            unigram: Float32Builder::new(),
            bigram: Float32Builder::new(),
            trigram: Float32Builder::new(),
            bleu: Float32Builder::new(),
            perplexity: Float32Builder::new(),
            reference_probability: Float32Builder::new(),
            source_len: Int32Builder::new(),
            reference_len: Int32Builder::new(),
            translation_len: Int32Builder::new(),
            truncated: BooleanBuilder::new(),
            len: 0,
        }
    }
}

impl RowsBuilder {
    pub fn push(&mut self, r: &PairRow) {
        self.id.append_value(&r.id);
        self.source.append_value(&r.source);
        self.reference.append_value(&r.reference);
        self.translation.append_value(&r.translation);
        self.candidate_rank.append_value(r.candidate_rank);
        self.translation_score.append_option(r.translation_score);
        self.para_score.append_option(r.scores.para_score);
        self.unigram.append_value(r.scores.unigram_overlap);
        self.bigram.append_value(r.scores.bigram_overlap);
        self.trigram.append_value(r.scores.trigram_overlap);
        self.bleu.append_value(r.scores.sentence_bleu);
        self.perplexity
            .append_option(r.scores.translation_perplexity);
        self.reference_probability
            .append_option(r.scores.reference_probability);
        self.source_len.append_option(r.source_len);
        self.reference_len
            .append_value(r.scores.reference_len as i32);
        self.translation_len
            .append_value(r.scores.translation_len as i32);
        self.truncated.append_value(r.truncated);
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rows so far as a batch; the builder starts empty again.
    pub fn finish(&mut self) -> RecordBatch {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(self.id.finish()),
            Arc::new(self.source.finish()),
            Arc::new(self.reference.finish()),
            Arc::new(self.translation.finish()),
            Arc::new(self.candidate_rank.finish()),
            Arc::new(self.translation_score.finish()),
            Arc::new(self.para_score.finish()),
            Arc::new(self.unigram.finish()),
            Arc::new(self.bigram.finish()),
            Arc::new(self.trigram.finish()),
            Arc::new(self.bleu.finish()),
            Arc::new(self.perplexity.finish()),
            Arc::new(self.reference_probability.finish()),
            Arc::new(self.source_len.finish()),
            Arc::new(self.reference_len.finish()),
            Arc::new(self.translation_len.finish()),
            Arc::new(self.truncated.finish()),
        ];
        self.len = 0;
        RecordBatch::try_new(schema(), cols).expect("builder columns match the schema")
    }
}

/// Writer properties for every paraforge Parquet file: zstd, row groups
/// small enough that a writer holds little in memory, and the metadata.
pub fn writer_properties(metadata: &[(&str, String)]) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(Some(64 * 1024))
        .set_key_value_metadata(Some(
            metadata
                .iter()
                .map(|(k, v)| KeyValue::new(k.to_string(), v.clone()))
                .collect(),
        ))
        .build()
}

/// Writes record batches of the output schema to one local Parquet file.
pub struct PairFileWriter {
    path: PathBuf,
    writer: ArrowWriter<File>,
    rows: u64,
}

impl PairFileWriter {
    pub fn create(
        path: &Path,
        schema: SchemaRef,
        metadata: &[(&str, String)],
    ) -> Result<PairFileWriter, DataError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| DataError::io(dir, e))?;
        }
        let file = File::create(path).map_err(|e| DataError::io(path, e))?;
        let writer = ArrowWriter::try_new(file, schema, Some(writer_properties(metadata)))
            .map_err(|source| DataError::Parquet {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(PairFileWriter {
            path: path.to_path_buf(),
            writer,
            rows: 0,
        })
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), DataError> {
        self.rows += batch.num_rows() as u64;
        self.writer
            .write(batch)
            .map_err(|source| DataError::Parquet {
                path: self.path.clone(),
                source,
            })
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn close(self) -> Result<u64, DataError> {
        self.writer.close().map_err(|source| DataError::Parquet {
            path: self.path.clone(),
            source,
        })?;
        Ok(self.rows)
    }
}

/// Reads a Parquet file of output rows batch by batch, checking that the
/// columns a stage needs are there with the right types.
pub struct PairReader {
    path: PathBuf,
    inner: parquet::arrow::arrow_reader::ParquetRecordBatchReader,
    metadata: HashMap<String, String>,
    rows: i64,
}

impl PairReader {
    pub fn open(path: &Path, required: &[&str]) -> Result<PairReader, DataError> {
        let file = File::open(path).map_err(|e| DataError::io(path, e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|source| {
            DataError::Parquet {
                path: path.to_path_buf(),
                source,
            }
        })?;
        let expected = schema();
        for name in required {
            let want = expected
                .field_with_name(name)
                .map(|f| f.data_type().clone())
                .ok();
            match builder.schema().field_with_name(name) {
                Err(_) => {
                    return Err(DataError::MissingColumn {
                        path: path.to_path_buf(),
                        column: name.to_string(),
                        expected: expected
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
                }
                Ok(f) => {
                    if let Some(want) = want {
                        if f.data_type() != &want {
                            return Err(DataError::WrongType {
                                path: path.to_path_buf(),
                                column: name.to_string(),
                                found: f.data_type().to_string(),
                                expected: want.to_string(),
                            });
                        }
                    }
                }
            }
        }
        let md = builder.metadata().file_metadata();
        let rows = md.num_rows();
        let metadata = md
            .key_value_metadata()
            .map(|kv| {
                kv.iter()
                    .map(|k| (k.key.clone(), k.value.clone().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let inner = builder
            .with_batch_size(8192)
            .build()
            .map_err(|source| DataError::Parquet {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(PairReader {
            path: path.to_path_buf(),
            inner,
            metadata,
            rows,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    pub fn num_rows(&self) -> i64 {
        self.rows
    }
}

impl Iterator for PairReader {
    type Item = Result<RecordBatch, DataError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|r| {
            r.map_err(|source| DataError::Arrow {
                path: self.path.clone(),
                source,
            })
        })
    }
}

/// Typed access to a batch's column by name, e.g. `column::<Float32Array>`.
pub fn column<'a, T: Array + 'static>(
    b: &'a RecordBatch,
    name: &str,
    path: &Path,
) -> Result<&'a T, DataError> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| DataError::MissingColumn {
            path: path.to_path_buf(),
            column: name.to_string(),
            expected: schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    c.as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| DataError::WrongType {
            path: path.to_path_buf(),
            column: name.to_string(),
            found: c.data_type().to_string(),
            expected: std::any::type_name::<T>()
                .rsplit("::")
                .next()
                .unwrap_or("")
                .to_string(),
        })
}
