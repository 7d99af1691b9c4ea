//! Reading elements back into Rust values.

use crate::backend::{for_device, Operand, Plan};
use crate::dtype::Element;
use crate::layout::contiguous_strides;
use crate::storage::{lock_storages, Access};
use crate::{Device, Error, Result, Tensor};

/// The elements of `t` in row-major logical order, converted to `T`; `op` names the reader
/// in the error for a tensor without values (on the meta device).
pub(crate) fn read_elements<T: Element>(op: &'static str, t: &Tensor) -> Result<Vec<T>> {
    if t.device() == Device::Meta {
        return Err(Error::Unsupported {
            op,
            message: format!(
                "a tensor on the {} device has no values to read (shape {:?}, {})",
                t.device(),
                t.shape(),
                t.dtype()
            ),
        });
    }
    let backend = for_device(t.device())?;
    let body = t.body();
    let shape = body.layout.sizes().to_vec();
    let n = body.layout.numel();
    let mut out = vec![T::ZERO; n];
    if n == 0 {
        return Ok(out);
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
    // validated against their storage when made); the destination is our own host vector of
    // `n` elements, disjoint from any storage.
    unsafe { backend.copy_to_host(&plan) };
    drop(guards);
    crate::kernel_error::take()?;
    Ok(out)
}

/// The values of an index (or class-target) tensor for an op to check and walk. On the meta
/// device, which has none and where PyTorch checks no bounds, every index is 0.
pub(crate) fn index_elements(op: &'static str, t: &Tensor) -> Result<Vec<i64>> {
    if t.device() == Device::Meta {
        return Ok(vec![0; t.numel()]);
    }
    read_elements(op, t)
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
        read_elements("to_vec", self)
    }

    /// The single element of a one-element tensor, converted to `T`.
    ///
    /// A floating-point value read as an integer must be a whole number: PyTorch's `.item()`
    /// returns a Python float, which a program rounds as it means to, so `item::<i64>()` of
    /// 0.73 is an error rather than a silent 0. Read it as `f32` or `f64` and round it.
    /// ([`to_vec`](Self::to_vec) keeps PyTorch's element casts, which truncate.)
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let t = Tensor::full(&[1], 0.73, DType::F32)?;
    /// assert!(t.item::<i64>().is_err());
    /// assert_eq!(t.item::<f64>()?.round() as i64, 1);
    /// assert_eq!(Tensor::full(&[1], 3.0, DType::F32)?.item::<i64>()?, 3);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
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
        if self.dtype().is_floating() && T::DTYPE.is_integral() {
            let value = read_elements::<f64>("item", self)?[0];
            if !(value.is_finite() && value.fract() == 0.0) {
                return Err(Error::dtype(
                    "item",
                    format!(
                        "item::<{}>() of a {} tensor holding {value} would truncate it; an \
                         integer can only hold a whole number",
                        T::DTYPE.name(),
                        self.dtype().name()
                    ),
                    Some(
                        "read it as a float (item::<f32>() or item::<f64>()) and round it as \
                         you mean to (.round(), .floor(), .trunc()), as PyTorch's .item() \
                         returns a float here",
                    ),
                ));
            }
        }
        Ok(read_elements::<T>("item", self)?[0])
    }
}
