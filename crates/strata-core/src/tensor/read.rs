//! Reading elements back into Rust values.

use crate::backend::cpu::{kernels, Operand, Plan};
use crate::dtype::Element;
use crate::layout::contiguous_strides;
use crate::storage::{lock_storages, Access};
use crate::{Error, Result, Tensor};

/// The elements of `t` in row-major logical order, converted to `T`.
pub(crate) fn read_elements<T: Element>(t: &Tensor) -> Vec<T> {
    let body = t.body();
    let shape = body.layout.sizes().to_vec();
    let n = body.layout.numel();
    let mut out = vec![T::ZERO; n];
    if n == 0 {
        return out;
    }
    let guards = lock_storages(&[(&body.storage, Access::Read)]);
    let src = guards
        .read_ptr(&body.storage)
        .wrapping_add(body.layout.offset() * t.element_size()) as *mut u8;
    let operands = [
        Operand {
            ptr: out.as_mut_ptr() as *mut u8,
            strides: contiguous_strides(&shape),
            dtype: T::DTYPE,
        },
        Operand {
            ptr: src,
            strides: body.layout.strides().to_vec(),
            dtype: t.dtype(),
        },
    ];
    let perm: Vec<usize> = (0..shape.len()).rev().collect();
    let plan = Plan::new(&shape, &operands, &perm, true);
    // SAFETY: the source storage is read-locked and the layout lies within it (layouts are
    // validated against their storage when made); the destination is our own vector of `n`
    // elements, disjoint from any storage.
    unsafe { kernels::copy(&plan) };
    out
}

impl Tensor {
    /// All elements in row-major order, converted to `T` with PyTorch's cast rules (floats
    /// truncate toward zero when read as integers).
    ///
    /// ```
    /// use strata_core::{Tensor, DType};
    /// let t = Tensor::arange(4, DType::I64)?.view(&[2, 2])?.t()?;
    /// assert_eq!(t.to_vec::<i64>()?, vec![0, 2, 1, 3]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(read_elements(self))
    }

    /// The single element of a one-element tensor, converted to `T`.
    pub fn item<T: Element>(&self) -> Result<T> {
        let n = self.numel();
        if n != 1 {
            return Err(Error::shape(
                "item",
                format!(
                    "a tensor with {n} elements cannot be converted to a single number (shape {:?})",
                    self.shape()
                ),
                vec![self.shape().to_vec()],
            )
            .with_hint("select one element first, or reduce the tensor (sum, mean)"));
        }
        Ok(read_elements::<T>(self)[0])
    }
}
