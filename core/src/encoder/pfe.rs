//! The `.pfe` file of an averaging model: magic bytes (which say how a
//! combination scales its parts), a JSON header (kind, dimensions,
//! vocabularies, precision, notes), then the word and trigram tables as
//! little-endian f32 or bfloat16. Written under a temporary name and
//! renamed, so a crash never leaves half a model.

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::bf16::{from_bf16, to_bf16};
use super::{io_err, EncoderError, Kind, Model, PartScale, Precision};

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    kind: Kind,
    word_dim: usize,
    trigram_dim: usize,
    words: Vec<String>,
    trigrams: Vec<String>,
    #[serde(default)]
    precision: Precision,
    #[serde(default)]
    notes: serde_json::Value,
    /// Whether a WORD,TRIGRAM model scales each half to unit length
    /// ([`PartScale::Unit`]); absent in files written before, which did not.
    #[serde(default)]
    unit_parts: bool,
    /// Whether those unit halves are then weighted by their dimensions
    /// ([`PartScale::ByDimension`]); absent in files written before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    parts_by_dimension: bool,
}

pub(super) const MAGIC: &[u8; 7] = b"PFEMB1\n";
/// The magic of a file whose halves are at unit length ([`PartScale::Unit`]):
/// a reader from before that flag refuses it rather than scoring raw halves.
pub(super) const MAGIC_UNIT_PARTS: &[u8; 7] = b"PFEMB2\n";
/// The magic of a file whose halves are weighted by dimension
/// ([`PartScale::ByDimension`]): a reader from before refuses it.
pub(super) const MAGIC_PARTS_BY_DIMENSION: &[u8; 7] = b"PFEMB3\n";

impl Model {
    /// Writes the model (f32 tables).
    pub fn save(&self, path: &Path) -> Result<(), EncoderError> {
        self.save_as(path, Precision::F32)
    }

    /// Writes the model with its tables stored at `precision`.
    pub fn save_as(&self, path: &Path, precision: Precision) -> Result<(), EncoderError> {
        let header = serde_json::to_vec(&Header {
            kind: self.kind,
            word_dim: self.word_dim,
            trigram_dim: self.trigram_dim,
            words: self.words.clone(),
            trigrams: self.trigrams.clone(),
            precision,
            notes: self.notes.clone(),
            unit_parts: self.parts != PartScale::Raw,
            parts_by_dimension: self.parts == PartScale::ByDimension,
        })
        .map_err(|e| EncoderError::Invalid(e.to_string()))?;
        let tmp = path.with_extension("pfe.tmp");
        let write = || -> std::io::Result<()> {
            let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
            f.write_all(match self.parts {
                PartScale::Raw => MAGIC,
                PartScale::Unit => MAGIC_UNIT_PARTS,
                PartScale::ByDimension => MAGIC_PARTS_BY_DIMENSION,
            })?;
            f.write_all(&(header.len() as u64).to_le_bytes())?;
            f.write_all(&header)?;
            for &x in self.w.iter().chain(&self.t) {
                match precision {
                    Precision::F32 => f.write_all(&x.to_le_bytes())?,
                    Precision::Bf16 => f.write_all(&to_bf16(x).to_le_bytes())?,
                }
            }
            f.into_inner().map_err(|e| e.into_error())?.sync_all()
        };
        write().map_err(io_err(&tmp))?;
        // Rename so that a crash never leaves a half-written model.
        std::fs::rename(&tmp, path).map_err(io_err(path))
    }

    /// Reads a `.pfe` file; a directory is read as its `model.pfe`.
    pub fn load(path: &Path) -> Result<Model, EncoderError> {
        let file = if path.is_dir() {
            path.join("model.pfe")
        } else {
            path.to_path_buf()
        };
        let path = file.as_path();
        let bad = |reason: String| EncoderError::BadModel {
            path: path.to_path_buf(),
            reason,
        };
        let mut f = std::io::BufReader::new(std::fs::File::open(path).map_err(io_err(path))?);
        let size = std::fs::metadata(path).map_err(io_err(path))?.len();
        let (magic, h, len) = read_header(&mut f, size).map_err(bad)?;
        let (nw, nt) = table_sizes(&h).map_err(bad)?;
        let width = match h.precision {
            Precision::F32 => 4,
            Precision::Bf16 => 2,
        };
        let want = 15 + len + width * (nw + nt) as u64;
        if size != want {
            return Err(bad(format!(
                "{size} bytes, expected {want} for {} words x {} and {} trigrams x {} ({:?})",
                h.words.len(),
                h.word_dim,
                h.trigrams.len(),
                h.trigram_dim,
                h.precision
            )));
        }
        let w = read_table(&mut f, nw, h.precision).map_err(io_err(path))?;
        let t = read_table(&mut f, nt, h.precision).map_err(io_err(path))?;
        let parts = part_scale(&h, &magic).map_err(bad)?;
        let mut m =
            Model::from_tables(h.kind, h.words, h.word_dim, w, h.trigrams, h.trigram_dim, t)
                .map_err(|e| bad(e.to_string()))?;
        if let Some(at) = m.first_non_finite() {
            return Err(EncoderError::NonFinite {
                path: path.to_path_buf(),
                at,
            });
        }
        m.notes = h.notes;
        m.parts = parts;
        Ok(m)
    }
}

/// The magic bytes, the header and its length; the error says what is wrong.
fn read_header(f: &mut impl Read, size: u64) -> Result<([u8; 7], Header, u64), String> {
    let mut magic = [0u8; 7];
    f.read_exact(&mut magic)
        .map_err(|_| "shorter than its header".to_string())?;
    if ![MAGIC, MAGIC_UNIT_PARTS, MAGIC_PARTS_BY_DIMENSION].contains(&&magic) {
        return Err("wrong magic bytes (expected a .pfe file)".into());
    }
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .map_err(|_| "truncated header".to_string())?;
    let len = u64::from_le_bytes(len);
    if len > size {
        return Err(format!("header length {len} exceeds the file size {size}"));
    }
    let mut header = vec![0u8; len as usize];
    f.read_exact(&mut header)
        .map_err(|_| "truncated header".to_string())?;
    let h: Header = serde_json::from_slice(&header).map_err(|e| format!("header: {e}"))?;
    Ok((magic, h, len))
}

/// The values in the word and trigram tables a header describes.
fn table_sizes(h: &Header) -> Result<(usize, usize), String> {
    if h.kind.words() != (h.word_dim > 0) || h.kind.trigrams() != (h.trigram_dim > 0) {
        return Err(format!(
            "kind {} does not match dimensions {}/{}",
            h.kind.name(),
            h.word_dim,
            h.trigram_dim
        ));
    }
    let nw = if h.kind.words() {
        (h.words.len() + 1) * h.word_dim
    } else {
        0
    };
    Ok((nw, h.trigrams.len() * h.trigram_dim))
}

/// `n` values stored at `precision`, as f32.
fn read_table(f: &mut impl Read, n: usize, precision: Precision) -> std::io::Result<Vec<f32>> {
    let width = match precision {
        Precision::F32 => 4,
        Precision::Bf16 => 2,
    };
    let mut bytes = vec![0u8; n * width];
    f.read_exact(&mut bytes)?;
    Ok(match precision {
        Precision::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Precision::Bf16 => bytes
            .chunks_exact(2)
            .map(|c| from_bf16(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
    })
}

/// How the parts are scaled: the header's flags, which must agree with the
/// magic and be set only on a model with two tables.
fn part_scale(h: &Header, magic: &[u8; 7]) -> Result<PartScale, String> {
    // The flags and the magic say the same, or the file is damaged.
    let parts = match (h.unit_parts, h.parts_by_dimension) {
        (false, false) => PartScale::Raw,
        (true, false) => PartScale::Unit,
        (true, true) => PartScale::ByDimension,
        (false, true) => return Err("header says parts_by_dimension without unit_parts".into()),
    };
    let want: &[u8; 7] = match parts {
        PartScale::Raw => MAGIC,
        PartScale::Unit => MAGIC_UNIT_PARTS,
        PartScale::ByDimension => MAGIC_PARTS_BY_DIMENSION,
    };
    if magic != want {
        return Err(format!(
            "header says unit_parts {} and parts_by_dimension {} under magic {:?}",
            h.unit_parts,
            h.parts_by_dimension,
            String::from_utf8_lossy(&magic[..6])
        ));
    }
    // One table has no parts to scale: no writer sets the flags on it.
    if h.kind != Kind::WordTrigram && parts != PartScale::Raw {
        return Err(format!(
            "header says unit_parts for a {} model, which has one table",
            h.kind.name()
        ));
    }
    Ok(parts)
}
