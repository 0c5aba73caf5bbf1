//! The copy: one output row is its parent's past rows and its own new
//! one, head by head, after the shapes are checked against each other.

/// The output's shape, or why the inputs do not fit together.
pub(crate) fn out_shape(
    past: [usize; 4],
    new: [usize; 4],
    parents: &[i64],
) -> Result<[usize; 4], String> {
    let [rows_before, h, t, d] = past;
    let [rows, nh, one, nd] = new;
    if (nh, one, nd) != (h, 1, d) || parents.len() != rows {
        return Err(format!(
            "GatherConcat: past {past:?}, new {new:?} and {} parents do not fit together",
            parents.len()
        ));
    }
    if let Some(p) = parents
        .iter()
        .find(|&&p| !usize::try_from(p).is_ok_and(|p| p < rows_before))
    {
        return Err(format!(
            "GatherConcat: parent {p} is not one of the {rows_before} past rows"
        ));
    }
    Ok([rows, h, t + 1, d])
}

/// Row `r` of the output, `concat(past[p], new[r])` along the time axis;
/// shapes checked by [`out_shape`].
pub(crate) fn gather_concat_row(
    past: &[f32],
    ps: [usize; 4],
    new: &[f32],
    p: usize,
    r: usize,
    out: &mut [f32],
) {
    let [_, h, t, d] = ps;
    let (past_head, out_head) = (t * d, (t + 1) * d);
    for j in 0..h {
        let o = &mut out[j * out_head..(j + 1) * out_head];
        let src = (p * h + j) * past_head;
        o[..past_head].copy_from_slice(&past[src..src + past_head]);
        o[past_head..].copy_from_slice(&new[(r * h + j) * d..(r * h + j + 1) * d]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gather_then_append_in_one_pass() {
        // Past: 3 rows, 2 heads, 2 steps, dim 1; value = 10 * row + 2 * head + step.
        let past: Vec<f32> = (0..3)
            .flat_map(|r| {
                (0..2).flat_map(move |h| (0..2).map(move |s| (10 * r + 2 * h + s) as f32))
            })
            .collect();
        let new: Vec<f32> = (0..4 * 2).map(|i| 100.0 + i as f32).collect();
        let parents = [2, 0, 0, 1];
        let shape = out_shape([3, 2, 2, 1], [4, 2, 1, 1], &parents).unwrap();
        assert_eq!(shape, [4, 2, 3, 1]);
        let mut out = vec![0.0; 4 * 2 * 3];
        for (r, row) in out.chunks_mut(2 * 3).enumerate() {
            gather_concat_row(&past, [3, 2, 2, 1], &new, parents[r] as usize, r, row);
        }
        #[rustfmt::skip]
        let want = [
            20.0, 21.0, 100.0, 22.0, 23.0, 101.0,
            0.0, 1.0, 102.0, 2.0, 3.0, 103.0,
            0.0, 1.0, 104.0, 2.0, 3.0, 105.0,
            10.0, 11.0, 106.0, 12.0, 13.0, 107.0,
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn parents_and_shapes_that_do_not_fit_are_errors() {
        let e = out_shape([3, 2, 2, 1], [2, 2, 1, 1], &[0, 3]).unwrap_err();
        assert!(e.contains("parent 3 is not one of the 3 past rows"), "{e}");
        assert!(out_shape([3, 2, 2, 1], [2, 2, 1, 1], &[0, -1]).is_err());
        assert!(out_shape([3, 2, 2, 1], [2, 2, 1, 1], &[0]).is_err());
        assert!(out_shape([3, 2, 2, 1], [2, 3, 1, 1], &[0, 1]).is_err());
        assert!(out_shape([3, 2, 2, 1], [2, 2, 2, 1], &[0, 1]).is_err());
    }
}
