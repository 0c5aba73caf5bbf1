//! Text files that may be compressed: `.gz` and `.zst` are decompressed by
//! their extension, anything else is read as it is.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Whether the path names a compressed file (`.gz` or `.zst`).
pub fn is_compressed(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("gz" | "zst")
    )
}

/// Wraps `r`, the bytes of the file at `path`, in the decompressor the
/// path's extension names (`.gz`, `.zst`; none otherwise), buffered.
pub fn decompress<R: Read + Send + 'static>(
    path: &Path,
    r: R,
) -> std::io::Result<Box<dyn BufRead + Send>> {
    let r: Box<dyn Read + Send> = match path.extension().and_then(|e| e.to_str()) {
        Some("gz") => Box::new(flate2::read::MultiGzDecoder::new(r)),
        Some("zst") => Box::new(zstd::stream::read::Decoder::new(r)?),
        _ => Box::new(r),
    };
    Ok(Box::new(BufReader::with_capacity(1 << 20, r)))
}

/// Opens a local file for reading, decompressing `.gz` and `.zst`.
pub fn open_local(path: &Path) -> std::io::Result<Box<dyn BufRead + Send>> {
    let f = std::fs::File::open(path)?;
    if f.metadata()?.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "is a directory, not a file",
        ));
    }
    decompress(path, f)
}
