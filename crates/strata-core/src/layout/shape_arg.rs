//! Shapes as a program writes them: a slice, an array or a `Vec` of `usize`, `i64` or `i32`
//! (integer literals such as `&[3, 4]` included), so that `Tensor::zeros(&[n, 10])` with a
//! `usize` and `x.view(&[-1, 10])` both compile without casts.

use super::int_arg::IntArg;
use super::Dims;
use crate::{Error, Result};

/// Anything that holds a shape's sizes, taken by reference (`&[2, 3]`, `&[n, -1]`, `&vec`,
/// `&x.shape()`, `&dims[..]`): a slice, an array or a `Vec` of `usize`, `i64` or `i32`, a
/// tensor's own shape (`Dims`), and `&()` for a 0-d shape. Where PyTorch allows it (`view`,
/// `reshape`, `expand`), one size may be `-1`.
pub trait IntoShape {
    /// The integer type the sizes are written in.
    type Int: IntArg;
    /// The sizes as written.
    fn sizes(&self) -> &[Self::Int];
}

impl<T: IntArg> IntoShape for [T] {
    type Int = T;
    fn sizes(&self) -> &[T] {
        self
    }
}

impl<T: IntArg, const N: usize> IntoShape for [T; N] {
    type Int = T;
    fn sizes(&self) -> &[T] {
        self
    }
}

impl<T: IntArg> IntoShape for Vec<T> {
    type Int = T;
    fn sizes(&self) -> &[T] {
        self
    }
}

impl IntoShape for Dims {
    type Int = usize;
    fn sizes(&self) -> &[usize] {
        self
    }
}

/// The shape of a 0-d tensor, `reshape(())` (an empty `&[]` has no element type to infer).
impl IntoShape for () {
    type Int = usize;
    fn sizes(&self) -> &[usize] {
        &[]
    }
}

/// A reference to a shape is a shape (`&[n, 4]`, `&vec`, `&x.shape()`).
impl<S: IntoShape + ?Sized> IntoShape for &S {
    type Int = S::Int;
    fn sizes(&self) -> &[S::Int] {
        (**self).sizes()
    }
}

/// The sizes of a new tensor's shape for `op`: every one zero or more (a factory has no
/// `-1` to infer).
pub(crate) fn new_sizes(op: &'static str, shape: &(impl IntoShape + ?Sized)) -> Result<Dims> {
    shape
        .sizes()
        .iter()
        .enumerate()
        .map(|(d, s)| {
            usize::try_from(s.signed()).map_err(|_| {
                Error::argument(
                    op,
                    format!(
                        "size {} of dimension {d} in {:?} is negative: a new tensor's sizes \
                         are zero or more",
                        s.signed(),
                        shape.sizes()
                    ),
                    None,
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(s: &(impl IntoShape + ?Sized)) -> Vec<i64> {
        s.sizes().iter().map(|v| v.signed()).collect()
    }

    #[test]
    fn every_way_of_writing_a_shape_gives_the_same_sizes() {
        let n: usize = 3;
        let m: i64 = 4;
        assert_eq!(signed(&[n, 4]), [3, 4]);
        assert_eq!(signed(&[m, -1]), [4, -1]);
        assert_eq!(signed(&[3, 4]), [3, 4]); // literals are i32
        assert_eq!(signed(&vec![2usize, 2]), [2, 2]);
        assert_eq!(signed(&vec![5i64]), [5]);
        assert_eq!(signed(&[n][..]), [3]);
        assert!(signed(&()).is_empty());
    }

    #[test]
    fn a_negative_size_for_a_new_tensor_is_an_error_naming_it() {
        let err = new_sizes("zeros", &[2, -1]).unwrap_err().to_string();
        assert!(
            err.contains("zeros") && err.contains("-1") && err.contains("dimension 1"),
            "{err}"
        );
        assert_eq!(new_sizes("zeros", &[2usize, 3]).unwrap().as_slice(), [2, 3]);
    }
}
