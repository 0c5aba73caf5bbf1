//! Upper bounds on the sizes a training run may ask for, checked before
//! anything is allocated: a typo (`--word-dim 100000000`) otherwise ends in
//! an allocation failure that aborts the process, or in hours of swapping.
//! Each is far above what the papers reproduced here use (the largest
//! sentence embedding is Wieting and Gimpel (2018)'s 4096-dimensional
//! BLSTM; they train for at most tens of epochs, in mega-batches of at
//! most 40 x 100 pairs).

/// Word, trigram and hidden dimensions, and DAN's layers: the network's
/// own bounds, checked at load too.
pub use paraforge_encoders::limits::{MAX_DIM, MAX_LAYERS};
pub const MAX_EPOCHS: usize = 10_000;
/// Pairs of one mini-batch, and of one mega-batch (M x the mini-batch),
/// whose every sentence is compared with every other.
pub const MAX_MEGABATCH_PAIRS: usize = 1_000_000;
/// Pairs held in the shuffle buffer.
pub const MAX_SHUFFLE_BUFFER: usize = 10_000_000;

/// `value` of the option `name` against `max`: an error naming both.
pub fn at_most(name: &str, value: usize, max: usize) -> Result<(), crate::TrainError> {
    if value > max {
        return Err(crate::TrainError::Invalid(format!(
            "{name} {value}: more than the limit of {max}"
        )));
    }
    Ok(())
}
