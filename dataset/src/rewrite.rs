//! How `filter` and `rescore` (`paraforge_rescore`) turn a dataset into a
//! new one of the same layout: every file of the verified input is read
//! batch by batch, each batch goes through the command's transform, and
//! what comes out is written to the same relative path of the staged new
//! dataset (`crate::output`), with the input file's footer kept but for the
//! keys the command writes anew. The command writes its manifest from what
//! [`rewrite`] returns and publishes.

use std::path::Path;

use arrow_array::RecordBatch;
use paraforge_core::dataset::Dataset;
use paraforge_core::schema::{self, DataError, PairFileWriter, PairReader};
use rayon::prelude::*;

use crate::output::{NewDataset, OutputError};

/// What a command does to the files besides its transform.
pub struct Rewrite<'a> {
    /// Columns every input file must have, checked as it is opened.
    pub columns: &'a [&'a str],
    /// Footer keys of an input file that the command writes anew: they are
    /// dropped from what is kept.
    pub replaced: &'a [&'a str],
    /// What the command adds to every footer, after the kept keys (sorted).
    pub added: Vec<(String, String)>,
    /// Files side by side on the thread pool; otherwise in order, so that
    /// of several bad files the first one's error is the one reported.
    pub parallel: bool,
}

/// Where a batch lies in its input file, for the transform's messages.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    pub path: &'a Path,
    /// Rows of the file before the batch.
    pub row: u64,
}

/// One file of the new dataset.
#[derive(Debug, Clone)]
pub struct RewrittenFile<C> {
    /// Relative to the dataset's root, the same as the input file's.
    pub path: String,
    pub rows: u64,
    pub input_rows: u64,
    pub bytes: u64,
    pub sha256: String,
    /// What the transform counted over the file's batches.
    pub counts: C,
}

/// Rewrites every file of `input` into `out`'s staging directory, in the
/// input's order. `transform` is made once per file (`start`), so that it
/// may keep scratch state across a file's batches, and is handed each
/// batch with the file's counts so far; a file's counts are added to in
/// row order, whatever runs in parallel, so sums come out the same on
/// every run. `progress` is told each batch's rows once it is written.
pub fn rewrite<C, E, S, T>(
    input: &Dataset,
    out: &NewDataset,
    how: &Rewrite<'_>,
    start: S,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<RewrittenFile<C>>, E>
where
    C: Default + Send,
    E: From<DataError> + From<OutputError> + Send,
    S: Fn() -> T + Sync,
    T: FnMut(RecordBatch, At<'_>, &mut C) -> Result<RecordBatch, E>,
{
    let files = input.paths();
    let one = |path: &std::path::PathBuf| {
        let rel = path.strip_prefix(&input.root).unwrap_or(path);
        rewrite_file(path, rel, out.dir(), how, start(), progress)
    };
    if how.parallel {
        files.par_iter().map(one).collect()
    } else {
        files.iter().map(one).collect()
    }
}

fn rewrite_file<C, E, T>(
    path: &Path,
    rel: &Path,
    out: &Path,
    how: &Rewrite<'_>,
    mut transform: T,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<RewrittenFile<C>, E>
where
    C: Default,
    E: From<DataError> + From<OutputError>,
    T: FnMut(RecordBatch, At<'_>, &mut C) -> Result<RecordBatch, E>,
{
    let reader = PairReader::open(path, how.columns)?;
    // The writer adds the schema of what it writes.
    let mut footer: Vec<(String, String)> = reader
        .metadata()
        .iter()
        .filter(|(k, _)| k.as_str() != "ARROW:schema" && !how.replaced.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    footer.sort();
    footer.extend(how.added.iter().cloned());
    let footer: Vec<(&str, String)> = footer
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();

    let target = out.join(rel);
    let mut writer: Option<PairFileWriter> = None;
    let mut counts = C::default();
    let mut input_rows = 0u64;
    for batch in reader {
        let batch = batch?;
        let n = batch.num_rows() as u64;
        let at = At {
            path,
            row: input_rows,
        };
        let batch = transform(batch, at, &mut counts)?;
        let w = match writer.as_mut() {
            Some(w) => w,
            None => writer.insert(PairFileWriter::create(&target, batch.schema(), &footer)?),
        };
        w.write(&batch)?;
        progress(n);
        input_rows += n;
    }
    // A file without batches still has its place in the layout.
    let rows = match writer {
        Some(w) => w.close()?,
        None => PairFileWriter::create(&target, schema::schema(), &footer)?.close()?,
    };
    let io = |source| OutputError::Io {
        path: target.clone(),
        source,
    };
    Ok(RewrittenFile {
        path: rel.display().to_string(),
        rows,
        input_rows,
        bytes: std::fs::metadata(&target).map_err(io)?.len(),
        sha256: paraforge_core::layout::sha256_file(&target).map_err(io)?,
        counts,
    })
}
