//! Streaming the training pairs: (reference, translation) from the Parquet
//! files of a dataset (a bin, a decile fold, the training sample, or a whole
//! output), never all in memory. Each epoch reads the files in a new order
//! through a shuffle buffer; rows with an empty or null side are skipped
//! and counted.

use std::path::{Path, PathBuf};

use arrow_array::{Array, StringArray};
use paraforge_core::dataset::dataset_files;
use paraforge_core::folds::Fold;
use paraforge_core::schema::{col, column, PairReader};
use rand::seq::SliceRandom;
use rand::Rng;

use crate::TrainError;

/// Rows read and skipped so far.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct ReadStats {
    pub rows: u64,
    pub skipped_empty: u64,
    pub skipped_null: u64,
}

/// The files of a dataset.
#[derive(Debug, Clone)]
pub struct PairSource {
    files: Vec<PathBuf>,
    rows: u64,
    digest: String,
    /// Pairs of this fold are left out (a bootstrap scorer's training set).
    without: Option<Fold>,
}

impl PairSource {
    pub fn open(path: &Path) -> Result<PairSource, TrainError> {
        Self::open_without(path, None)
    }

    /// The pairs of `path` outside fold `without` (all with None).
    pub fn open_without(path: &Path, without: Option<Fold>) -> Result<PairSource, TrainError> {
        let files = dataset_files(path)?;
        if files.is_empty() {
            return Err(TrainError::Invalid(format!(
                "{}: no Parquet files to train on",
                path.display()
            )));
        }
        // Fail now, naming the file, rather than in the middle of an epoch.
        let mut rows = 0;
        for f in &files {
            match without {
                None => {
                    rows += PairReader::open(f, &[col::REFERENCE, col::TRANSLATION])?
                        .num_rows()
                        .max(0) as u64
                }
                Some(fold) => {
                    for b in PairReader::open(f, &[col::ID, col::REFERENCE, col::TRANSLATION])? {
                        let b = b?;
                        let ids = column::<StringArray>(&b, col::ID, f)?;
                        rows += (0..b.num_rows())
                            .filter(|&i| ids.is_null(i) || !fold.holds(ids.value(i)))
                            .count() as u64;
                    }
                }
            }
        }
        let mut digest = content_digest(path, &files)?;
        if let Some(fold) = without {
            digest = format!("{digest} without {fold}");
        }
        Ok(PairSource {
            files,
            rows,
            digest,
            without,
        })
    }

    /// What the data is, by content (SHA-256, hex): a checkpoint resumes
    /// only on data of the same digest.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Rows in the files (before skipping empty sides).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// One epoch: every usable pair once, in shuffled order.
    pub fn epoch<'a, R: Rng>(
        &self,
        buffer: usize,
        rng: &'a mut R,
        stats: &'a mut ReadStats,
    ) -> Epoch<'a, R> {
        let mut files = self.files.clone();
        files.shuffle(rng);
        files.reverse(); // popped from the end
        Epoch {
            files,
            without: self.without,
            reader: None,
            batch: Vec::new(),
            buffer: Vec::with_capacity(buffer.max(1)),
            cap: buffer.max(1),
            rng,
            stats,
        }
    }
}

/// The SHA-256 of a dataset's manifest and of each file's size and
/// Parquet footer (its row groups' offsets and statistics; cheap at any
/// size, and a changed row changes it), or of a lone file's bytes.
fn content_digest(path: &Path, files: &[PathBuf]) -> Result<String, TrainError> {
    use sha2::Digest;
    use std::io::{Read, Seek, SeekFrom};
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e: std::io::Error| TrainError::Io { path: p, source: e }
    };
    let manifest = path.join(paraforge_core::layout::MANIFEST_FILE);
    if !manifest.is_file() {
        let mut h = sha2::Sha256::new();
        for f in files {
            h.update(
                paraforge_core::layout::sha256_file(f)
                    .map_err(io(f))?
                    .as_bytes(),
            );
        }
        return Ok(hex::encode(h.finalize()));
    }
    let mut h = sha2::Sha256::new();
    h.update(std::fs::read(&manifest).map_err(io(&manifest))?);
    const FOOTER: u64 = 64 << 10;
    for f in files {
        let mut file = std::fs::File::open(f).map_err(io(f))?;
        let len = file.metadata().map_err(io(f))?.len();
        h.update(len.to_le_bytes());
        file.seek(SeekFrom::Start(len.saturating_sub(FOOTER)))
            .map_err(io(f))?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail).map_err(io(f))?;
        h.update(&tail);
    }
    Ok(hex::encode(h.finalize()))
}

/// Iterator over one epoch's pairs.
pub struct Epoch<'a, R: Rng> {
    files: Vec<PathBuf>,
    without: Option<Fold>,
    reader: Option<PairReader>,
    /// Pairs of the current record batch, popped from the end.
    batch: Vec<(String, String)>,
    buffer: Vec<(String, String)>,
    cap: usize,
    rng: &'a mut R,
    stats: &'a mut ReadStats,
}

impl<R: Rng> Epoch<'_, R> {
    /// The next pair from the files, or None at their end.
    fn pull(&mut self) -> Result<Option<(String, String)>, TrainError> {
        loop {
            if let Some(p) = self.batch.pop() {
                return Ok(Some(p));
            }
            if let Some(r) = self.reader.as_mut() {
                match r.next() {
                    Some(b) => {
                        let b = b?;
                        let path = r.path().to_path_buf();
                        let refs = column::<StringArray>(&b, col::REFERENCE, &path)?;
                        let trs = column::<StringArray>(&b, col::TRANSLATION, &path)?;
                        let ids = match self.without {
                            Some(_) => Some(column::<StringArray>(&b, col::ID, &path)?),
                            None => None,
                        };
                        for i in (0..b.num_rows()).rev() {
                            if let (Some(fold), Some(ids)) = (self.without, ids) {
                                if !ids.is_null(i) && fold.holds(ids.value(i)) {
                                    continue;
                                }
                            }
                            self.stats.rows += 1;
                            if refs.is_null(i) || trs.is_null(i) {
                                self.stats.skipped_null += 1;
                                continue;
                            }
                            let (a, t) = (refs.value(i).trim(), trs.value(i).trim());
                            if a.is_empty() || t.is_empty() {
                                self.stats.skipped_empty += 1;
                                continue;
                            }
                            self.batch.push((a.to_string(), t.to_string()));
                        }
                        continue;
                    }
                    None => self.reader = None,
                }
            }
            match self.files.pop() {
                Some(f) => {
                    let cols: &[&str] = match self.without {
                        Some(_) => &[col::ID, col::REFERENCE, col::TRANSLATION],
                        None => &[col::REFERENCE, col::TRANSLATION],
                    };
                    self.reader = Some(PairReader::open(&f, cols)?)
                }
                None => return Ok(None),
            }
        }
    }
}

impl<R: Rng> Iterator for Epoch<'_, R> {
    type Item = Result<(String, String), TrainError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.buffer.len() < self.cap {
            match self.pull() {
                Ok(Some(p)) => self.buffer.push(p),
                Ok(None) => break,
                Err(e) => return Some(Err(e)),
            }
        }
        if self.buffer.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..self.buffer.len());
        Some(Ok(self.buffer.swap_remove(i)))
    }
}
