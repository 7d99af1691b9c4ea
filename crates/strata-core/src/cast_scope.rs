//! The per-thread stack of cast scopes under the op entry's mixed-precision seam, and the
//! lifetime of autocast's cast cache.
//!
//! A scope is a custom [`CastPolicy`] or an autocast region; the innermost open one decides
//! an op's casts (`api::autocast` applies them). This module holds only the state, below
//! both the op layer and autograd: a checkpoint captures the autocast state at forward and
//! restores it for its recomputation ([`autocast_state`], [`with_autocast_state`]) without
//! reaching into the op layer. The cast cache's entries live here too, so that closing the
//! outermost autocast region (here) can empty it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use crate::tensor::TensorImpl;
use crate::{DType, Tensor};

/// Decides the dtype an op's floating operands are computed in.
pub trait CastPolicy: Send + Sync {
    /// The dtype `op`'s floating operands are cast to, or `None` to leave them as they are.
    fn cast_dtype(&self, op: &'static str, inputs: &[&Tensor]) -> Option<DType>;
}

/// One open cast scope.
#[derive(Clone)]
pub(crate) enum Scope {
    /// A custom policy (`autocast::with_cast_policy`).
    Custom(Arc<dyn CastPolicy>),
    /// An autocast region computing in this dtype, or a region that turns autocast off
    /// (`None`: a checkpoint's recomputation of a forward that ran outside autocast).
    Autocast(Option<DType>),
}

/// How many scopes are open, on all threads: while none is, an op's entry skips the
/// thread-local lookup.
pub(crate) static OPEN_SCOPES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    pub(crate) static SCOPES: RefCell<Vec<Scope>> = const { RefCell::new(Vec::new()) };
}

/// Opens `scope` on this thread; returns the stack depth to close it at with
/// [`close_scopes`]. The scope is counted before it is pushed, so this thread never misses
/// its own scope on the fast path.
pub(crate) fn open_scope(scope: Scope) -> usize {
    OPEN_SCOPES.fetch_add(1, Ordering::Acquire);
    SCOPES.with(|s| {
        let mut s = s.borrow_mut();
        s.push(scope);
        s.len() - 1
    })
}

/// Closes every scope at `depth` and above (nothing when they are already closed). Clears
/// the autocast cast cache when this closes the thread's outermost autocast region.
pub(crate) fn close_scopes(depth: usize) {
    let (closed, autocast_left) = SCOPES.with(|s| {
        let mut s = s.borrow_mut();
        let from = depth.min(s.len());
        let closed: Vec<Scope> = s.drain(from..).collect();
        let left = s.iter().any(|x| matches!(x, Scope::Autocast(_)));
        (closed, left)
    });
    if closed.is_empty() {
        return;
    }
    OPEN_SCOPES.fetch_sub(closed.len(), Ordering::Release);
    let closed_autocast = closed.iter().any(|x| matches!(x, Scope::Autocast(_)));
    // Dropped outside the stack's borrow: a custom policy's drop may do anything.
    drop(closed);
    if closed_autocast && !autocast_left {
        clear_cache();
    }
}

/// The innermost autocast scope on this thread: `None` when there is none, `Some(None)`
/// when it turns autocast off.
pub(crate) fn innermost_autocast() -> Option<Option<DType>> {
    if OPEN_SCOPES.load(Ordering::Relaxed) == 0 {
        return None;
    }
    SCOPES.with(|s| {
        s.borrow().iter().rev().find_map(|x| match x {
            Scope::Autocast(d) => Some(*d),
            Scope::Custom(_) => None,
        })
    })
}

/// One cached cast, valid while its source is alive and unchanged.
pub(crate) struct CachedCast {
    /// The source; held weakly (its allocation, and so its address, stays reserved), so the
    /// cache keeps no parameter alive.
    pub(crate) source: Weak<TensorImpl>,
    /// The source's version and storage when it was cast: an in-place write or new data
    /// (`set_data`) makes the entry stale.
    pub(crate) version: u32,
    pub(crate) storage: u64,
    pub(crate) cast: Tensor,
}

thread_local! {
    /// By the source's address and the target dtype.
    pub(crate) static CAST_CACHE: RefCell<HashMap<(usize, DType), CachedCast>> = RefCell::new(HashMap::new());
}

/// Empties this thread's cache (the outermost autocast region closed).
pub(crate) fn clear_cache() {
    let entries = CAST_CACHE.with(|c| std::mem::take(&mut *c.borrow_mut()));
    drop(entries);
}

/// How many casts this thread's cache holds.
#[cfg(test)]
pub(crate) fn cache_len() -> usize {
    CAST_CACHE.with(|c| c.borrow().len())
}

/// The thread's autocast state, as a checkpoint captures it at forward: the innermost
/// region's dtype, or `None` outside autocast.
pub(crate) fn autocast_state() -> Option<DType> {
    innermost_autocast().flatten()
}

/// Runs `f` with autocast as `state` says (a region of that dtype, or autocast off), as a
/// checkpoint's recomputation restores the state its forward ran in.
pub(crate) fn with_autocast_state<R>(state: Option<DType>, f: impl FnOnce() -> R) -> R {
    struct Close(usize);
    impl Drop for Close {
        fn drop(&mut self) {
            close_scopes(self.0);
        }
    }
    let _close = Close(open_scope(Scope::Autocast(state)));
    f()
}
