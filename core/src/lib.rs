//! The scores and data every paraforge part shares: the pair scores, word
//! vectors and sentence encoders (docs/DEFINITIONS.md section 3), n-gram
//! models, the output table and where its files live.

pub mod bleu;
pub mod dataset;
pub mod encoder;
pub mod folds;
pub mod layout;
pub mod lm;
pub mod model_digest;
pub mod outputs;
pub mod rejects;
pub mod repeats;
pub mod schema;
pub mod score;
pub mod text;
pub mod tokenize;
pub mod vectors;

pub use encoder::{load_encoder, EncoderError, Model, PartScale, SentenceEncoder, TextScorer};
pub use lm::ArpaModel;
pub use schema::{DataError, PairReader, PairRow, RowsBuilder};
pub use score::{PairScores, Scorer};
pub use tokenize::{tokenize, Tokens};
pub use vectors::{LoadReport, Vectors, VectorsError};
