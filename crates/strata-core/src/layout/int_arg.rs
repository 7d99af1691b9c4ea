//! Sizes and dimensions in the two forms the ops receive them.

use std::fmt;

/// A size or a dimension as an op takes it: PyTorch's signed `i64` from the public API (`-1`
/// for a size to infer or keep, a negative dimension counting from the end), or a `usize`
/// from strata's own code, which holds its shapes and dimensions as `usize` and passes them
/// as they are.
pub trait IntArg: Copy + fmt::Debug {
    /// The value in PyTorch's signed form (a `usize` beyond `i64::MAX`, which no shape
    /// reaches, saturates).
    fn signed(self) -> i64;
}

impl IntArg for i64 {
    #[inline]
    fn signed(self) -> i64 {
        self
    }
}

impl IntArg for i32 {
    #[inline]
    fn signed(self) -> i64 {
        i64::from(self)
    }
}

impl IntArg for usize {
    #[inline]
    fn signed(self) -> i64 {
        i64::try_from(self).unwrap_or(i64::MAX)
    }
}
