//! Joining: `cat` and `stack`, and their `out=` forms. Forward in [`crate::ops::joining`],
//! backward in [`crate::autograd::formulas::joining`].

use super::entry::Entry;
use crate::autograd::formulas::joining as grad;
use crate::ops::joining::{self as fwd, out};
use crate::{Result, Tensor};

impl Tensor {
    /// Joins `tensors` along `dim`. Their dtypes promote as in an element-wise op; their shapes
    /// must match except along `dim`; 1-d tensors of shape `[0]` are left out whatever their
    /// shape (PyTorch's legacy rule). The result is contiguous, or channels-last when every
    /// input is.
    ///
    /// ```
    /// use strata_core::{Tensor, DType};
    /// let a = Tensor::ones(&[1, 2], DType::I32)?;
    /// let b = Tensor::zeros(&[2, 2], DType::F32)?;
    /// let c = Tensor::cat(&[&a, &b], 0)?;
    /// assert_eq!((c.shape().to_vec(), c.dtype()), (vec![3, 2], DType::F32));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn cat(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        Entry::new("cat", tensors)?.run(
            |ctx, x| fwd::cat(ctx, x, dim),
            |ctx, x, out| grad::cat(ctx, x, dim, false, out),
        )
    }

    /// Joins equally shaped `tensors` along a new dimension `dim` (`0..=ndim`, negative counting
    /// from the end of the result's dimensions). Dtypes promote as in [`Tensor::cat`].
    ///
    /// ```
    /// use strata_core::{Tensor, DType};
    /// let a = Tensor::zeros(&[2, 3], DType::F32)?;
    /// assert_eq!(Tensor::stack(&[&a, &a], -1)?.shape().as_slice(), [2, 3, 2]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn stack(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        Entry::new("stack", tensors)?.run(
            |ctx, x| fwd::stack(ctx, x, dim),
            |ctx, x, out| grad::cat(ctx, x, dim, true, out),
        )
    }

    /// [`Tensor::cat`] into `out`, whose dtype must be able to hold the promoted result (a
    /// float result cannot go into an integer tensor). `out` must share no memory with the
    /// inputs. An `out` of the result's shape keeps its strides; one of another shape is
    /// resized (channels-last when every input is). Returns `out`, whose version goes up by
    /// one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let a = Tensor::ones(&[1, 2], DType::I32)?;
    /// let out = Tensor::zeros(&[0], DType::F32)?;
    /// Tensor::cat_out(&[&a, &a], 0, &out)?;
    /// assert_eq!(out.shape().as_slice(), [2, 2]);
    /// assert_eq!(out.to_vec::<f32>()?, vec![1.0; 4]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn cat_out(tensors: &[&Tensor], dim: i64, out: &Tensor) -> Result<Tensor> {
        Entry::new("cat_out", tensors)?.run_out(out, |ctx, x| out::cat_out(ctx, x, dim, out))
    }

    /// [`Tensor::stack`] into `out`, with the dtype rule of [`Tensor::cat_out`]: each input is
    /// copied into its slice of `out` along the new dimension `dim`. `out` must share no
    /// memory with the inputs. An `out` of the result's shape keeps its strides; one of
    /// another shape is resized. Returns `out`, whose version goes up by one.
    #[track_caller]
    pub fn stack_out(tensors: &[&Tensor], dim: i64, out: &Tensor) -> Result<Tensor> {
        Entry::new("stack_out", tensors)?.run_out(out, |ctx, x| out::stack_out(ctx, x, dim, out))
    }
}
