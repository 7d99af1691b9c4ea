//! A (height, width) pair of sizes, for kernels, strides and padding.

/// A (height, width) pair: a single number means the same for both.
///
/// ```
/// use strata_core::nn::functional::Pair;
/// assert_eq!(Pair::from(2), Pair(2, 2));
/// assert_eq!(Pair::from((3, 1)), Pair(3, 1));
/// assert_eq!(Pair::from([1, 4]), Pair(1, 4));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair(pub usize, pub usize);

impl From<usize> for Pair {
    fn from(v: usize) -> Self {
        Pair(v, v)
    }
}

impl From<(usize, usize)> for Pair {
    fn from((h, w): (usize, usize)) -> Self {
        Pair(h, w)
    }
}

impl From<[usize; 2]> for Pair {
    fn from([h, w]: [usize; 2]) -> Self {
        Pair(h, w)
    }
}
