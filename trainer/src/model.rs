//! The embedding models. The model itself (tables, tokenization, feature
//! lookup, averaging, the `.pfe` file) is `paraforge_core::encoder::Model`,
//! the type `para_score` scores with, so that a trained model means the
//! same thing to the pipeline as to training and `eval-sts`. Here: a fresh
//! model's initialization and the export of its word vectors.

use std::path::Path;

use rand::{Rng, SeedableRng};

pub use paraforge_core::encoder::{
    for_each_trigram, trigram_key, trigram_text, Encoded, Kind, Model, Precision,
};

use crate::TrainError;

/// A fresh model: words and their initial vectors from `init` (a GloVe
/// file's vectors; needed when `kind` uses words), the UNK row at zero,
/// trigram rows uniform in +-0.05 from `seed`.
pub fn init(
    kind: Kind,
    init: Option<&paraforge_core::Vectors>,
    trigrams: Vec<String>,
    trigram_dim: usize,
    seed: u64,
) -> Result<Model, TrainError> {
    let (mut words, mut w, mut word_dim) = (Vec::new(), Vec::new(), 0);
    if kind.words() {
        let v = init.ok_or_else(|| {
            TrainError::Invalid(format!(
                "model {} needs word vectors to start from (--init-vectors)",
                kind.name()
            ))
        })?;
        word_dim = v.dim();
        words.reserve(v.len());
        w.reserve((v.len() + 1) * word_dim);
        for i in 0..v.len() {
            words.push(v.word(i).to_string());
            w.extend_from_slice(v.row(i));
        }
        w.extend(std::iter::repeat_n(0.0, word_dim));
    }
    let (mut t, mut tdim) = (Vec::new(), 0);
    if kind.trigrams() {
        crate::limits::at_most("--trigram-dim", trigram_dim, crate::limits::MAX_DIM)?;
        if trigrams.is_empty() || trigram_dim == 0 {
            return Err(TrainError::Invalid(
                "a trigram model needs a trigram vocabulary and a dimension".into(),
            ));
        }
        tdim = trigram_dim;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        t = (0..trigrams.len() * tdim)
            .map(|_| rng.random_range(-0.05f32..0.05))
            .collect();
    }
    Ok(Model::from_tables(
        kind, words, word_dim, w, trigrams, tdim, t,
    )?)
}

/// A fresh model whose words are `words` (a vocabulary counted in the
/// data), each row of `word_dim`: from `vectors` where it knows the word
/// (same dimension required), else uniform in +-0.05 from `seed`; the UNK
/// row at zero. Trigram rows as [`init`]. Returns the model and how many
/// word rows came from `vectors`.
pub fn init_with_words(
    kind: Kind,
    words: Vec<String>,
    word_dim: usize,
    vectors: Option<&paraforge_core::Vectors>,
    trigrams: Vec<String>,
    trigram_dim: usize,
    seed: u64,
) -> Result<(Model, usize), TrainError> {
    if !kind.words() || words.is_empty() || word_dim == 0 {
        return Err(TrainError::Invalid(format!(
            "model {} with a vocabulary from the data needs words and a word dimension",
            kind.name()
        )));
    }
    crate::limits::at_most("--word-dim", word_dim, crate::limits::MAX_DIM)?;
    if let Some(v) = vectors {
        if v.dim() != word_dim {
            return Err(TrainError::Invalid(format!(
                "--init-vectors has {} dimensions, --word-dim is {word_dim}",
                v.dim()
            )));
        }
    }
    // A stream of its own, so that the trigram rows do not depend on the
    // word vocabulary.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5745_4f52_4453);
    let mut w = Vec::with_capacity((words.len() + 1) * word_dim);
    let mut known = 0;
    for word in &words {
        match vectors.and_then(|v| v.get(word)) {
            Some(row) => {
                w.extend_from_slice(row);
                known += 1;
            }
            None => w.extend((0..word_dim).map(|_| rng.random_range(-0.05f32..0.05))),
        }
    }
    w.extend(std::iter::repeat_n(0.0, word_dim));
    let (trigrams, tdim, t) = if kind.trigrams() {
        let m = init(Kind::Trigram, None, trigrams, trigram_dim, seed)?;
        (m.trigrams().to_vec(), m.trigram_dim, m.t)
    } else {
        (Vec::new(), 0, Vec::new())
    };
    Ok((
        Model::from_tables(kind, words, word_dim, w, trigrams, tdim, t)?,
        known,
    ))
}

/// A model's word table as vectors (what `export_vectors` writes and
/// `eval-words` scores).
pub fn word_vectors(m: &Model) -> Result<paraforge_core::Vectors, TrainError> {
    if !m.kind.words() {
        return Err(TrainError::Invalid(format!(
            "model {} has no word table: no word embeddings to export",
            m.kind.name()
        )));
    }
    let d = m.word_dim;
    Ok(paraforge_core::Vectors::from_pairs(
        d,
        m.words()
            .iter()
            .enumerate()
            .map(|(i, w)| (w.as_str(), &m.w[i * d..(i + 1) * d])),
    ))
}

/// The word embeddings (UNK left out) as GloVe-format text, which
/// `paraforge_core::Vectors::load` reads.
pub fn export_vectors(m: &Model, path: &Path) -> Result<usize, TrainError> {
    let v = word_vectors(m)?;
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        v.write(&mut f)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()
    };
    write().map_err(|e| TrainError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| TrainError::io(path, e))?;
    Ok(v.len())
}

/// The scorer's cosine, so that STS and para_score agree on it.
pub use paraforge_core::score::cosine;

#[cfg(test)]
mod tests {
    use super::*;

    fn glove() -> paraforge_core::Vectors {
        paraforge_core::Vectors::from_reader(
            "cat 1 0 0\ndog 0.9 0.1 0\ncar 0 0 1\n".as_bytes(),
            Path::new("mini.txt"),
        )
        .unwrap()
        .0
    }

    #[test]
    fn trigrams_cross_word_boundaries() {
        let mut got = Vec::new();
        for_each_trigram(&paraforge_core::tokenize("a cat"), |k| {
            got.push(trigram_text(k))
        });
        assert_eq!(got, [" a ", "a c", " ca", "cat", "at "]);
    }

    #[test]
    fn embeddings_average_rows_and_save_load_round_trips() {
        let v = glove();
        let m = init(
            Kind::WordTrigram,
            Some(&v),
            vec![" ca".into(), "cat".into(), "at ".into()],
            2,
            7,
        )
        .unwrap();
        let e = m.encode("Cat, zebra!");
        // cat, ",", zebra, "!" -> cat and three UNKs; of the trigrams of
        // " cat , zebra ! " only " ca", "cat" and "at " are known.
        assert_eq!(e.words, [0, 3, 3, 3]);
        assert_eq!(e.trigrams, [0, 1, 2]);
        // The means before each half is scaled to its length.
        let mut g = vec![0.0; 5];
        m.means_into(&e, &mut g);
        assert!((g[0] - 0.25).abs() < 1e-6 && g[1] == 0.0 && g[2] == 0.0);
        let mean_t0 = (m.t[0] + m.t[2] + m.t[4]) / 3.0;
        assert!((g[3] - mean_t0).abs() < 1e-6);
        let g = m.embed("Cat, zebra!");
        assert_eq!(g.len(), 5);
        // Weighted by dimension: the 3-d word half at length sqrt(3/5).
        let len = (3.0f32 / 5.0).sqrt();
        assert!((g[0] - len).abs() < 1e-6 && g[1] == 0.0 && g[2] == 0.0);

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.pfe");
        m.save(&p).unwrap();
        let back = Model::load(&p).unwrap();
        assert_eq!(back.embed("Cat, zebra!"), g);
        assert_eq!(back.words(), m.words());

        // Truncated, garbage and wrong-kind files are errors naming the file.
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let e = Model::load(&p).unwrap_err().to_string();
        assert!(e.contains("m.pfe") && e.contains("bytes"), "{e}");
        std::fs::write(&p, b"hello").unwrap();
        assert!(Model::load(&p).unwrap_err().to_string().contains("m.pfe"));
        assert!(init(Kind::Word, None, vec![], 0, 1).is_err());
        assert!("lstm".parse::<Kind>().is_err());
        assert_eq!("WORD, TRIGRAM".parse::<Kind>().unwrap(), Kind::WordTrigram);
    }

    #[test]
    fn exported_vectors_load_as_glove() {
        let v = glove();
        let m = init(Kind::Word, Some(&v), vec![], 0, 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.txt");
        assert_eq!(export_vectors(&m, &p).unwrap(), 3);
        let (back, _) = paraforge_core::Vectors::load(&p).unwrap();
        assert_eq!(back.get("dog").unwrap(), &[0.9, 0.1, 0.0]);
        let t = init(Kind::Trigram, None, vec!["abc".into()], 4, 1).unwrap();
        assert!(export_vectors(&t, &p).is_err());
    }
}
