//! The view hook: a process-wide observer told of every view a user-facing view op makes
//! (the view-retention report keeps weak handles to them). With none installed, each view
//! pays one atomic load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use super::Tensor;

/// Told of every view a user-facing view op makes. Installed with [`set_view_observer`].
pub trait ViewObserver: Send + Sync {
    /// A view op made `view`; called on the thread that runs the op, while the op's entry
    /// is still open (between the op observer's `op_begin` and `op_end`).
    fn view_made(&self, view: &Tensor);
}

static OBSERVED: AtomicBool = AtomicBool::new(false);
static OBSERVER: RwLock<Option<Arc<dyn ViewObserver>>> = RwLock::new(None);

/// Installs (or with `None` removes) the process-wide view observer.
pub fn set_view_observer(observer: Option<Arc<dyn ViewObserver>>) {
    let mut slot = OBSERVER.write().unwrap_or_else(|p| p.into_inner());
    OBSERVED.store(observer.is_some(), Ordering::Release);
    *slot = observer;
}

/// The installed view observer, if any (one atomic load when there is none).
pub(crate) fn view_observer() -> Option<Arc<dyn ViewObserver>> {
    if !OBSERVED.load(Ordering::Acquire) {
        return None;
    }
    OBSERVER.read().unwrap_or_else(|p| p.into_inner()).clone()
}
