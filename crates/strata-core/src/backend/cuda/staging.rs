//! Host staging for the CUDA backend's strided copies and fills: an operand's byte extent
//! in device memory is brought to an aligned host buffer, the CPU's kernel runs on the same
//! plan rebased onto the buffers, and the written extent goes back.

use crate::backend::plan::{PerOperand, Plan};
use crate::{Error, Result};

/// Host memory aligned for every element type (16 bytes), at least `bytes` long.
pub(super) struct HostBuffer(Vec<u128>);

impl HostBuffer {
    /// A zeroed buffer of at least `bytes` bytes, or the error saying the host cannot spare
    /// them (a staged view of a huge tensor spans its whole extent).
    pub(super) fn new(bytes: usize) -> Result<HostBuffer> {
        let words = bytes.div_ceil(16);
        let mut v = Vec::new();
        v.try_reserve_exact(words).map_err(|_| Error::Unsupported {
            op: "copy",
            message: format!(
                "staging a strided CUDA copy needs {bytes} bytes of host memory, which this \
                 machine cannot allocate; copy a contiguous tensor, or a smaller view"
            ),
        })?;
        v.resize(words, 0u128);
        Ok(HostBuffer(v))
    }

    /// Address of the first byte.
    pub(super) fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }
}

/// The bytes operand `k` of `plan` spans from its address: the last element's offset plus
/// its size (0 for an empty loop). Strides are never negative (layouts have `usize`
/// strides), so the span starts at the address.
pub(super) fn extent(plan: &Plan, k: usize) -> usize {
    if plan.numel() == 0 {
        return 0;
    }
    let last: isize = plan
        .shape
        .iter()
        .zip(&plan.strides[k])
        .map(|(&n, &s)| (n as isize - 1) * s)
        .sum();
    last as usize + plan.dtypes[k].size()
}

/// Whether operand `k` is one dense run of elements (a coalesced one-dimensional loop with
/// the element size as its stride): every byte of its extent is one of its elements.
pub(super) fn is_dense(plan: &Plan, k: usize) -> bool {
    plan.shape.len() == 1 && plan.inner[k] == plan.dtypes[k].size() as isize
}

/// Whether operand `k` writes every byte of its extent (a dense output): otherwise the
/// extent has gaps whose device bytes must be brought to the host first, so that writing
/// the extent back leaves them as they were.
pub(super) fn covers_extent(plan: &Plan, k: usize) -> bool {
    extent(plan, k) == plan.numel() * plan.dtypes[k].size()
}

/// `plan` with its operands' addresses replaced by `ptrs` (same shape, strides and dtypes).
pub(super) fn rebased(plan: &Plan, ptrs: &[*mut u8]) -> Plan {
    Plan {
        shape: plan.shape.clone(),
        strides: plan.strides.clone(),
        inner: plan.inner.clone(),
        ptrs: ptrs.iter().copied().collect::<PerOperand<_>>(),
        dtypes: plan.dtypes.clone(),
        parallel: plan.parallel,
        tiled: plan.tiled,
        fresh_output: false,
        linear: plan.linear,
    }
}

/// Whether the byte ranges `[a, a + len)` and `[b, b + len)` overlap.
pub(super) fn overlaps(a: usize, b: usize, len: usize) -> bool {
    a < b.saturating_add(len) && b < a.saturating_add(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Operand;
    use crate::DType;

    #[test]
    fn extents_cover_strided_and_broadcast_operands() {
        // A [3, 4] f32 output, a transposed f64 input and a broadcast f32 row.
        let ops = [
            Operand {
                ptr: std::ptr::null_mut(),
                strides: vec![4, 1],
                dtype: DType::F32,
            },
            Operand {
                ptr: std::ptr::null_mut(),
                strides: vec![1, 3],
                dtype: DType::F64,
            },
            Operand {
                ptr: std::ptr::null_mut(),
                strides: vec![0, 1],
                dtype: DType::F32,
            },
        ];
        let plan = Plan::new(&[3, 4], &ops, &[1, 0], false);
        assert_eq!(extent(&plan, 0), 48);
        assert_eq!(extent(&plan, 1), 96);
        assert_eq!(extent(&plan, 2), 16);
        assert!(covers_extent(&plan, 0) && covers_extent(&plan, 1));
        assert!(!covers_extent(&plan, 2));
        // Dense means one dense run of the whole loop: a transposed operand keeps the loop
        // two-dimensional, so even the contiguous output is not one run here.
        assert!(!is_dense(&plan, 0) && !is_dense(&plan, 1));
        let same = Plan::new(&[3, 4], &ops[..1], &[1, 0], false);
        assert!(is_dense(&same, 0));
        // A column of a [3, 4] matrix: 3 elements spread over 9.
        let col = [Operand {
            ptr: std::ptr::null_mut(),
            strides: vec![4],
            dtype: DType::F32,
        }];
        let plan = Plan::new(&[3], &col, &[0], false);
        assert_eq!(extent(&plan, 0), 36);
        assert!(!covers_extent(&plan, 0) && !is_dense(&plan, 0));
        let r = rebased(&plan, &[8 as *mut u8]);
        assert_eq!((r.ptrs[0] as usize, r.shape.as_slice()), (8, &[3][..]));
    }

    #[test]
    fn overlap_is_symmetric_and_touching_ranges_do_not_overlap() {
        assert!(overlaps(0, 8, 16) && overlaps(8, 0, 16));
        assert!(!overlaps(0, 16, 16) && !overlaps(16, 0, 16));
        assert!(!overlaps(0, 0, 0));
        let mut b = HostBuffer::new(17).unwrap();
        assert_eq!(b.ptr() as usize % 16, 0);
    }
}
