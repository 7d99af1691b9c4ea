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
