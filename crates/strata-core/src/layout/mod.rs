//! Layout: sizes, strides (in elements) and a storage offset, and every rule about them.
//!
//! Pure arithmetic, no unsafe: contiguity, density, how many storage elements a layout spans,
//! view compatibility ([`view`]), broadcasting ([`broadcast`]), the order outputs are laid out
//! in ([`order`]) and overlap between tensors ([`overlap`]).

pub mod broadcast;
pub mod int_arg;
pub mod order;
pub mod overlap;
pub mod shape_arg;
pub mod view;

/// Sizes or strides of one layout: up to six dimensions are stored inline, so copying a
/// layout (which every op does to read a tensor without holding its lock) never allocates.
pub type Dims = smallvec::SmallVec<[usize; 6]>;

/// `Dims` holding `values`. Up to six are copied into the inline buffer by a loop of fixed
/// length, which the compiler unrolls: `SmallVec::from_slice` calls the C library's `memcpy`
/// for a copy of a few words, and layouts are copied on every op.
#[inline]
fn dims_of(values: &[usize]) -> Dims {
    if values.len() > 6 {
        return Dims::from_slice(values);
    }
    let mut buf = [0usize; 6];
    for (i, d) in buf.iter_mut().enumerate() {
        if let Some(&v) = values.get(i) {
            *d = v;
        }
    }
    Dims::from_buf_and_len(buf, values.len())
}

/// Where a tensor's elements are in its storage: element `(i0, i1, ...)` lives at
/// `offset + Σ i_k * strides[k]`, counted in elements.
#[derive(Debug, PartialEq, Eq, Hash, Default)]
pub struct Layout {
    sizes: Dims,
    strides: Dims,
    offset: usize,
}

impl Clone for Layout {
    /// A plain copy of the inline dimensions (`SmallVec`'s own `Clone` goes element by
    /// element through an iterator, and layouts are copied on every op).
    fn clone(&self) -> Self {
        Layout {
            sizes: dims_of(&self.sizes),
            strides: dims_of(&self.strides),
            offset: self.offset,
        }
    }
}

/// Row-major strides for `sizes`; a size-0 dimension counts as 1, as PyTorch does.
pub fn contiguous_strides(sizes: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; sizes.len()];
    let mut acc = 1usize;
    for d in (0..sizes.len()).rev() {
        strides[d] = acc;
        acc = acc.saturating_mul(sizes[d].max(1));
    }
    strides
}

/// Channels-last strides for a 4-d `[N, C, H, W]` shape (C fastest, then W, H, N); other
/// ranks get row-major strides.
pub fn channels_last_strides(sizes: &[usize]) -> Vec<usize> {
    if sizes.len() != 4 {
        return contiguous_strides(sizes);
    }
    let mut s = vec![0; 4];
    s[1] = 1;
    s[3] = sizes[1].max(1);
    s[2] = s[3] * sizes[3].max(1);
    s[0] = s[2] * sizes[2].max(1);
    s
}

/// The number of elements of a shape, or `None` if it overflows.
pub fn checked_numel(sizes: &[usize]) -> Option<usize> {
    sizes.iter().try_fold(1usize, |acc, &s| acc.checked_mul(s))
}

impl Layout {
    /// A layout from parts. Callers check that the parts are consistent ([`Layout::validate`]).
    pub fn new(sizes: Vec<usize>, strides: Vec<usize>, offset: usize) -> Self {
        Layout::from_slices(&sizes, &strides, offset)
    }

    /// A layout from borrowed parts (no allocation up to six dimensions).
    pub fn from_slices(sizes: &[usize], strides: &[usize], offset: usize) -> Self {
        debug_assert_eq!(sizes.len(), strides.len());
        Layout {
            sizes: Dims::from_slice(sizes),
            strides: Dims::from_slice(strides),
            offset,
        }
    }

    /// A row-major layout of `sizes` starting at `offset`.
    pub fn contiguous(sizes: &[usize], offset: usize) -> Self {
        let mut strides = Dims::from_elem(0, sizes.len());
        let mut acc = 1usize;
        for d in (0..sizes.len()).rev() {
            strides[d] = acc;
            acc = acc.saturating_mul(sizes[d].max(1));
        }
        Layout {
            sizes: Dims::from_slice(sizes),
            strides,
            offset,
        }
    }

    /// The sizes of each dimension.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// The strides of each dimension, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Offset of element `(0, ..., 0)` in the storage, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The same sizes and strides starting at element `offset`.
    pub fn with_offset(&self, offset: usize) -> Layout {
        Layout {
            offset,
            ..self.clone()
        }
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.sizes.len()
    }

    /// Number of elements (saturating; layouts are validated when made).
    pub fn numel(&self) -> usize {
        checked_numel(&self.sizes).unwrap_or(usize::MAX)
    }

    /// Checks that the element count and the furthest element offset fit in memory
    /// arithmetic for elements of `itemsize` bytes. Returns the storage elements spanned.
    pub fn validate(&self, itemsize: usize) -> Option<usize> {
        checked_numel(&self.sizes)?;
        let extent = self.checked_extent()?;
        extent
            .checked_mul(itemsize)
            .filter(|b| *b <= isize::MAX as usize)?;
        Some(extent)
    }

    fn checked_extent(&self) -> Option<usize> {
        if self.sizes.contains(&0) {
            return Some(self.offset);
        }
        let mut end = self.offset.checked_add(1)?;
        for (&s, &st) in self.sizes.iter().zip(&self.strides) {
            end = end.checked_add((s - 1).checked_mul(st)?)?;
        }
        Some(end)
    }

    /// How many storage elements this layout needs: 0 plus the offset for an empty tensor,
    /// else one past its furthest element.
    pub fn storage_extent(&self) -> usize {
        self.checked_extent().unwrap_or(usize::MAX)
    }

    /// PyTorch's `is_contiguous()`: row-major, ignoring the strides of size-1 dimensions; any
    /// tensor without elements is contiguous.
    pub fn is_contiguous(&self) -> bool {
        if self.sizes.contains(&0) {
            return true;
        }
        let mut expected = 1usize;
        for d in (0..self.ndim()).rev() {
            if self.sizes[d] == 1 {
                continue;
            }
            if self.strides[d] != expected {
                return false;
            }
            expected *= self.sizes[d];
        }
        true
    }

    /// Whether a 4-d tensor is contiguous in channels-last order (C, W, H, N from fastest),
    /// ignoring size-1 dimensions, as PyTorch's `is_contiguous(channels_last)`.
    pub fn is_channels_last_contiguous(&self) -> bool {
        if self.ndim() != 4 {
            return false;
        }
        let mut expected = 1usize;
        for d in [1, 3, 2, 0] {
            let s = self.sizes[d];
            if s != 1 {
                if self.strides[d] != expected {
                    return false;
                }
                expected *= s;
            }
        }
        true
    }

    /// PyTorch's `is_non_overlapping_and_dense()`: the elements fill a block of memory exactly
    /// once, in some order of the dimensions.
    pub fn is_non_overlapping_and_dense(&self) -> bool {
        if self.is_contiguous() {
            return true;
        }
        let n = self.ndim();
        if n == 1 {
            return self.sizes[0] < 2 || self.strides[0] == 1;
        }
        let mut perm: Dims = (0..n).collect();
        // Size-0/1 dimensions go last; the rest by increasing stride.
        perm.sort_by_key(|&d| (self.sizes[d] < 2, self.strides[d]));
        let mut required = 1usize;
        for &d in &perm {
            if self.sizes[d] < 2 {
                return true;
            }
            if self.strides[d] != required {
                return false;
            }
            required *= self.sizes[d];
        }
        true
    }

    /// Storage offset of the element at `index` (one entry per dimension, each in range).
    pub fn offset_of(&self, index: &[usize]) -> usize {
        self.offset
            + index
                .iter()
                .zip(&self.strides)
                .map(|(i, s)| i * s)
                .sum::<usize>()
    }

    /// Storage offsets of every element in row-major logical order.
    pub fn element_offsets(&self) -> Vec<usize> {
        let numel = self.numel();
        let mut out = Vec::with_capacity(numel);
        if numel == 0 {
            return out;
        }
        let mut index = vec![0usize; self.ndim()];
        for _ in 0..numel {
            out.push(self.offset_of(&index));
            for d in (0..self.ndim()).rev() {
                index[d] += 1;
                if index[d] < self.sizes[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        out
    }
}

/// Resolves a possibly negative dimension against `ndim` dimensions (a 0-d tensor accepts
/// 0 and -1 as PyTorch does). `None` if out of range.
pub fn wrap_dim(dim: i64, ndim: usize) -> Option<usize> {
    let n = ndim.max(1) as i64;
    let d = if dim < 0 { dim + n } else { dim };
    (0..n).contains(&d).then_some(d as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity_ignores_size_one_dims() {
        assert!(Layout::new(vec![3, 1, 4], vec![4, 999, 1], 0).is_contiguous());
        assert!(!Layout::new(vec![3, 4], vec![1, 3], 0).is_contiguous());
        assert!(Layout::new(vec![0, 4], vec![1, 77], 5).is_contiguous());
        assert!(Layout::new(vec![], vec![], 3).is_contiguous());
    }

    #[test]
    fn default_strides_treat_zero_as_one() {
        assert_eq!(contiguous_strides(&[2, 0, 3]), vec![3, 3, 1]);
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    }

    #[test]
    fn density() {
        assert!(Layout::new(vec![3, 4], vec![1, 3], 0).is_non_overlapping_and_dense());
        assert!(!Layout::new(vec![4, 4], vec![1, 3], 0).is_non_overlapping_and_dense());
        assert!(!Layout::new(vec![3], vec![2], 0).is_non_overlapping_and_dense());
        assert!(!Layout::new(vec![3, 2], vec![0, 1], 0).is_non_overlapping_and_dense());
        assert!(Layout::new(vec![2, 1, 3], vec![1, 50, 2], 0).is_non_overlapping_and_dense());
    }

    #[test]
    fn extent_and_validation() {
        let l = Layout::new(vec![2, 3], vec![3, 1], 2);
        assert_eq!(l.storage_extent(), 8);
        assert_eq!(Layout::new(vec![0, 3], vec![3, 1], 2).storage_extent(), 2);
        assert!(Layout::new(vec![usize::MAX, 2], vec![1, 1], 0)
            .validate(4)
            .is_none());
    }

    #[test]
    fn wraps_dims() {
        assert_eq!(wrap_dim(-1, 3), Some(2));
        assert_eq!(wrap_dim(3, 3), None);
        assert_eq!(wrap_dim(-1, 0), Some(0));
        assert_eq!(wrap_dim(1, 0), None);
    }
}
