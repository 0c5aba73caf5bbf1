//! Parts every paraforge service shares: the pair scores and word vectors
//! (METHOD.md section 3).

pub mod access;
pub mod bitext;
pub mod config;
pub mod proto;
pub mod schema;
pub mod score;
pub mod storage;
pub mod vectors;

pub use schema::{DataError, PairReader, PairRow, RowsBuilder};
pub use score::{tokenize, PairScores, Scorer, Tokens};
pub use vectors::{LoadReport, Vectors, VectorsError};
