//! Grad modes: thread-local, entered with RAII guards that are not `Send` (a guard must be
//! dropped on the thread that made it) or with the closure helpers.
//!
//! | | default | [`no_grad`] | [`inference_mode`] |
//! |---|---|---|---|
//! | ops record a `grad_fn` | when an input requires grad | never | never |
//! | in-place ops bump the version | yes | yes | yes, except on inference tensors |
//! | new tensors | normal | normal | inference tensors (no version counter; refused by autograd later) |
//!
//! Kernels that run on worker threads never read the mode: an op decides at its entry, on the
//! calling thread, whether it records.

use std::cell::Cell;
use std::marker::PhantomData;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    grad: bool,
    inference: bool,
    /// Set while a composite op runs its parts: they record nothing (the op records itself)
    /// but the user's grad mode, which views remember, is unchanged.
    internal: bool,
}

thread_local! {
    static MODE: Cell<Mode> = const {
        Cell::new(Mode {
            grad: true,
            inference: false,
            internal: false,
        })
    };
}

/// True when ops on this thread record autograd history (grad mode on, not in inference mode).
pub fn is_grad_enabled() -> bool {
    MODE.with(|m| {
        let m = m.get();
        m.grad && !m.inference && !m.internal
    })
}

/// True inside [`inference_mode`] on this thread.
pub fn is_inference_mode_enabled() -> bool {
    MODE.with(|m| m.get().inference)
}

/// Restores the previous grad mode when dropped. Not `Send`: drop it on the thread that made
/// it, in the reverse order of creation.
#[must_use = "the mode ends when the guard is dropped"]
#[derive(Debug)]
pub struct GradModeGuard {
    previous: Mode,
    _not_send: PhantomData<*const ()>,
}

impl GradModeGuard {
    fn set(next: impl FnOnce(Mode) -> Mode) -> GradModeGuard {
        let previous = MODE.with(|m| {
            let p = m.get();
            m.set(next(p));
            p
        });
        GradModeGuard {
            previous,
            _not_send: PhantomData,
        }
    }

    /// Turns recording off until the guard drops (`torch.no_grad()`).
    pub fn no_grad() -> GradModeGuard {
        GradModeGuard::set(|m| Mode { grad: false, ..m })
    }

    /// Turns recording back on until the guard drops (`torch.enable_grad()`); inside inference
    /// mode nothing is recorded all the same.
    pub fn enable_grad() -> GradModeGuard {
        GradModeGuard::set(|m| Mode { grad: true, ..m })
    }

    /// Enters inference mode until the guard drops (`torch.inference_mode()`): nothing is
    /// recorded and tensors made inside are inference tensors.
    pub fn inference_mode() -> GradModeGuard {
        GradModeGuard::set(|m| Mode {
            grad: false,
            inference: true,
            ..m
        })
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        let previous = self.previous;
        MODE.with(|m| m.set(previous));
    }
}

/// True when the user's grad mode (not counting ops' internal parts) is on.
pub(crate) fn user_grad_mode() -> bool {
    MODE.with(|m| m.get().grad)
}

/// True while an op runs its own forward (its parts neither record nor are cast again).
pub(crate) fn is_internal() -> bool {
    MODE.with(|m| m.get().internal)
}

/// Runs the parts of a composite op without recording them.
pub(crate) fn internal<R>(f: impl FnOnce() -> R) -> R {
    let _g = GradModeGuard::set(|m| Mode {
        internal: true,
        ..m
    });
    f()
}

/// Runs `f` with recording off.
///
/// ```
/// use strata_core::{autograd, DType, Tensor};
/// let w = Tensor::ones(&[3], DType::F32)?.requires_grad_(true)?;
/// let y = autograd::no_grad(|| w.mul(2.0))?;
/// assert!(!y.requires_grad());
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = GradModeGuard::no_grad();
    f()
}

/// Runs `f` with recording on (inside [`no_grad`], for example).
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = GradModeGuard::enable_grad();
    f()
}

/// Runs `f` in inference mode: no recording, and the tensors it makes are inference tensors.
pub fn inference_mode<R>(f: impl FnOnce() -> R) -> R {
    let _g = GradModeGuard::inference_mode();
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_nest_and_restore() {
        assert!(is_grad_enabled());
        {
            let _a = GradModeGuard::no_grad();
            assert!(!is_grad_enabled());
            {
                let _b = GradModeGuard::enable_grad();
                assert!(is_grad_enabled());
                let _c = GradModeGuard::inference_mode();
                assert!(!is_grad_enabled() && is_inference_mode_enabled());
            }
            assert!(!is_grad_enabled() && !is_inference_mode_enabled());
        }
        assert!(is_grad_enabled());
        inference_mode(|| {
            let _g = GradModeGuard::enable_grad();
            assert!(!is_grad_enabled(), "inference mode records nothing");
        });
    }

    #[test]
    fn mode_is_per_thread() {
        let _g = GradModeGuard::no_grad();
        let other = std::thread::spawn(is_grad_enabled).join().unwrap();
        assert!(other);
        assert!(!is_grad_enabled());
    }
}
