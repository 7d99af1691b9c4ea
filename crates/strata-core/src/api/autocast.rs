//! The one place where a mixed-precision policy decides input casts.
//!
//! Every op passes its tensor operands through [`cast_inputs`] at its entry. With no policy
//! installed on any thread (the default) that is one atomic load and nothing is cast.
//! A policy installed with [`with_cast_policy`] names, per op, the dtype its floating
//! operands are computed in; the entry casts them (the casts are ordinary recorded ops, so
//! gradients flow back through them in the operands' own dtypes) and the op runs on the
//! casts. PyTorch's autocast lists (which ops run in f16/bf16, which in f32) are such a
//! policy.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::{DType, Result, Tensor};

/// Decides the dtype an op's floating operands are computed in.
pub trait CastPolicy: Send + Sync {
    /// The dtype `op`'s floating operands are cast to, or `None` to leave them as they are.
    fn cast_dtype(&self, op: &'static str, inputs: &[&Tensor]) -> Option<DType>;
}

/// How many [`with_cast_policy`] scopes are open, on all threads: while none is, an op's
/// entry skips the thread-local lookup.
static OPEN_SCOPES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static POLICY: RefCell<Option<Arc<dyn CastPolicy>>> = const { RefCell::new(None) };
    /// Set while the entry casts operands, so that the casts themselves are not cast.
    static CASTING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with `policy` deciding the casts of every op on this thread; the previous policy
/// (or none) comes back afterwards, even if `f` panics.
///
/// ```
/// use std::sync::Arc;
/// use strata_core::autocast::{with_cast_policy, CastPolicy};
/// use strata_core::{DType, Tensor};
///
/// /// Matrix products in bf16, everything else as it is.
/// struct MatmulInBf16;
/// impl CastPolicy for MatmulInBf16 {
///     fn cast_dtype(&self, op: &'static str, _: &[&Tensor]) -> Option<DType> {
///         (op == "matmul").then_some(DType::BF16)
///     }
/// }
///
/// let a = Tensor::ones(&[2, 3], DType::F32)?;
/// let b = Tensor::ones(&[3, 2], DType::F32)?;
/// let c = with_cast_policy(Arc::new(MatmulInBf16), || a.matmul(&b))?;
/// assert_eq!(c.dtype(), DType::BF16);
/// assert_eq!(a.add(&a)?.dtype(), DType::F32);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn with_cast_policy<R>(policy: Arc<dyn CastPolicy>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<dyn CastPolicy>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            POLICY.with(|p| *p.borrow_mut() = previous);
            OPEN_SCOPES.fetch_sub(1, Ordering::Release);
        }
    }
    OPEN_SCOPES.fetch_add(1, Ordering::Acquire);
    let previous = POLICY.with(|p| p.borrow_mut().replace(policy));
    let _restore = Restore(previous);
    f()
}

/// The operands `op` computes with: `None` to use `inputs` as they are, or the floating
/// inputs cast to the dtype the installed policy names (other inputs unchanged).
pub(crate) fn cast_inputs(op: &'static str, inputs: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    // A scope opened on this thread is counted before its policy is installed, so this
    // thread never misses its own policy; other threads' scopes only cost the lookup.
    if OPEN_SCOPES.load(Ordering::Relaxed) == 0 || CASTING.with(Cell::get) {
        return Ok(None);
    }
    let Some(policy) = POLICY.with(|p| p.borrow().clone()) else {
        return Ok(None);
    };
    let Some(dtype) = policy.cast_dtype(op, inputs) else {
        return Ok(None);
    };
    if !inputs
        .iter()
        .any(|t| t.dtype().is_floating() && t.dtype() != dtype)
    {
        return Ok(None);
    }
    struct Casting;
    impl Drop for Casting {
        fn drop(&mut self) {
            CASTING.with(|c| c.set(false));
        }
    }
    CASTING.with(|c| c.set(true));
    let _casting = Casting;
    inputs
        .iter()
        .map(|t| {
            if t.dtype().is_floating() && t.dtype() != dtype {
                t.to(dtype)
            } else {
                Ok((*t).clone())
            }
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Everything(DType);
    impl CastPolicy for Everything {
        fn cast_dtype(&self, _: &'static str, _: &[&Tensor]) -> Option<DType> {
            Some(self.0)
        }
    }

    #[test]
    fn a_policy_casts_floating_operands_and_gradients_flow_back_in_their_dtype() {
        let w = Tensor::ones(&[4], DType::F32)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let i = Tensor::arange(4, DType::I64).unwrap();
        let y = with_cast_policy(Arc::new(Everything(DType::F64)), || w.mul(&w)).unwrap();
        assert_eq!(y.dtype(), DType::F64);
        // Integer operands are left alone.
        let k = with_cast_policy(Arc::new(Everything(DType::F64)), || i.add(&i)).unwrap();
        assert_eq!(k.dtype(), DType::I64);
        y.sum(None, false).unwrap().backward().unwrap();
        let g = w.grad().unwrap();
        assert_eq!(g.dtype(), DType::F32);
        assert_eq!(g.to_vec::<f32>().unwrap(), vec![2.0; 4]);
        // The policy ends with the closure.
        assert_eq!(w.mul(&w).unwrap().dtype(), DType::F32);
    }
}
