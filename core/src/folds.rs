//! Cross-fitting folds. A scorer learned from a corpus must not score the
//! pairs it was trained on (it would score them higher than any new pair;
//! docs/new-language.md measures by how much), so the pairs are split into k folds and each fold is scored by a model
//! trained on the others. A pair's fold is a stable hash of its id, the
//! same whatever the sharding, file order or machine.

use serde::{Deserialize, Serialize};

/// Folds by default: each model trains on the other half of the corpus.
pub const DEFAULT_FOLDS: u32 = 2;

/// Fewer training pairs than this a fold, and a model learns too few
/// trigrams to say anything: refused, naming the count.
pub const MIN_TRAIN_PAIRS: u64 = 100;

/// The smallest corpus whose every fold model has [`MIN_TRAIN_PAIRS`]
/// (when the folds come out even).
pub fn min_corpus(k: u32) -> u64 {
    (MIN_TRAIN_PAIRS * k as u64).div_ceil(k.max(2) as u64 - 1)
}

/// The fold (0..k) of the pair whose id is `id`.
pub fn fold_of(id: &str, k: u32) -> u32 {
    assert!(k > 0, "at least one fold");
    (twox_hash::XxHash3_128::oneshot(id.as_bytes()) % k as u128) as u32
}

/// Fold `index` of `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fold {
    pub index: u32,
    pub k: u32,
}

impl Fold {
    /// Whether the pair whose id is `id` is in this fold.
    pub fn holds(&self, id: &str) -> bool {
        fold_of(id, self.k) == self.index
    }
}

impl std::fmt::Display for Fold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fold {} of {}", self.index, self.k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folds are fixed by the id alone and split a corpus about evenly.
    #[test]
    fn folds_are_stable_and_balanced() {
        // Pinned: a change of hash would move every pair to another fold
        // and make old bootstrap models score pairs they trained on.
        assert_eq!(fold_of("czeng-0000001", 2), fold_of("czeng-0000001", 2));
        let pinned: Vec<u32> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|i| fold_of(i, 5))
            .collect();
        assert_eq!(pinned, PINNED);
        let mut counts = [0u32; 3];
        for i in 0..30_000 {
            counts[fold_of(&format!("id-{i}"), 3) as usize] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
        let f = Fold { index: 1, k: 3 };
        let held = (0..300).filter(|i| f.holds(&format!("id-{i}"))).count();
        assert!((70..130).contains(&held), "{held}");
    }

    const PINNED: [u32; 5] = [3, 0, 1, 0, 4];
}
