//! Which gradients share a bucket: assigned once, in reverse registration order (roughly the
//! order backward produces them), one dtype per bucket, each bucket at most the cap unless a
//! single gradient is larger. PyTorch starts with a 1 MiB first bucket and reassigns after
//! the first iteration in the order gradients became ready; strata keeps this fixed
//! assignment so that each rank's memory is known before the first step.

use strata_core::DType;

/// The buckets, each the indices (into the registration order) of its parameters, in the
/// order their gradients are laid out in the bucket.
pub(crate) fn assign(params: &[(usize, DType)], cap_bytes: usize) -> Vec<Vec<usize>> {
    let mut buckets: Vec<Vec<usize>> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut open_bytes = 0usize;
    let mut open_dtype: Option<DType> = None;
    for i in (0..params.len()).rev() {
        let (numel, dtype) = params[i];
        let bytes = numel.saturating_mul(dtype.size());
        let fits = open_dtype == Some(dtype) && open_bytes.saturating_add(bytes) <= cap_bytes;
        if !open.is_empty() && !fits {
            buckets.push(std::mem::take(&mut open));
            open_bytes = 0;
        }
        open.push(i);
        open_bytes = open_bytes.saturating_add(bytes);
        open_dtype = Some(dtype);
    }
    if !open.is_empty() {
        buckets.push(open);
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_order_capped_and_one_dtype_each() {
        let f = DType::F32;
        // 4 bytes per element: 100, 50, 10, 300 elements; cap 600 bytes.
        let params = [(100, f), (50, f), (10, f), (300, f)];
        assert_eq!(assign(&params, 600), vec![vec![3], vec![2, 1], vec![0]]);
        assert_eq!(assign(&params, 4000), vec![vec![3, 2, 1, 0]]);
        let mixed = [(10, f), (10, DType::F64), (10, f)];
        assert_eq!(assign(&mixed, 4000), vec![vec![2], vec![1], vec![0]]);
        assert_eq!(assign(&[], 100), Vec::<Vec<usize>>::new());
        // A gradient larger than the cap has a bucket of its own.
        assert_eq!(assign(&[(1000, f), (1, f)], 16), vec![vec![1], vec![0]]);
    }
}
