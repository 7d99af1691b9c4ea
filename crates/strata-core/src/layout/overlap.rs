//! Memory overlap between a written tensor and itself or its inputs (PyTorch's rules).

use super::Layout;

/// Whether a tensor's own elements can share memory locations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InternalOverlap {
    /// Provably none (the layout is dense and non-overlapping).
    No,
    /// Certainly: a dimension of size > 1 has stride 0 (an expanded tensor).
    Yes,
    /// Cannot be decided cheaply; writes are allowed, as in PyTorch.
    TooHard,
}

/// Whether no two of a tensor's elements can share a memory location, by a sufficient test:
/// with the dimensions of more than one element taken by increasing stride, each stride
/// steps past every location the smaller ones reach. True for every dense layout and for
/// row-strided views such as the first columns of a wider matrix; false where it cannot
/// tell (a kernel then writes through a buffer).
pub fn provably_non_overlapping(l: &Layout) -> bool {
    if l.is_non_overlapping_and_dense() || l.numel() == 0 {
        return true;
    }
    let mut dims: smallvec::SmallVec<[(usize, usize); 6]> = l
        .sizes()
        .iter()
        .zip(l.strides())
        .filter(|(&n, _)| n > 1)
        .map(|(&n, &st)| (n, st))
        .collect();
    dims.sort_unstable_by_key(|&(_, st)| st);
    // The furthest location the dimensions taken so far reach from the first element.
    let mut reach = 0usize;
    for (n, st) in dims {
        if st <= reach {
            return false;
        }
        reach = match (n - 1).checked_mul(st).and_then(|r| r.checked_add(reach)) {
            Some(r) => r,
            None => return false,
        };
    }
    true
}

/// How two tensors on the same storage overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// They touch disjoint memory.
    No,
    /// Exactly the same elements in the same positions: safe for element-wise writes.
    Full,
    /// Some shared locations in different positions: an element-wise write would read
    /// values it already overwrote.
    Partial,
    /// Cannot be decided cheaply.
    TooHard,
}

/// PyTorch's `has_internal_overlap`.
pub fn internal_overlap(l: &Layout) -> InternalOverlap {
    if l.is_non_overlapping_and_dense() {
        return InternalOverlap::No;
    }
    if l.sizes()
        .iter()
        .zip(l.strides())
        .any(|(&s, &st)| s > 1 && st == 0)
    {
        return InternalOverlap::Yes;
    }
    InternalOverlap::TooHard
}

/// PyTorch's `get_overlap_status` for two layouts of the same storage.
pub fn overlap(a: &Layout, b: &Layout) -> Overlap {
    if a == b {
        return Overlap::Full;
    }
    if a.numel() == 0 || b.numel() == 0 {
        return Overlap::No;
    }
    if !a.is_non_overlapping_and_dense() || !b.is_non_overlapping_and_dense() {
        return Overlap::TooHard;
    }
    let (a0, a1) = (a.offset(), a.offset() + a.numel());
    let (b0, b1) = (b.offset(), b.offset() + b.numel());
    if a0 == b0 && a1 == b1 {
        return if a.strides() == b.strides() {
            Overlap::Full
        } else {
            Overlap::Partial
        };
    }
    if a0 < b1 && b0 < a1 {
        return Overlap::Partial;
    }
    Overlap::No
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expanded_overlaps_itself() {
        let l = Layout::new(vec![3, 3], vec![0, 1], 0);
        assert_eq!(internal_overlap(&l), InternalOverlap::Yes);
        let l = Layout::new(vec![4, 4], vec![1, 3], 0);
        assert_eq!(internal_overlap(&l), InternalOverlap::TooHard);
    }

    #[test]
    fn strided_views_that_skip_memory_do_not_overlap_themselves() {
        // The first 3 columns of a [4, 5] matrix, and of a [2, 4, 5] batch of them.
        assert!(provably_non_overlapping(&Layout::new(
            vec![4, 3],
            vec![5, 1],
            0
        )));
        assert!(provably_non_overlapping(&Layout::new(
            vec![2, 4, 3],
            vec![20, 5, 1],
            7
        )));
        // Every other element; a transposed column block; size-1 dimensions of any stride.
        assert!(provably_non_overlapping(&Layout::new(vec![3], vec![2], 0)));
        assert!(provably_non_overlapping(&Layout::new(
            vec![3, 4],
            vec![1, 5],
            0
        )));
        assert!(provably_non_overlapping(&Layout::new(
            vec![1, 3],
            vec![0, 1],
            0
        )));
        // Expanded, and rows that step back into the previous row.
        assert!(!provably_non_overlapping(&Layout::new(
            vec![3, 3],
            vec![0, 1],
            0
        )));
        assert!(!provably_non_overlapping(&Layout::new(
            vec![4, 4],
            vec![3, 1],
            0
        )));
        assert!(!provably_non_overlapping(&Layout::new(
            vec![4, 4],
            vec![1, 3],
            0
        )));
    }

    #[test]
    fn transpose_of_self_is_partial() {
        let a = Layout::new(vec![3, 3], vec![3, 1], 0);
        let t = Layout::new(vec![3, 3], vec![1, 3], 0);
        assert_eq!(overlap(&a, &a.clone()), Overlap::Full);
        assert_eq!(overlap(&a, &t), Overlap::Partial);
        let half = Layout::new(vec![3], vec![1], 3);
        let other = Layout::new(vec![3], vec![1], 0);
        assert_eq!(overlap(&half, &other), Overlap::No);
    }
}
