//! What happens to scored pairs after the pipeline wrote them: score bins
//! and the training sample (`bins`), bounds on score columns (`filter`), the corpus report (`report`), and
//! para_score recomputed with other vectors (`rescore`).

pub mod bins;
pub mod filter;
pub mod output;
pub mod report;
pub mod rescore;

pub use bins::{BinError, BinManifest, BinOptions};
pub use report::{Report, ReportError};
pub use rescore::{RescoreError, RescoreManifest};
