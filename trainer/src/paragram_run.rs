//! `paraforge train --model paragram-words` as one call: the word pairs
//! (a lexicon's or a PPDB file's), the training of `paragram`, the vectors
//! and their card.

use std::path::{Path, PathBuf};

use crate::paragram::{self, ParagramOptions, ParagramReport};
use crate::TrainError;

/// `paraforge train --model paragram-words` as one call: PARAGRAM word
/// vectors tuned on the word pairs of a lexicon (a directory) or a PPDB
/// file, from `init_vectors`, written as GloVe text to `write_to` with the
/// model card beside it.
pub struct ParagramSpec {
    pub data: PathBuf,
    pub init_vectors: PathBuf,
    /// Where the vectors end up (named in the card; the caller moves them).
    pub out: PathBuf,
    /// A lexicon's `--lexicon-min-count` and `--lexicon-min-pmi`.
    pub min_count: u64,
    pub min_pmi: f64,
    pub options: ParagramOptions,
    pub command: Option<String>,
}

/// What a PARAGRAM run did.
pub struct ParagramOutcome {
    pub report: ParagramReport,
    /// Vectors written and their dimension.
    pub vectors: (usize, usize),
}

/// Runs `spec`, writing to `write_to`; `note` hears what is said on the
/// way, `progress` each epoch's loss.
pub fn run(
    spec: &ParagramSpec,
    write_to: &Path,
    note: &mut dyn FnMut(String),
    progress: &mut dyn FnMut(usize, f64),
) -> Result<ParagramOutcome, TrainError> {
    let from_lexicon = spec.data.is_dir();
    let pairs = if from_lexicon {
        paraforge_dataset::lexicon::training_pairs(&spec.data, spec.min_count, spec.min_pmi)
            .map_err(|e| TrainError::Invalid(format!("--data {}: {e}", spec.data.display())))?
    } else {
        let (pairs, phrases) = paragram::read_ppdb(&spec.data)?;
        note(format!(
            "{}: {} word pairs, {phrases} phrase pairs skipped",
            spec.data.display(),
            pairs.len()
        ));
        pairs
    };
    let (init, _) = paraforge_core::Vectors::load(&spec.init_vectors).map_err(|e| {
        TrainError::Invalid(format!(
            "--init-vectors {}: {e}",
            spec.init_vectors.display()
        ))
    })?;
    let (vectors, report) = paragram::train(&init, &pairs, &spec.options, progress)?;
    let io = |source| TrainError::Io {
        path: write_to.to_path_buf(),
        source,
    };
    let mut w = std::io::BufWriter::new(std::fs::File::create(write_to).map_err(io)?);
    vectors
        .write(&mut w)
        .and_then(|()| std::io::Write::flush(&mut w))
        .map_err(io)?;
    drop(w);
    let card = crate::card::ParagramCard {
        out: &spec.out,
        data: &spec.data,
        init_vectors: &spec.init_vectors,
        command: spec.command.clone(),
        options: &spec.options,
        lexicon: from_lexicon.then_some((spec.min_count, spec.min_pmi)),
        report: &report,
        vectors: (vectors.len(), vectors.dim()),
    };
    let card_path = crate::card::card_path(write_to);
    std::fs::write(&card_path, card.card().text()).map_err(|source| TrainError::Io {
        path: card_path.clone(),
        source,
    })?;
    Ok(ParagramOutcome {
        report,
        vectors: (vectors.len(), vectors.dim()),
    })
}
