//! Upper bounds on a network's sizes, checked before anything is allocated
//! (a typo such as `--word-dim 100000000`, or a damaged config, otherwise
//! ends in an allocation failure that aborts the process). Each is far
//! above what the papers reproduced here use (the largest sentence
//! embedding is Wieting and Gimpel (2018)'s 4096-dimensional BLSTM).

/// Word, trigram and hidden dimensions.
pub const MAX_DIM: usize = 8192;
/// DAN's layers.
pub const MAX_LAYERS: usize = 64;
