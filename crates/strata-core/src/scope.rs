//! Scopes: names pushed on a per-thread stack (`encoder`, `layers.3`, `mlp` make the path
//! `encoder.layers.3.mlp`) that every allocation records beside its source line, so memory
//! can be attributed to the part of a model that asked for it. Modules push their names;
//! anyone can push their own.
//!
//! ```
//! use strata_core::{scope, DType, Tensor};
//! let _model = scope::enter("encoder");
//! {
//!     let _layer = scope::enter("layers.3");
//!     assert_eq!(scope::current(), "encoder.layers.3");
//!     let _h = Tensor::zeros(&[64], DType::F32)?; // recorded under encoder.layers.3
//! }
//! assert_eq!(scope::current(), "encoder");
//! # Ok::<(), strata_core::Error>(())
//! ```

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Mutex;

thread_local! {
    static CURRENT: Cell<&'static str> = const { Cell::new("") };
}

/// Every path ever entered, stored once: allocations record a `&'static str`, so taking the
/// current path costs a thread-local read.
static PATHS: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

fn intern(path: &str) -> &'static str {
    let mut paths = PATHS.lock().unwrap_or_else(|p| p.into_inner());
    let set = paths.get_or_insert_with(HashSet::new);
    if let Some(&p) = set.get(path) {
        return p;
    }
    let p: &'static str = Box::leak(path.to_owned().into_boxed_str());
    set.insert(p);
    p
}

/// The scope path of this thread (`""` outside every scope).
pub fn current() -> &'static str {
    CURRENT.with(Cell::get)
}

/// Appends `name` to this thread's scope path until the guard drops. An empty name leaves
/// the path as it is.
pub fn enter(name: &str) -> ScopeGuard {
    let previous = current();
    let path = match (previous.is_empty(), name.is_empty()) {
        (_, true) => previous,
        (true, false) => intern(name),
        (false, false) => intern(&format!("{previous}.{name}")),
    };
    ScopeGuard::replace(path)
}

/// Sets this thread's scope path to exactly `path` until the guard drops (backward runs a
/// node under the scope its forward op was recorded in).
pub(crate) fn restore(path: &'static str) -> ScopeGuard {
    ScopeGuard::replace(path)
}

/// Restores the scope path that was current when it was made, when dropped.
#[must_use = "the scope ends when the guard is dropped"]
#[derive(Debug)]
pub struct ScopeGuard {
    previous: &'static str,
    // The path is per thread: the guard must drop on the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl ScopeGuard {
    fn replace(path: &'static str) -> ScopeGuard {
        ScopeGuard {
            previous: CURRENT.with(|c| c.replace(path)),
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        let previous = self.previous;
        CURRENT.with(|c| c.set(previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_nest_and_unwind() {
        assert_eq!(current(), "");
        let a = enter("model");
        let b = enter("block.0");
        assert_eq!(current(), "model.block.0");
        let same = enter("");
        assert_eq!(current(), "model.block.0");
        drop(same);
        drop(b);
        assert_eq!(current(), "model");
        let again = enter("block.0");
        // The same path is stored once.
        assert!(std::ptr::eq(current(), intern("model.block.0")));
        drop((again, a));
        assert_eq!(current(), "");
    }

    #[test]
    fn each_thread_has_its_own_path() {
        let _outer = enter("main");
        let seen = std::thread::spawn(current).join().unwrap_or("?");
        assert_eq!(seen, "");
        assert_eq!(current(), "main");
    }
}
