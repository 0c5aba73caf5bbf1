//! What happens to scored pairs after the pipeline wrote them: score bins
//! and the training sample (`bins`), and the corpus report (`report`).

pub mod bins;
pub mod report;

pub use bins::{BinError, BinManifest, BinOptions};
pub use report::{Report, ReportError};
