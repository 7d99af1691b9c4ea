//! One thread's spare heap object of one type (see `tensor::spare` and `storage::spare`):
//! the object a dying tensor gave up, kept for the next op to refill, and the stand-in
//! that takes its place in the dying tensor.

use std::cell::Cell;
use std::sync::Arc;

/// A spare object of type `T`, if there is one, and a stand-in `T` shared by every dying
/// handle that gave its object up.
pub(crate) struct SpareSlot<T> {
    stand_in: Arc<T>,
    spare: Cell<Option<Arc<T>>>,
}

impl<T> SpareSlot<T> {
    /// An empty slot whose `stand_in` takes the place of the objects it keeps.
    pub(crate) fn new(stand_in: T) -> SpareSlot<T> {
        SpareSlot {
            stand_in: Arc::new(stand_in),
            spare: Cell::new(None),
        }
    }

    /// Takes the object out of `handle`, leaving a handle to the stand-in.
    pub(crate) fn take_out(&self, handle: &mut Arc<T>) -> Arc<T> {
        std::mem::replace(handle, self.stand_in.clone())
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
