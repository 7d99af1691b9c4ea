//! One thread's spare heap object of one type (see `tensor::spare` and `storage::spare`):
//! the object a dying tensor gave up, kept for the next op to refill, and the placeholder
//! that takes its place in the dying tensor.

use std::cell::Cell;
use std::sync::Arc;

/// A spare object of type `T`, if there is one, and a placeholder `T` shared by every dying
/// handle that gave its object up.
pub(crate) struct SpareSlot<T> {
    placeholder: Arc<T>,
    spare: Cell<Option<Arc<T>>>,
}

impl<T> SpareSlot<T> {
    /// An empty slot with `placeholder` to stand in for the objects it keeps.
    pub(crate) fn new(placeholder: T) -> SpareSlot<T> {
        SpareSlot {
            placeholder: Arc::new(placeholder),
            spare: Cell::new(None),
        }
    }

    /// Takes the object out of `handle`, leaving a handle to the placeholder.
    pub(crate) fn take_out(&self, handle: &mut Arc<T>) -> Arc<T> {
        std::mem::replace(handle, self.placeholder.clone())
    }

    /// Keeps `object` as the spare. A spare already there is freed: one is enough for any
    /// loop.
    pub(crate) fn keep(&self, object: Arc<T>) {
        self.spare.set(Some(object));
    }

    /// The spare, if there is one, leaving the slot empty.
    pub(crate) fn take(&self) -> Option<Arc<T>> {
        self.spare.take()
    }
}
