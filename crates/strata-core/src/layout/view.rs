//! View compatibility: which shapes a strided tensor can be re-viewed as without a copy.

use super::int_arg::IntArg;

/// Resolves one `-1` in a requested shape against `numel` elements (PyTorch's `infer_size`).
/// Errors describe the mismatch in words.
pub fn infer_size<S: IntArg>(shape: &[S], numel: usize) -> Result<Vec<usize>, String> {
    let mut infer_at = None;
    let mut known = 1usize;
    for (i, s) in shape.iter().map(|s| s.signed()).enumerate() {
        if s == -1 {
            if infer_at.replace(i).is_some() {
                return Err("only one dimension can be inferred (more than one -1 given)".into());
            }
        } else if s < 0 {
            return Err(format!("invalid shape dimension {s} at index {i}"));
        } else {
            known = known
                .checked_mul(s as usize)
                .ok_or_else(|| format!("shape {shape:?} has too many elements"))?;
        }
    }
    let mismatch = || format!("shape {shape:?} is invalid for input of size {numel}");
    let mut out: Vec<usize> = shape.iter().map(|s| s.signed().max(0) as usize).collect();
    match infer_at {
        Some(i) => {
            if known == 0 || !numel.is_multiple_of(known) {
                return Err(mismatch());
            }
            out[i] = numel / known;
        }
        None if known != numel => return Err(mismatch()),
        None => {}
    }
    Ok(out)
}

/// PyTorch's `computeStride`: strides that view `old_sizes`/`old_strides` as `new_sizes`
/// (same element count), or `None` when a new dimension would span two chunks of memory
/// that are not evenly strided.
pub fn compute_stride(
    old_sizes: &[usize],
    old_strides: &[usize],
    new_sizes: &[usize],
) -> Option<Vec<usize>> {
    if old_sizes.is_empty() {
        return Some(vec![1; new_sizes.len()]);
    }
    let numel: usize = old_sizes.iter().product();
    if numel == 0 {
        if old_sizes == new_sizes {
            return Some(old_strides.to_vec());
        }
        return Some(super::contiguous_strides(new_sizes));
    }
    let mut new_strides = vec![0usize; new_sizes.len()];
    let mut view_d = new_sizes.len() as isize - 1;
    let mut chunk_base_stride = *old_strides.last()?;
    let mut tensor_numel = 1usize;
    let mut view_numel = 1usize;
    for tensor_d in (0..old_sizes.len()).rev() {
        tensor_numel *= old_sizes[tensor_d];
        let chunk_ends = tensor_d == 0
            || (old_sizes[tensor_d - 1] != 1
                && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel * chunk_base_stride;
                view_numel *= new_sizes[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = old_strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    if view_d != -1 {
        return None;
    }
    Some(new_strides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infers_one_dim() {
        assert_eq!(infer_size(&[2i64, -1], 6).unwrap(), vec![2, 3]);
        assert!(infer_size(&[4i64], 3).is_err());
        assert!(infer_size(&[-1i64, -1], 4).is_err());
        assert!(infer_size(&[0i64, -1], 0).is_err());
        assert_eq!(infer_size::<i64>(&[], 1).unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn transposed_cannot_flatten() {
        assert_eq!(compute_stride(&[4, 3], &[1, 4], &[12]), None);
    }

    #[test]
    fn column_slice_splits_but_does_not_merge() {
        assert_eq!(
            compute_stride(&[4, 3], &[6, 1], &[2, 2, 3]),
            Some(vec![12, 6, 1])
        );
        assert_eq!(compute_stride(&[4, 3], &[6, 1], &[12]), None);
    }

    #[test]
    fn size_one_dims_anywhere() {
        assert_eq!(
            compute_stride(&[2, 3], &[3, 1], &[1, 2, 1, 3, 1]),
            Some(vec![6, 3, 3, 1, 1])
        );
    }
}
