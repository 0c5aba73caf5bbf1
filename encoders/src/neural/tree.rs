//! The tree encoder's forward pass: each sentence composed bottom-up along
//! its binary tree.

use burn::tensor::{Int, Tensor, TensorData};

use super::{Batch, Net};
use crate::tree::Tree;

impl Net {
    /// The recursive network: nodes of one height over the whole batch at
    /// once, appended to one table of rows (the words first) that later
    /// heights select their children from.
    pub(super) fn tree_rnn(&self, x: Tensor<3>, b: &Batch) -> Tensor<2> {
        let [n, len, d] = x.dims();
        let dev = x.device();
        let trees: Vec<Tree> = (0..n)
            .map(|i| {
                let tokens = b.lens[i] as usize;
                let given = b.trees.as_ref().and_then(|t| t.get(i)).map(|m| Tree {
                    tokens: tokens as u32,
                    merges: m.clone(),
                });
                // Trees come from `tree::from_constituents`, but the batch
                // is public: one that is not a full binary tree over the
                // sentence's tokens is read as right-branching.
                given
                    .filter(Tree::is_valid)
                    .unwrap_or_else(|| Tree::right_branching(tokens))
            })
            .collect();
        let heights: Vec<Vec<u32>> = trees.iter().map(Tree::heights).collect();
        let top = heights.iter().flatten().copied().max().unwrap_or(0);
        // Each merge's row in the table, once computed.
        let mut rows: Vec<Vec<i64>> = trees.iter().map(|t| vec![-1; t.merges.len()]).collect();
        let row_of = |rows: &[Vec<i64>], i: usize, t: &Tree, node: u32| -> i64 {
            if node < t.tokens {
                (i * len) as i64 + node as i64
            } else {
                rows[i][(node - t.tokens) as usize]
            }
        };
        let mut table = x.reshape([n * len, d]);
        let mut next = (n * len) as i64;
        let (w, bias) = (self.p(0), self.p(1));
        let ids = |v: Vec<i64>| {
            let k = v.len();
            Tensor::<1, Int>::from_data(TensorData::new(v, [k]), &dev)
        };
        for level in 1..=top {
            let (mut left, mut right) = (Vec::new(), Vec::new());
            for (i, t) in trees.iter().enumerate() {
                for (k, &[l, r]) in t.merges.iter().enumerate() {
                    if heights[i][k] == level {
                        left.push(row_of(&rows, i, t, l));
                        right.push(row_of(&rows, i, t, r));
                        rows[i][k] = next;
                        next += 1;
                    }
                }
            }
            let children = Tensor::cat(
                vec![
                    table.clone().select(0, ids(left)),
                    table.clone().select(0, ids(right)),
                ],
                1,
            );
            let h = (children.matmul(w.clone()) + bias.clone()).tanh();
            table = Tensor::cat(vec![table, h], 0);
        }
        let roots: Vec<i64> = trees
            .iter()
            .enumerate()
            .map(|(i, t)| row_of(&rows, i, t, t.root()))
            .collect();
        table.select(0, ids(roots))
    }
}
