//! Broadcasting: aligning shapes from the right, size-1 dimensions stretching.

/// Why two shapes do not broadcast: the sizes of `a` and `b` at dimension `dim` of the
/// result, counted from the left of the broadcast shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BroadcastMismatch {
    /// Size in the first shape.
    pub size_a: usize,
    /// Size in the second shape.
    pub size_b: usize,
    /// Dimension of the result where they disagree.
    pub dim: usize,
}

impl BroadcastMismatch {
    /// PyTorch's wording of the rule, naming both sizes and the dimension.
    pub fn describe(&self) -> String {
        format!(
            "the size of tensor a ({}) must match the size of tensor b ({}) at non-singleton \
             dimension {}",
            self.size_a, self.size_b, self.dim
        )
    }
}

/// The broadcast shape of `a` and `b`.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, BroadcastMismatch> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    // Right to left, as PyTorch, so a mismatch is reported at its innermost dimension.
    for (i, slot) in out.iter_mut().enumerate().rev() {
        let da = (i + a.len()).checked_sub(n).map(|j| a[j]).unwrap_or(1);
        let db = (i + b.len()).checked_sub(n).map(|j| b[j]).unwrap_or(1);
        *slot = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(BroadcastMismatch {
                size_a: da,
                size_b: db,
                dim: i,
            });
        };
    }
    Ok(out)
}

/// Strides (in elements) that read a tensor of `sizes`/`strides` as if it had the broadcast
/// shape `target`: new leading dimensions and stretched size-1 dimensions get stride 0.
/// `target` must be a broadcast of `sizes`.
pub fn broadcast_strides(sizes: &[usize], strides: &[usize], target: &[usize]) -> Vec<usize> {
    let lead = target.len() - sizes.len();
    (0..target.len())
        .map(|i| {
            if i < lead || (sizes[i - lead] == 1 && target[i] != 1) {
                0
            } else {
                strides[i - lead]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(broadcast_shapes(&[3, 1], &[4]).unwrap(), vec![3, 4]);
        assert_eq!(broadcast_shapes(&[], &[2, 2]).unwrap(), vec![2, 2]);
        assert_eq!(broadcast_shapes(&[0], &[1]).unwrap(), vec![0]);
        let e = broadcast_shapes(&[2, 3, 4], &[2, 2]).unwrap_err();
        assert_eq!((e.size_a, e.size_b, e.dim), (4, 2, 2));
    }

    #[test]
    fn strides() {
        assert_eq!(
            broadcast_strides(&[3, 1], &[1, 1], &[2, 3, 4]),
            vec![0, 1, 0]
        );
    }
}
