//! Which options each encoder reads: a flag given to an encoder that does
//! not read it is refused, naming the encoders that do, rather than
//! silently ignored.

use crate::neural::Arch;
use crate::run::{Encoder, TrainSpec};

impl TrainSpec {
    /// The first option given that the encoder does not read, and which
    /// encoders do.
    pub(crate) fn unused_option(&self) -> Option<(&'static str, &'static str)> {
        let neural = match &self.model {
            Encoder::Neural(s) => Some(s),
            Encoder::Average(_) => None,
        };
        let has = |a: Arch| neural.is_some_and(|s| s.arch == a || s.parts.contains(&a));
        let trigrams = match &self.model {
            Encoder::Average(k) => k.trigrams(),
            Encoder::Neural(s) => s.has_trigrams(),
        };
        let words = match &self.model {
            Encoder::Average(k) => k.words(),
            Encoder::Neural(_) => true,
        };
        const NEURAL: &str = "the neural encoders";
        const TRIGRAMS: &str =
            "the encoders with trigrams (trigram, word,trigram, a combination with a trigram part)";
        const WORDS: &str = "the encoders with a word table (all but trigram)";
        const COUNTED: &str =
            "runs with --min-word-count (otherwise --init-vectors fixes the words and their size)";
        let counted = words && self.min_word_count.is_some();
        let given = [
            ("--hidden", self.hidden.is_some(), neural.is_some(), NEURAL),
            ("--layers", self.layers.is_some(), has(Arch::Dan), "dan"),
            // Shuffled words would not be the leaves of their parse.
            (
                "--scramble",
                self.scramble.is_some(),
                neural.is_some() && !has(Arch::TreeRnn),
                "the neural encoders but tree-rnn",
            ),
            (
                "--negatives",
                self.negatives.is_some(),
                neural.is_some(),
                NEURAL,
            ),
            (
                "--lambda-c",
                self.lambda_c.is_some(),
                neural.is_some(),
                NEURAL,
            ),
            (
                "--lambda-w",
                self.lambda_w.is_some(),
                neural.is_some(),
                NEURAL,
            ),
            (
                "--lambda-kl",
                self.lambda_kl.is_some(),
                has(Arch::Gaussian) || has(Arch::LstmGaussian),
                "gaussian and lstm-gaussian",
            ),
            ("--device", self.device.is_some(), neural.is_some(), NEURAL),
            (
                "--parse-cache",
                self.parse_cache.is_some(),
                has(Arch::TreeRnn),
                "tree-rnn",
            ),
            (
                "--trigram-dim",
                self.trigram_dim.is_some(),
                trigrams,
                TRIGRAMS,
            ),
            (
                "--min-trigram-count",
                self.min_trigram_count.is_some(),
                trigrams,
                TRIGRAMS,
            ),
            (
                "--max-trigrams",
                self.max_trigrams.is_some(),
                trigrams,
                TRIGRAMS,
            ),
            (
                "--min-word-count",
                self.min_word_count.is_some(),
                words,
                WORDS,
            ),
            ("--word-dim", self.word_dim.is_some(), counted, COUNTED),
            ("--max-words", self.max_words.is_some(), counted, COUNTED),
            (
                "--precision",
                self.precision.is_some(),
                neural.is_none(),
                "word, trigram and word,trigram (a neural encoder's safetensors are f32)",
            ),
        ];
        given
            .into_iter()
            .find(|(_, given, used, _)| *given && !*used)
            .map(|(flag, _, _, users)| (flag, users))
    }
}
