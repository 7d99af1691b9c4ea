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

/// Dimensions a layout holds in place; more go to the heap.
const INLINE: usize = 6;

/// Where a tensor's elements are in its storage: element `(i0, i1, ...)` lives at
/// `offset + Σ i_k * strides[k]`, counted in elements.
///
/// Up to six dimensions are held in fixed arrays (unused entries zero), so copying a layout,
/// which every op does to read a tensor without holding its lock, copies plain words and
/// never allocates; a layout of more dimensions keeps them in one heap slice.
///
/// The element count and row-majorness are worked out when asked (a few multiplications
/// for ordinary ranks): kept in the layout, they made a data loader's per-sample work
/// slower though it ran fewer instructions (BENCHMARKS.md, "A fifth pass"). A test holds
/// the struct to 128 bytes, since it is copied on every op.
pub struct Layout {
    sizes: [usize; INLINE],
    strides: [usize; INLINE],
    offset: usize,
    /// The sizes and strides of a layout of more than [`INLINE`] dimensions.
    spilled: Option<Box<Spilled>>,
    ndim: u32,
}

/// The dimensions of a layout that does not fit in place: its sizes, then its strides.
#[derive(Clone)]
struct Spilled(Box<[usize]>);

impl Clone for Layout {
    /// A copy of the words (and of the heap slice, for a layout of many dimensions).
    #[inline]
    fn clone(&self) -> Self {
        Layout {
            sizes: self.sizes,
            strides: self.strides,
            offset: self.offset,
            spilled: self.spilled.clone(),
            ndim: self.ndim,
        }
    }
}

impl Default for Layout {
    /// The layout of a 0-d tensor at offset 0.
    fn default() -> Self {
        Layout {
            ndim: 0,
            sizes: [0; INLINE],
            strides: [0; INLINE],
            offset: 0,
            spilled: None,
        }
    }
}

impl PartialEq for Layout {
    fn eq(&self, other: &Self) -> bool {
        self.offset == other.offset
            && self.sizes() == other.sizes()
            && self.strides() == other.strides()
    }
}

impl Eq for Layout {}

impl std::hash::Hash for Layout {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.sizes().hash(state);
        self.strides().hash(state);
        self.offset.hash(state);
    }
}

impl std::fmt::Debug for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layout")
            .field("sizes", &self.sizes())
            .field("strides", &self.strides())
            .field("offset", &self.offset)
            .finish()
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

/// Whether `strides` are exactly the row-major strides of `sizes` (size-1 dimensions
/// included; a size-0 dimension counts as 1, as in [`contiguous_strides`]).
#[inline]
fn row_major(sizes: &[usize], strides: &[usize]) -> bool {
    let mut expected = 1usize;
    for (&n, &s) in sizes.iter().zip(strides).rev() {
        if s != expected {
            return false;
        }
        expected = expected.saturating_mul(n.max(1));
    }
    true
}

/// The number of elements of a shape, or `None` if it overflows.
#[inline]
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
        // More dimensions than fit in 32 bits would need more memory than any machine has.
        let ndim = sizes.len() as u32;
        if sizes.len() > INLINE {
            let both = Spilled(sizes.iter().chain(strides).copied().collect());
            return Layout {
                ndim,
                offset,
                spilled: Some(Box::new(both)),
                ..Layout::default()
            };
        }
        let mut layout = Layout {
            ndim,
            offset,
            ..Layout::default()
        };
        // A loop of fixed length, which the compiler unrolls (a slice copy calls the C
        // library's `memcpy` for a few words).
        for d in 0..INLINE {
            if let (Some(&n), Some(&s)) = (sizes.get(d), strides.get(d)) {
                layout.sizes[d] = n;
                layout.strides[d] = s;
            }
        }
        layout
    }

    /// A row-major layout of `sizes` starting at `offset`.
    pub fn contiguous(sizes: &[usize], offset: usize) -> Self {
        let mut strides = Dims::from_elem(0, sizes.len());
        let mut acc = 1usize;
        for d in (0..sizes.len()).rev() {
            strides[d] = acc;
            acc = acc.saturating_mul(sizes[d].max(1));
        }
        Layout::from_slices(sizes, &strides, offset)
    }

    /// The sizes of each dimension.
    #[inline]
    pub fn sizes(&self) -> &[usize] {
        match &self.spilled {
            None => &self.sizes[..self.ndim as usize],
            Some(both) => &both.0[..self.ndim as usize],
        }
    }

    /// The strides of each dimension, in elements.
    #[inline]
    pub fn strides(&self) -> &[usize] {
        match &self.spilled {
            None => &self.strides[..self.ndim as usize],
            Some(both) => &both.0[self.ndim as usize..],
        }
    }

    /// Offset of element `(0, ..., 0)` in the storage, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The same sizes and strides starting at element `offset`.
    #[inline]
    pub fn with_offset(&self, offset: usize) -> Layout {
        Layout {
            offset,
            ..self.clone()
        }
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.ndim as usize
    }

    /// Number of elements (saturating; layouts are validated when made).
    #[inline]
    pub fn numel(&self) -> usize {
        checked_numel(self.sizes()).unwrap_or(usize::MAX)
    }

    /// Whether every stride is exactly the row-major one, size-1 dimensions included
    /// (stricter than [`Layout::is_contiguous`], which ignores the strides of size-1
    /// dimensions as PyTorch's `is_contiguous()` does).
    #[inline]
    pub fn is_row_major(&self) -> bool {
        row_major(self.sizes(), self.strides())
    }

    /// Checks that the element count and the furthest element offset fit in memory
    /// arithmetic for elements of `itemsize` bytes. Returns the storage elements spanned.
    pub fn validate(&self, itemsize: usize) -> Option<usize> {
        checked_numel(self.sizes())?;
        let extent = self.checked_extent()?;
        extent
            .checked_mul(itemsize)
            .filter(|b| *b <= isize::MAX as usize)?;
        Some(extent)
    }

    fn checked_extent(&self) -> Option<usize> {
        let (sizes, strides) = (self.sizes(), self.strides());
        if sizes.contains(&0) {
            return Some(self.offset);
        }
        let mut end = self.offset.checked_add(1)?;
        for (&s, &st) in sizes.iter().zip(strides) {
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
        let (sizes, strides) = (self.sizes(), self.strides());
        if sizes.contains(&0) {
            return true;
        }
        let mut expected = 1usize;
        for d in (0..self.ndim()).rev() {
            if sizes[d] == 1 {
                continue;
            }
            if strides[d] != expected {
                return false;
            }
            expected *= sizes[d];
        }
        true
    }

    /// Whether a 4-d tensor is contiguous in channels-last order (C, W, H, N from fastest),
    /// ignoring size-1 dimensions, as PyTorch's `is_contiguous(channels_last)`.
    pub fn is_channels_last_contiguous(&self) -> bool {
        let (sizes, strides) = (self.sizes(), self.strides());
        if self.ndim() != 4 {
            return false;
        }
        let mut expected = 1usize;
        for d in [1, 3, 2, 0] {
            let s = sizes[d];
            if s != 1 {
                if strides[d] != expected {
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
        let (sizes, strides) = (self.sizes(), self.strides());
        if self.is_contiguous() {
            return true;
        }
        let n = self.ndim();
        if n == 1 {
            return sizes[0] < 2 || strides[0] == 1;
        }
        let mut perm: Dims = (0..n).collect();
        // Size-0/1 dimensions go last; the rest by increasing stride.
        perm.sort_by_key(|&d| (sizes[d] < 2, strides[d]));
        let mut required = 1usize;
        for &d in &perm {
            if sizes[d] < 2 {
                return true;
            }
            if strides[d] != required {
                return false;
            }
            required *= sizes[d];
        }
        true
    }

    /// Storage offset of the element at `index` (one entry per dimension, each in range).
    pub fn offset_of(&self, index: &[usize]) -> usize {
        self.offset
            + index
                .iter()
                .zip(self.strides())
                .map(|(i, s)| i * s)
                .sum::<usize>()
    }

    /// Storage offsets of every element in row-major logical order.
    pub fn element_offsets(&self) -> Vec<usize> {
        let sizes = self.sizes();
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
                if index[d] < sizes[d] {
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

    #[test]
    fn a_layout_stays_small() {
        assert!(std::mem::size_of::<Layout>() <= 128);
    }

    #[test]
    fn many_dimensions_spill_and_compare_by_content() {
        let sizes = [2, 1, 3, 1, 2, 2, 1, 2];
        let l = Layout::contiguous(&sizes, 4);
        assert_eq!(l.sizes(), &sizes);
        assert_eq!(l.strides(), &contiguous_strides(&sizes)[..]);
        assert_eq!((l.ndim(), l.numel(), l.offset()), (8, 48, 4));
        assert!(l.is_row_major() && l.is_contiguous());
        let copy = l.clone();
        assert_eq!(copy, l);
        assert_ne!(copy.with_offset(5), l);
        assert_eq!(
            format!("{:?}", Layout::new(vec![2, 3], vec![3, 1], 1)),
            "Layout { sizes: [2, 3], strides: [3, 1], offset: 1 }"
        );
        assert_eq!(Layout::default(), Layout::contiguous(&[], 0));
    }

    proptest::proptest! {
        /// The words a layout works out when made (its element count, whether it is exactly
        /// row-major) agree with the sizes and strides it holds, at any rank.
        #[test]
        fn derived_words_follow_the_parts(
            dims in proptest::collection::vec((0usize..4, 0usize..30), 0..9),
            offset in 0usize..5,
            exact in proptest::bool::ANY,
        ) {
            let sizes: Vec<usize> = dims.iter().map(|d| d.0).collect();
            let strides = if exact {
                contiguous_strides(&sizes)
            } else {
                dims.iter().map(|d| d.1).collect()
            };
            let l = Layout::from_slices(&sizes, &strides, offset);
            proptest::prop_assert_eq!(l.sizes(), &sizes[..]);
            proptest::prop_assert_eq!(l.strides(), &strides[..]);
            proptest::prop_assert_eq!(l.numel(), checked_numel(&sizes).unwrap_or(usize::MAX));
            proptest::prop_assert_eq!(l.is_row_major(), strides == contiguous_strides(&sizes));
            if exact {
                proptest::prop_assert!(l.is_row_major() && l.is_contiguous());
            }
            proptest::prop_assert_eq!(l.clone(), l);
        }
    }
}
