//! The stop flag of the worker pool a thread works for: the pool raises it when it is
//! dropped, and a collate polls it between samples to abandon a batch nobody will take.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

thread_local! {
    /// The stop flag of the pool this thread works for (none outside workers).
    static STOP: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Makes `flag` this thread's stop flag: the thread works for the pool that raises it.
pub(super) fn watch_stop(flag: Arc<AtomicBool>) {
    STOP.with(|s| *s.borrow_mut() = Some(flag));
}

/// Whether this thread is a worker whose pool is stopping: a batch being built is abandoned
/// between two samples.
pub(super) fn stop_requested() -> bool {
    STOP.with(|s| {
        s.borrow()
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    })
}
