//! The cast seam: the per-thread stack of cast scopes and the one function every op entry
//! calls, [`cast_inputs`].
//!
//! A scope is either a custom [`CastPolicy`] (opened by [`with_cast_policy`]) or an autocast
//! region (opened by [`super::autocast`]). The innermost open scope on the thread decides an
//! op's casts. While no scope is open on any thread, an op's entry costs one relaxed atomic
//! load here and nothing is cast.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{cache, policy};
pub use crate::cast_scope::CastPolicy;
use crate::cast_scope::{close_scopes, open_scope, Scope, OPEN_SCOPES, SCOPES};
use crate::mode::is_internal;
use crate::{Result, Tensor};

/// Runs `f` with `policy` deciding the casts of every op on this thread; the previous policy
/// (or autocast region, or none) comes back afterwards, even if `f` panics. Like autocast, a
/// policy casts the operands of out-of-place ops only: in-place ops, `out=` forms and views
/// run on their operands as they are.
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
    struct Close(usize);
    impl Drop for Close {
        fn drop(&mut self) {
            close_scopes(self.0);
        }
    }
    let _close = Close(open_scope(Scope::Custom(policy)));
    f()
}

thread_local! {
    /// Set while the entry casts operands, so that the casts themselves are not cast.
    static CASTING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's casting flag set, so the casts it makes are not cast again.
fn casting<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            CASTING.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(CASTING.with(|c| c.replace(true)));
    f()
}

/// Whether some thread has a mixed-precision scope open, so that [`cast_inputs`] may cast
/// (one atomic load; when false, no op anywhere casts).
#[inline]
pub(crate) fn may_cast() -> bool {
    OPEN_SCOPES.load(Ordering::Relaxed) != 0
}

/// The operands `op` computes with: `None` to use `inputs` as they are, or the inputs as the
/// innermost scope casts them. Nothing is cast while the entry casts, nor inside an op's
/// own forward (its parts run on operands the op's entry already cast).
pub(crate) fn cast_inputs(op: &'static str, inputs: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    // A scope opened on this thread is counted before it is pushed, so this thread never
    // misses its own scope; other threads' scopes only cost the lookup.
    if !may_cast() || CASTING.with(Cell::get) || is_internal() {
        return Ok(None);
    }
    let Some(scope) = SCOPES.with(|s| s.borrow().last().cloned()) else {
        return Ok(None);
    };
    match scope {
        Scope::Custom(p) => {
            let Some(dtype) = p.cast_dtype(op, inputs) else {
                return Ok(None);
            };
            let cast = |t: &Tensor| t.dtype().is_floating() && t.dtype() != dtype;
            if !inputs.iter().any(|t| cast(t)) {
                return Ok(None);
            }
            casting(|| {
                inputs
                    .iter()
                    .map(|t| {
                        if cast(t) {
                            t.autocast_to(dtype)
                        } else {
                            Ok((*t).clone())
                        }
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Some)
            })
        }
        Scope::Autocast(None) => Ok(None),
        Scope::Autocast(Some(region)) => {
            let Some(target) = policy::target_dtype(op, region, inputs)? else {
                return Ok(None);
            };
            let cast = |t: &Tensor| policy::eligible(t.dtype()) && t.dtype() != target;
            if !inputs.iter().any(|t| cast(t)) {
                return Ok(None);
            }
            casting(|| {
                inputs
                    .iter()
                    .map(|t| {
                        if cast(t) {
                            cache::cast(t, target, region)
                        } else {
                            Ok((*t).clone())
                        }
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Some)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cast_scope::innermost_autocast;
    use crate::DType;

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

    #[test]
    fn a_policy_leaves_in_place_ops_alone() {
        let x = Tensor::ones(&[2], DType::F32).unwrap();
        let y = with_cast_policy(Arc::new(Everything(DType::F64)), || x.mul_(2.0)).unwrap();
        assert_eq!(y.dtype(), DType::F32);
        assert_eq!(x.to_vec::<f32>().unwrap(), vec![2.0; 2]);
    }

    #[test]
    fn scopes_close_at_their_depth_even_out_of_order() {
        let outer = open_scope(Scope::Autocast(Some(DType::BF16)));
        let inner = open_scope(Scope::Autocast(Some(DType::F16)));
        assert_eq!(innermost_autocast(), Some(Some(DType::F16)));
        close_scopes(outer);
        assert_eq!(innermost_autocast(), None);
        // Closing the inner one afterwards is a no-op.
        close_scopes(inner);
        assert_eq!(innermost_autocast(), None);
    }
}
