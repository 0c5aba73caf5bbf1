//! What a plan is: the shards a job's inputs are cut into (each one range
//! of one file), the fingerprints of the files as they were planned, and
//! why planning can fail. `plan` makes a plan, `dedup` marks the repeated
//! sources in it, `state` keeps it durable; all three share these types.

use std::path::PathBuf;

use paraforge_job::bitext::Range;
use serde::{Deserialize, Serialize};

/// A part of one input file, as planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredSpec")]
pub struct ShardSpec {
    pub shard_id: u64,
    pub input: String,
    /// Index of the input file in the config.
    pub file_index: usize,
    pub range: Range,
    /// Lines (numbers in the file, ascending) whose source repeats an
    /// earlier one of the job: `[filters] dedup_sources`, fixed at planning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop_lines: Vec<u64>,
}

/// A shard as stored: states written before [`Range`] kept its fields
/// flat (`byte_end == 0` meaning a line range), and still resume.
#[derive(Deserialize)]
struct StoredSpec {
    shard_id: u64,
    input: String,
    file_index: usize,
    range: Option<Range>,
    #[serde(default)]
    byte_start: u64,
    #[serde(default)]
    byte_end: u64,
    #[serde(default)]
    first_line: u64,
    #[serde(default)]
    lines: u64,
    #[serde(default)]
    drop_lines: Vec<u64>,
}

impl From<StoredSpec> for ShardSpec {
    fn from(s: StoredSpec) -> ShardSpec {
        let range = s.range.unwrap_or(if s.byte_end == 0 {
            Range::lines(s.first_line, s.lines)
        } else {
            Range::bytes(s.byte_start, s.byte_end, s.first_line, s.lines)
        });
        ShardSpec {
            shard_id: s.shard_id,
            input: s.input,
            file_index: s.file_index,
            range,
            drop_lines: s.drop_lines,
        }
    }
}

/// What a file looked like when the job was planned.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InputFingerprint {
    pub input: String,
    pub size: u64,
    pub e_tag: Option<String>,
    pub modified: String,
    /// xxh3-128 of the file's bytes (as stored: compressed files are hashed
    /// compressed), hex.
    pub xxh3: String,
}

impl InputFingerprint {
    /// Why `now` is not the file that was planned, if it is not. Content
    /// decides: a copy with a new modification time but the same bytes is
    /// the same input.
    pub fn differs(&self, now: &InputFingerprint) -> Option<String> {
        if self.size != now.size {
            return Some(format!(
                "its size changed from {} to {} bytes",
                self.size, now.size
            ));
        }
        (self.xxh3 != now.xxh3).then(|| {
            format!(
                "its content changed (xxh3 {} when planned, {} now; same size {})",
                self.xxh3, now.xxh3, self.size
            )
        })
    }
}

/// A job's plan: its shards and the fingerprints of the files they cut.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub shards: Vec<ShardSpec>,
    pub inputs: Vec<InputFingerprint>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Bitext(#[from] paraforge_job::bitext::BitextError),
    /// `job.output` or `[bins] output` where the output rule refuses to write.
    #[error(transparent)]
    Output(#[from] paraforge_core::outputs::OutputRuleError),
    /// A model for another language than the side it would be applied to.
    #[error("{key}: {message}")]
    Language { key: &'static str, message: String },
    /// `[scoring] bootstrap` on too few pairs to train its fold models:
    /// refused before anything is translated.
    #[error("scoring.bootstrap: the job plans {lines} input lines; {folds} fold models need at least {needed} pairs to train ({min} a model); use fewer folds, more input, or a pre-trained scoring.model")]
    TooFewForBootstrap {
        lines: u64,
        folds: u32,
        needed: u64,
        min: u64,
    },
    /// Aligned files of different lengths: every pair after the first
    /// extra or missing line would be a wrong pair.
    #[error("{source_path} has {source_lines} lines but its reference file {reference} has {reference_lines}: aligned files must have one line per pair")]
    Unaligned {
        source_path: String,
        source_lines: u64,
        reference: String,
        reference_lines: u64,
    },
    /// A shard whose lease would be refused by the message limit on every
    /// try: the job could never finish.
    #[error("shard {shard} ({input}, {lines} lines from line {first_line}) needs a lease message of about {bytes} bytes, more than the {limit} bytes {who}: {fix}")]
    LeaseTooLarge {
        shard: u64,
        input: String,
        first_line: u64,
        lines: u64,
        bytes: usize,
        limit: usize,
        who: &'static str,
        fix: String,
    },
}
