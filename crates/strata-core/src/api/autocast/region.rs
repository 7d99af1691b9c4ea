//! Autocast regions: opened with [`autocast`] (a guard) or [`with_autocast`] (a closure),
//! nested per thread.

use std::marker::PhantomData;

use crate::cast_scope::{close_scopes, innermost_autocast, open_scope, Scope};
use crate::{DType, Error, Result};

/// The dtype a CPU autocast region computes in unless told otherwise (PyTorch's CPU
/// default: bf16, which needs no gradient scaling).
pub const DEFAULT_CPU_AUTOCAST_DTYPE: DType = DType::BF16;

/// An open autocast region; dropping it closes the region and restores the state around it
/// (regions nest). When the thread's outermost region closes, the cast cache is cleared.
///
/// Not `Send`: a region belongs to the thread that opened it. Drop guards in the reverse
/// order of opening; dropping an outer guard first also closes the regions inside it.
#[must_use = "the region closes when the guard is dropped"]
#[derive(Debug)]
pub struct AutocastGuard {
    depth: usize,
    _not_send: PhantomData<*const ()>,
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        close_scopes(self.depth);
    }
}

/// `Err` unless `dtype` is one autocast can compute in (bf16 or f16).
fn check_dtype(dtype: DType) -> Result<()> {
    if matches!(dtype, DType::BF16 | DType::F16) {
        return Ok(());
    }
    Err(Error::dtype(
        "autocast",
        format!("a CPU autocast region computes in bf16 or f16, not {dtype}"),
        Some("use DType::BF16 (the CPU default, no gradient scaling needed) or DType::F16"),
    ))
}

/// Opens a CPU autocast region computing in `dtype` until the returned guard drops
/// (`torch.autocast("cpu", dtype=...)`). `dtype` must be bf16 or f16, else `Err`.
///
/// ```
/// use strata_core::autocast::autocast;
/// use strata_core::{DType, Tensor};
/// let a = Tensor::ones(&[2, 3], DType::F32)?;
/// let b = Tensor::ones(&[3, 2], DType::F32)?;
/// let guard = autocast(DType::BF16)?;
/// assert_eq!(a.matmul(&b)?.dtype(), DType::BF16);      // lower precision
/// assert_eq!(a.softmax(1)?.dtype(), DType::F32);       // runs as outside
/// drop(guard);
/// assert_eq!(a.matmul(&b)?.dtype(), DType::F32);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn autocast(dtype: DType) -> Result<AutocastGuard> {
    check_dtype(dtype)?;
    Ok(AutocastGuard {
        depth: open_scope(Scope::Autocast(Some(dtype))),
        _not_send: PhantomData,
    })
}

/// [`autocast`] with [`DEFAULT_CPU_AUTOCAST_DTYPE`] (bf16).
pub fn autocast_default() -> AutocastGuard {
    AutocastGuard {
        depth: open_scope(Scope::Autocast(Some(DEFAULT_CPU_AUTOCAST_DTYPE))),
        _not_send: PhantomData,
    }
}

/// Runs `f` inside an autocast region computing in `dtype` (bf16 or f16, else `Err`); the
/// region closes when `f` returns or panics.
///
/// ```
/// use strata_core::autocast::with_autocast;
/// use strata_core::nn::functional::linear;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::ones(&[1, 2], DType::F32)?;
/// let w = Tensor::ones(&[3, 2], DType::F32)?.requires_grad_(true)?;
/// let y = with_autocast(DType::BF16, || linear(&x, &w, None))??;
/// assert_eq!(y.dtype(), DType::BF16);
/// y.to(DType::F32)?.sum(None, false)?.backward()?;
/// assert_eq!(w.grad().unwrap().dtype(), DType::F32); // gradients come back in f32
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn with_autocast<R>(dtype: DType, f: impl FnOnce() -> R) -> Result<R> {
    let _region = autocast(dtype)?;
    Ok(f())
}

/// Runs `f` with autocast off (`torch.autocast(enabled=False)`), for an op that has already
/// cast its inputs and computes its parts in dtypes of its own choosing: inner ops are not
/// cast again, as PyTorch's autocast wrapper runs the op below its autocast layer.
pub(crate) fn without_autocast<R>(f: impl FnOnce() -> R) -> R {
    let _off = AutocastGuard {
        depth: open_scope(Scope::Autocast(None)),
        _not_send: PhantomData,
    };
    f()
}

/// The dtype of the innermost open autocast region on this thread, if any.
pub fn autocast_dtype() -> Option<DType> {
    innermost_autocast().flatten()
}
