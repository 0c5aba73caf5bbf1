//! What happens to scored pairs after the pipeline wrote them: score bins
//! and the training sample (`bins`), bounds on score columns (`filter`),
//! the corpus report (`report`), the paraphrase lexicon (`lexicon`), how each of them (and
//! `paraforge_rescore`) writes a new dataset (`output`), and the file by
//! file rewrite filter and rescore share (`rewrite`). No encoder is
//! needed here: para_score recomputed with another model is the
//! `paraforge-rescore` crate's.

pub mod bins;
pub mod filter;
pub mod lexicon;
pub mod output;
pub mod report;
pub mod rewrite;

pub use bins::{BinError, BinManifest, BinOptions};
pub use report::{Report, ReportError};
