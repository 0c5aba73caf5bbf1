//! bfloat16 storage: the conversions, and a model scored from 2-byte copies
//! of its tables with the same sums, to the bit, as its f32 rows.

use super::{Coverage, Encoded, Model, Scratch, SentenceEncoder};
use crate::tokenize::Tokens;

/// Rounds to the nearest bfloat16 (ties to even); the values are finite.
pub(super) fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

pub(super) fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// A stored embedding value: f32, or bfloat16 bits (exactly an f32 with the
/// low 16 bits zero, so both give the same sums).
pub(super) trait Value: Copy {
    fn get(self) -> f32;
}

impl Value for f32 {
    #[inline(always)]
    fn get(self) -> f32 {
        self
    }
}

impl Value for u16 {
    #[inline(always)]
    fn get(self) -> f32 {
        from_bf16(self)
    }
}

/// The word mean, then the trigram mean, of `e` from tables `w` and `t`
/// shaped as `m`'s (its own f32 rows or a [`Bf16Model`]'s packed ones).
pub(super) fn means_of<V: Value>(w: &[V], t: &[V], m: &Model, e: &Encoded, out: &mut [f32]) {
    out.fill(0.0);
    let (wo, to) = out.split_at_mut(m.word_dim);
    mean_rows(w, m.word_dim, &e.words, wo);
    mean_rows(t, m.trigram_dim, &e.trigrams, to);
}

/// The mean of `rows` of a row-major `table`, into `out`.
///
/// Blocked over the dimension so each block's sums stay in registers while
/// every row is added: adding whole rows into `out` loaded and stored `out`
/// once per row. The sums run over the rows in order, as a plain loop would,
/// and there are no multiplies to fuse, so every target gives the same bits.
#[multiversion::multiversion(targets("x86_64+avx2", "x86_64+sse4.1"))]
fn mean_rows<V: Value>(table: &[V], dim: usize, rows: &[u32], out: &mut [f32]) {
    if rows.is_empty() || dim == 0 {
        return;
    }
    let inv = 1.0 / rows.len() as f32;
    let mut start = 0;
    while dim - start >= 64 {
        sum_block::<V, 64>(table, dim, start, rows, inv, out);
        start += 64;
    }
    while dim - start >= 8 {
        sum_block::<V, 8>(table, dim, start, rows, inv, out);
        start += 8;
    }
    for i in start..dim {
        let sum: f32 = rows
            .iter()
            .map(|&r| table[r as usize * dim + i].get())
            .sum();
        out[i] = sum * inv;
    }
}

#[inline(always)]
fn sum_block<V: Value, const B: usize>(
    table: &[V],
    dim: usize,
    start: usize,
    rows: &[u32],
    inv: f32,
    out: &mut [f32],
) {
    let mut acc = [0f32; B];
    for &r in rows {
        let off = r as usize * dim + start;
        let row: &[V; B] = table[off..off + B].try_into().expect("a block of B");
        for (a, x) in acc.iter_mut().zip(row) {
            *a += x.get();
        }
    }
    for (o, a) in out[start..start + B].iter_mut().zip(acc) {
        *o = a * inv;
    }
}

/// A model whose every value is a bfloat16 (as `--precision bf16` saves
/// them), scored from 2-byte copies of its tables: half the memory traffic of
/// the f32 rows, which bound the scorer (BENCHMARKS.md, scoring), and the
/// same embeddings to the bit as [`Model::embed_into`].
#[derive(Debug)]
pub struct Bf16Model {
    model: Model,
    w: Vec<u16>,
    t: Vec<u16>,
}

impl Bf16Model {
    /// Whether every value of `model` is exactly a bfloat16.
    pub fn exact(model: &Model) -> bool {
        let on_grid = |v: &[f32]| v.iter().all(|x| x.to_bits() & 0xFFFF == 0);
        on_grid(&model.w) && on_grid(&model.t)
    }

    /// `None` unless every value of the model is exactly a bfloat16.
    pub fn new(model: Model) -> Option<Bf16Model> {
        if !Bf16Model::exact(&model) {
            return None;
        }
        let pack = |v: &[f32]| v.iter().map(|x| (x.to_bits() >> 16) as u16).collect();
        Some(Bf16Model {
            w: pack(&model.w),
            t: pack(&model.t),
            model,
        })
    }

    pub fn model(&self) -> &Model {
        &self.model
    }
}

impl SentenceEncoder for Bf16Model {
    fn dim(&self) -> usize {
        self.model.dim()
    }

    fn embed_tokens(&self, tokens: &Tokens, scratch: &mut Scratch, out: &mut [f32]) -> Coverage {
        let m = &self.model;
        let unknown = m.encode_tokens(tokens, &mut scratch.encoded);
        let e = &scratch.encoded;
        means_of(&self.w, &self.t, m, e, out);
        m.scale_parts(out);
        Coverage {
            known: (e.words.len() + e.trigrams.len()) as u32,
            unknown,
        }
    }

    fn describe(&self) -> String {
        format!("{} (bf16)", self.model.describe())
    }
    fn short_name(&self) -> String {
        self.model.kind.name().into()
    }
}
