//! The order in which dimensions are laid out in memory, and dense strides in that order.
//!
//! PyTorch lays a new output out in the stride order of its operands (an op on two transposed
//! tensors gives a transposed result). These functions reproduce its ordering rules exactly,
//! including how ties and broadcast (stride-0) dimensions are treated.

use super::Dims;

/// One operand's view of the iteration: its strides aligned to the iteration shape.
#[derive(Debug, Clone, Copy)]
pub struct OrderOperand<'a> {
    /// Strides in elements, one per dimension of the iteration shape (0 where broadcast).
    pub strides: &'a [usize],
    /// True for an output that will be written (it sorts reduced dimensions first).
    pub is_reduction_output: bool,
}

/// The permutation of dimensions from fastest-varying to slowest, as PyTorch's
/// `TensorIterator::reorder_dimensions`: `perm[0]` is the innermost dimension.
pub fn iteration_order(shape: &[usize], operands: &[OrderOperand<'_>]) -> Dims {
    let n = shape.len();
    let mut perm: Dims = (0..n).rev().collect();
    if n <= 1 {
        return perm;
    }
    // 1: dim0 goes after dim1; -1: before; 0: no opinion.
    let should_swap = |d0: usize, d1: usize| -> i32 {
        for op in operands {
            let (s0, s1) = (op.strides[d0], op.strides[d1]);
            if op.is_reduction_output && ((s0 == 0) != (s1 == 0)) {
                return if s1 == 0 { 1 } else { -1 };
            }
            if s0 == 0 || s1 == 0 {
                continue;
            }
            if s0 < s1 {
                return -1;
            }
            if s0 > s1 {
                return 1;
            }
            if shape[d0] > shape[d1] {
                return 1;
            }
        }
        0
    };
    for i in 1..n {
        let mut d1 = i;
        for d0 in (0..i).rev() {
            let c = should_swap(perm[d0], perm[d1]);
            if c > 0 {
                perm.swap(d0, d1);
                d1 = d0;
            } else if c < 0 {
                break;
            }
        }
    }
    perm
}

/// Strides for a new output of `shape` laid out in the order `perm` (fastest first), as
/// TensorIterator allocates it: row-major when the order is the natural one, else dense in
/// that order (multiplying by every size, so dimensions after a size-0 one get stride 0).
pub fn output_strides(shape: &[usize], perm: &[usize]) -> Dims {
    let n = shape.len();
    let natural = perm.iter().enumerate().all(|(j, &p)| p == n - 1 - j);
    if natural {
        return Dims::from_slice(super::Layout::contiguous(shape, 0).strides());
    }
    let mut strides: Dims = smallvec::smallvec![0usize; n];
    let mut next = 1usize;
    for &d in perm {
        strides[d] = next;
        next = next.saturating_mul(shape[d]);
    }
    strides
}

/// PyTorch's `infer_dense_strides`: dense strides that keep the memory order of a (possibly
/// overlapping or gapped) tensor, used when cloning a tensor that is not already dense.
pub fn infer_dense_strides(sizes: &[usize], strides: &[usize]) -> Vec<usize> {
    let n = sizes.len();
    let mut perm: Vec<usize> = (0..n).rev().collect();
    let should_swap = |d0: usize, d1: usize| -> i32 {
        let (s0, s1) = (strides[d0], strides[d1]);
        if s0 == 0 || s1 == 0 {
            0
        } else if s0 < s1 {
            -1
        } else if s0 > s1 || sizes[d0] > sizes[d1] {
            1
        } else {
            0
        }
    };
    for i in 1..n {
        let mut d1 = i;
        for d0 in (0..i).rev() {
            let c = should_swap(perm[d0], perm[d1]);
            if c > 0 {
                perm.swap(d0, d1);
                d1 = d0;
            } else if c < 0 {
                break;
            }
        }
    }
    let mut out = vec![0usize; n];
    let mut cur = 1usize;
    for &d in &perm {
        out[d] = cur;
        if sizes[d] > 1 {
            cur *= sizes[d];
        }
    }
    out
}

/// Strides of a dense copy of `layout` that keeps its memory order, as PyTorch's `to()` and
/// `empty_like` give it: the same strides when the layout is already non-overlapping and
/// dense, else [`infer_dense_strides`]. A size-1 dimension's stride is kept in the first case
/// and recomputed in the second, which matters where such a copy's strides decide another
/// layout (an element-wise op converting an input to its common dtype).
pub fn dense_copy_strides(layout: &super::Layout) -> Vec<usize> {
    if layout.is_non_overlapping_and_dense() {
        layout.strides().to_vec()
    } else {
        infer_dense_strides(layout.sizes(), layout.strides())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(s: &[usize]) -> OrderOperand<'_> {
        OrderOperand {
            strides: s,
            is_reduction_output: false,
        }
    }

    #[test]
    fn transposed_inputs_give_transposed_output() {
        let shape = [3, 4];
        let perm = iteration_order(&shape, &[op(&[1, 3]), op(&[1, 3])]);
        assert_eq!(perm.as_slice(), [0, 1]);
        assert_eq!(output_strides(&shape, &perm).as_slice(), [1, 3]);
    }

    #[test]
    fn contiguous_inputs_keep_row_major() {
        let shape = [3, 4];
        let perm = iteration_order(&shape, &[op(&[4, 1])]);
        assert_eq!(output_strides(&shape, &perm).as_slice(), [4, 1]);
    }

    #[test]
    fn dense_copies_keep_dense_strides_and_order_the_rest() {
        // PyTorch 2.15: `x.float().stride()` for these layouts.
        let dense = super::super::Layout::new(vec![3, 1, 4], vec![1, 7, 3], 0);
        assert_eq!(dense_copy_strides(&dense), vec![1, 7, 3]);
        let expanded = super::super::Layout::new(vec![1, 2, 2, 2], vec![2, 1, 0, 2], 1);
        assert_eq!(dense_copy_strides(&expanded), vec![4, 1, 2, 4]);
        let gapped = super::super::Layout::new(vec![2, 4, 1], vec![12, 1, 8], 0);
        assert_eq!(dense_copy_strides(&gapped), vec![4, 1, 4]);
    }

    #[test]
    fn overlapping_clone_keeps_order() {
        assert_eq!(infer_dense_strides(&[4, 4], &[1, 3]), vec![1, 4]);
    }
}
