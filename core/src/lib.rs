//! Parts every paraforge service shares: the pair scores, word vectors and
//! sentence encoders (docs/DEFINITIONS.md section 3).

pub mod access;
pub mod bitext;
pub mod bleu;
pub mod config;
pub mod encoder;
pub mod filters;
pub mod layout;
pub mod lm;
pub mod proto;
pub mod schema;
pub mod score;
pub mod storage;
pub mod vectors;

pub use encoder::{load_encoder, EncoderError, Model, SentenceEncoder, TextScorer};
pub use lm::ArpaModel;
pub use schema::{DataError, PairReader, PairRow, RowsBuilder};
pub use score::{tokenize, PairScores, Scorer, Tokens};
pub use vectors::{LoadReport, Vectors, VectorsError};
