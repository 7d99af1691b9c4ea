//! `triu` and `tril`: the upper or lower triangle of the last two dimensions, the rest zero
//! (a causal mask's shape), out of place, in place and into a given tensor. The forward
//! zeroes through `masked_fill` with a mask built from two `arange`s; the backward in
//! [`crate::autograd::formulas::triangular`] keeps the same triangle of the gradient and
//! saves nothing, as PyTorch's.

use super::entry::Entry;
use crate::autograd::formulas::triangular::{self as grad, KeepTriangle};
use crate::error::Error;
use crate::{DType, Result, Tensor};

/// Which triangle an op keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Triangle {
    /// `triu`: elements with `column - row >= diagonal`.
    Upper,
    /// `tril`: elements with `column - row <= diagonal`.
    Lower,
}

impl Triangle {
    fn name(self) -> &'static str {
        match self {
            Triangle::Upper => "triu",
            Triangle::Lower => "tril",
        }
    }

    /// The op itself, for the backward (which keeps the same triangle of the gradient), and
    /// its node's name.
    fn backward(self) -> (KeepTriangle, &'static str) {
        match self {
            Triangle::Upper => (|g, d| g.triu(d), "TriuBackward0"),
            Triangle::Lower => (|g, d| g.tril(d), "TrilBackward0"),
        }
    }
}

/// A bool mask of `x`'s last two dimensions, true where `triangle` (with `diagonal`) drops
/// the element; it broadcasts over `x`'s leading dimensions.
#[track_caller]
fn dropped(op: &'static str, x: &Tensor, triangle: Triangle, diagonal: i64) -> Result<Tensor> {
    let shape = x.shape();
    let n = shape.len();
    if n < 2 {
        return Err(Error::argument(
            op,
            format!("{op}: input tensor must have at least 2 dimensions, got {n}"),
            Some("a triangle needs rows and columns: reshape a vector to [1, n] or [n, 1] first"),
        ));
    }
    let (rows, cols) = (shape[n - 2] as i64, shape[n - 1] as i64);
    // Past either corner every diagonal keeps all or nothing: clamping keeps the bounds
    // below from overflowing.
    let diagonal = diagonal.clamp(-rows, cols);
    let on = Tensor::on(x.device());
    // Row r's bound is r + diagonal: `triu` drops columns below it, `tril` those above.
    let bound = on.arange(rows, DType::I64)?.add(diagonal)?.unsqueeze(1)?;
    let columns = on.arange(cols, DType::I64)?;
    match triangle {
        Triangle::Upper => columns.lt(&bound),
        Triangle::Lower => columns.gt(&bound),
    }
}

/// The kept triangle of `x` in a new contiguous tensor (PyTorch's layout for these ops,
/// whatever the input's strides).
#[track_caller]
fn triangle(x: &Tensor, triangle: Triangle, diagonal: i64) -> Result<Tensor> {
    let op = triangle.name();
    Entry::new(op, &[x])?.run(
        |_, x| {
            let kept = x[0].masked_fill(&dropped(op, x[0], triangle, diagonal)?, 0i64)?;
            kept.contiguous()
        },
        |ctx, x, out| {
            let (keep, name) = triangle.backward();
            grad::triangle(ctx, name, keep, diagonal, x[0], out)
        },
    )
}

impl Tensor {
    /// The upper triangle of the last two dimensions (`column - row >= diagonal`), the rest
    /// zero, as `torch.triu`: `diagonal` 0 keeps the main diagonal, 1 starts above it, -1
    /// below. Leading dimensions are batches. The result is contiguous.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::ones(&[3, 3], DType::F32)?;
    /// assert_eq!(x.triu(1)?.to_vec::<f32>()?, vec![0., 1., 1., 0., 0., 1., 0., 0., 0.]);
    /// // A causal mask: true where a query may not look (a later key).
    /// let future = Tensor::ones(&[3, 3], DType::Bool)?.triu(1)?;
    /// assert_eq!(future.to_vec::<bool>()?[1], true);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn triu(&self, diagonal: i64) -> Result<Tensor> {
        triangle(self, Triangle::Upper, diagonal)
    }

    /// The lower triangle of the last two dimensions (`column - row <= diagonal`), the rest
    /// zero, as `torch.tril`.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::ones(&[2, 3], DType::F32)?;
    /// assert_eq!(x.tril(0)?.to_vec::<f32>()?, vec![1., 0., 0., 1., 1., 0.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn tril(&self, diagonal: i64) -> Result<Tensor> {
        triangle(self, Triangle::Lower, diagonal)
    }

    /// In-place [`Tensor::triu`]: zeroes what lies below the triangle and returns `self`
    /// (recorded as the `masked_fill_` it is, which saves the mask).
    #[track_caller]
    pub fn triu_(&self, diagonal: i64) -> Result<Tensor> {
        self.masked_fill_(&dropped("triu_", self, Triangle::Upper, diagonal)?, 0i64)
    }

    /// In-place [`Tensor::tril`]: zeroes what lies above the triangle and returns `self`.
    #[track_caller]
    pub fn tril_(&self, diagonal: i64) -> Result<Tensor> {
        self.masked_fill_(&dropped("tril_", self, Triangle::Lower, diagonal)?, 0i64)
    }

    /// [`Tensor::triu`] written into `out`, which must have `self`'s dtype (resized if its
    /// shape differs). Returns `out`.
    #[track_caller]
    pub fn triu_out(&self, diagonal: i64, out: &Tensor) -> Result<Tensor> {
        let mask = dropped("triu_out", self, Triangle::Upper, diagonal)?;
        self.masked_fill_out(&mask, 0i64, out)
    }

    /// [`Tensor::tril`] written into `out`, which must have `self`'s dtype (resized if its
    /// shape differs). Returns `out`.
    #[track_caller]
    pub fn tril_out(&self, diagonal: i64, out: &Tensor) -> Result<Tensor> {
        let mask = dropped("tril_out", self, Triangle::Lower, diagonal)?;
        self.masked_fill_out(&mask, 0i64, out)
    }
}
