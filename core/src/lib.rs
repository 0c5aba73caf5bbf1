//! Parts every paraforge service shares: the pair scores and word vectors
//! (METHOD.md section 3).

pub mod score;
pub mod vectors;

pub use score::{tokenize, PairScores, Scorer, Tokens};
pub use vectors::{LoadReport, Vectors, VectorsError};
