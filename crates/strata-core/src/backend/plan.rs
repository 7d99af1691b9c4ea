//! Element-wise loops as every backend receives them: the operands of a loop
//! ([`Operand`]), and the [`Plan`] an op builds from them (dimensions ordered as PyTorch
//! orders them, coalesced, strides in bytes). How a plan is walked is each backend's own
//! business (the CPU's walker is `cpu/run/`).
//!
//! Everything a plan holds is inline up to six dimensions and four operands ([`SmallVec`]),
//! so planning an ordinary loop never touches the heap.

use smallvec::SmallVec;

use crate::dtype::DType;

/// Per-dimension sizes or strides of a loop: inline up to six dimensions, so planning a loop
/// does not allocate for tensors of ordinary rank.
pub use crate::layout::Dims;

/// One operand of an element-wise loop, described before ordering and coalescing.
#[derive(Debug, Clone)]
pub struct Operand {
    /// Address of the operand's first element.
    pub ptr: *mut u8,
    /// Strides in elements over the loop's shape (0 along broadcast dimensions).
    pub strides: Vec<usize>,
    /// The operand's dtype.
    pub dtype: DType,
}

/// Operands stored inline (an output and up to three inputs).
pub(crate) const OPS: usize = 4;

/// Byte strides of one operand over the loop's dimensions.
pub(crate) type ByteStrides = SmallVec<[isize; 6]>;
/// One value per operand.
pub(crate) type PerOperand<T> = SmallVec<[T; OPS]>;

/// A loop ready to run: dimensions ordered fastest first and coalesced, strides in bytes.
#[derive(Debug)]
pub struct Plan {
    pub(crate) shape: SmallVec<[usize; 6]>,
    pub(crate) strides: PerOperand<ByteStrides>,
    /// Each operand's byte stride along the innermost dimension (`strides[k][0]`).
    pub(crate) inner: PerOperand<isize>,
    pub(crate) ptrs: PerOperand<*mut u8>,
    pub(crate) dtypes: PerOperand<DType>,
    pub(crate) parallel: bool,
    pub(crate) tiled: bool,
    /// Operand 0 is a fresh output that nothing reads until the op returns.
    pub(crate) fresh_output: bool,
    /// One dimension along which every operand is stored contiguously from its address
    /// (each byte stride is its dtype's size): what a kernel's direct loop for short runs
    /// needs to know, told once here instead of checked per operand.
    pub(crate) linear: bool,
}

/// Side of the square tiles a loop with a transposed operand is walked in (elements).
pub(crate) const TILE: usize = 64;

// SAFETY: a Plan only carries addresses. They are dereferenced by kernels while the op holds
// the storages' locks, and chunks run in parallel only when `parallel` was granted by the op,
// which it does only when no two chunks can write the same element or read an element
// another chunk writes.
unsafe impl Sync for Plan {}
// SAFETY: as above.
unsafe impl Send for Plan {}

impl Plan {
    /// Builds the loop over `shape` for `operands` (output first), visiting dimensions in the
    /// order `perm` (fastest first, see [`crate::layout::order::iteration_order`]).
    /// `parallel` allows splitting the loop across the pool: the caller asserts that the
    /// output has no internal overlap, that every input is either disjoint from the output
    /// or identical to it, and that kernels only write operand 0 (a parallel loop may be
    /// walked in tiles whose output is staged in a buffer).
    pub fn new(shape: &[usize], operands: &[Operand], perm: &[usize], parallel: bool) -> Plan {
        Plan::from_parts(
            shape,
            operands.iter().map(|o| (o.ptr, &o.strides[..], o.dtype)),
            perm,
            parallel,
        )
    }

    /// [`Plan::new`] from `(address, element strides, dtype)` triples, output first.
    pub fn from_parts<'a>(
        shape: &[usize],
        operands: impl Iterator<Item = (*mut u8, &'a [usize], DType)>,
        perm: &[usize],
        parallel: bool,
    ) -> Plan {
        let mut dims: SmallVec<[usize; 6]> = perm.iter().map(|&d| shape[d]).collect();
        let mut strides = PerOperand::new();
        let mut ptrs = PerOperand::new();
        let mut dtypes = PerOperand::new();
        for (ptr, op_strides, dtype) in operands {
            let size = dtype.size() as isize;
            strides.push(
                perm.iter()
                    .map(|&d| op_strides[d] as isize * size)
                    .collect::<ByteStrides>(),
            );
            ptrs.push(ptr);
            dtypes.push(dtype);
        }
        if dims.is_empty() {
            dims.push(1);
            for s in &mut strides {
                s.push(0);
            }
        }
        coalesce(&mut dims, &mut strides);
        // When some operand walks the second dimension faster than the first (a transposed
        // operand), visiting whole rows would stride through memory for that operand; walk
        // square tiles instead so both operands stay in cache. Only loops that may run in any
        // order (the ones allowed to run in parallel) are reordered.
        let tiled = parallel
            && dims.len() >= 2
            && dims[0] >= TILE / 2
            && dims[1] >= TILE / 2
            && strides
                .iter()
                .any(|s| s[1] != 0 && s[1].unsigned_abs() < s[0].unsigned_abs());
        let inner: PerOperand<isize> = strides.iter().map(|s| s[0]).collect();
        let linear = dims.len() == 1
            && inner
                .iter()
                .zip(&dtypes)
                .all(|(&s, d)| s == d.size() as isize);
        Plan {
            shape: dims,
            strides,
            inner,
            ptrs,
            dtypes,
            parallel,
            tiled,
            fresh_output: false,
            linear,
        }
    }

    /// A one-dimensional loop over `numel` elements that every operand stores contiguously
    /// (in the same order) from its address: the plan [`Plan::new`] coalesces a loop over
    /// same-shaped dense operands with equal strides into, built without ordering or
    /// coalescing. `parallel` as for [`Plan::new`].
    #[inline(always)]
    pub fn linear(numel: usize, operands: &[(*mut u8, DType)], parallel: bool) -> Plan {
        if operands.len() > OPS {
            return Plan::linear_spilled(numel, operands, parallel);
        }
        // Filled in place as fixed arrays and handed to the small vectors whole: pushing
        // operand by operand into four nested small vectors cost more than the kernel of a
        // one-element op.
        let n = operands.len();
        let mut ptrs = [std::ptr::null_mut(); OPS];
        let mut dtypes = [DType::Bool; OPS];
        let mut inner = [0isize; OPS];
        for (k, &(ptr, dtype)) in operands.iter().enumerate() {
            ptrs[k] = ptr;
            dtypes[k] = dtype;
            inner[k] = dtype.size() as isize;
        }
        let strides = inner.map(|size| ByteStrides::from_buf_and_len([size, 0, 0, 0, 0, 0], 1));
        Plan {
            shape: SmallVec::from_buf_and_len([numel, 0, 0, 0, 0, 0], 1),
            strides: PerOperand::from_buf_and_len(strides, n),
            inner: PerOperand::from_buf_and_len(inner, n),
            ptrs: PerOperand::from_buf_and_len(ptrs, n),
            dtypes: PerOperand::from_buf_and_len(dtypes, n),
            parallel,
            tiled: false,
            fresh_output: false,
            linear: true,
        }
    }

    /// Lets go of a one-dimensional plan whose vectors all stayed inline (every
    /// [`Plan::linear`] of up to [`OPS`] operands, and the loops that coalesce to one
    /// dimension): it owns no heap memory, so nothing is lost by skipping its drop, which
    /// walks every small vector to ask whether it spilled (about 3% of what a whole
    /// one-element op costs). Any other plan is dropped as usual.
    #[inline(always)]
    pub(crate) fn discard_inline(self) {
        // Each operand's strides were collected with as many entries as the shape had
        // dimensions, and coalescing only shortens both, so they spilled exactly when the
        // shape did; the other per-operand vectors have the operand count, as `strides`.
        if self.linear && self.shape.len() == 1 && !self.strides.spilled() && !self.shape.spilled()
        {
            debug_assert!(self.strides.iter().all(|s| !s.spilled()));
            debug_assert!(!self.inner.spilled() && !self.ptrs.spilled() && !self.dtypes.spilled());
            std::mem::forget(self);
        }
    }

    /// [`Plan::linear`] with more operands than fit inline.
    #[cold]
    fn linear_spilled(numel: usize, operands: &[(*mut u8, DType)], parallel: bool) -> Plan {
        let operands = operands
            .iter()
            .map(|&(ptr, dtype)| (ptr, &[1usize][..], dtype));
        Plan::from_parts(&[numel], operands, &[0], parallel)
    }

    /// Marks operand 0 as a fresh output that nothing reads until the op returns, so a
    /// backend may write it without reading it first (the CPU's streaming stores).
    /// (A setter rather than a builder: a plan is large, and moving it costs a copy.)
    pub fn mark_fresh_output(&mut self) {
        self.fresh_output = true;
    }

    /// Total elements visited.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// How many operands the loop has (the output first).
    pub fn num_operands(&self) -> usize {
        self.ptrs.len()
    }

    /// The dtype of operand `i`.
    pub fn dtype(&self, i: usize) -> DType {
        self.dtypes[i]
    }

    /// Whether the loop is walked in tiles (some operand is transposed against the others).
    #[cfg(test)]
    pub fn is_tiled(&self) -> bool {
        self.tiled
    }
}

/// PyTorch's `coalesce_dimensions`: merges neighbouring dimensions that every operand walks
/// as one linear stretch, and drops size-1 dimensions.
pub(crate) fn coalesce(shape: &mut SmallVec<[usize; 6]>, strides: &mut [ByteStrides]) {
    if shape.len() <= 1 {
        return;
    }
    let can_merge = |shape: &[usize], strides: &[ByteStrides], d0: usize, d1: usize| {
        let (s0, s1) = (shape[d0], shape[d1]);
        if s0 == 1 || s1 == 1 {
            return true;
        }
        strides.iter().all(|st| st[d0] * s0 as isize == st[d1])
    };
    let mut prev = 0;
    for d in 1..shape.len() {
        if can_merge(shape, strides, prev, d) {
            if shape[prev] == 1 {
                for st in strides.iter_mut() {
                    st[prev] = st[d];
                }
            }
            shape[prev] *= shape[d];
        } else {
            prev += 1;
            if prev != d {
                for st in strides.iter_mut() {
                    st[prev] = st[d];
                }
                shape[prev] = shape[d];
            }
        }
    }
    shape.truncate(prev + 1);
    for st in strides.iter_mut() {
        st.truncate(prev + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strides(v: &[isize]) -> ByteStrides {
        v.iter().copied().collect()
    }

    #[test]
    fn coalesces_contiguous_dims() {
        let mut shape: SmallVec<[usize; 6]> = smallvec::smallvec![4, 3, 2];
        let mut st = [strides(&[4, 16, 48]), strides(&[0, 0, 0])];
        coalesce(&mut shape, &mut st);
        assert_eq!(shape.as_slice(), [24]);
        assert_eq!((st[0].as_slice(), st[1].as_slice()), (&[4][..], &[0][..]));
    }

    #[test]
    fn keeps_gapped_dims() {
        let mut shape: SmallVec<[usize; 6]> = smallvec::smallvec![3, 4];
        let mut st = [strides(&[4, 16])];
        coalesce(&mut shape, &mut st);
        assert_eq!(shape.as_slice(), [3, 4]);
    }
}
