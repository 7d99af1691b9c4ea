//! Each thread's spare storage object: the emptied storage of the last plain tensor that
//! died on the thread (see `tensor::spare`), kept for the next allocation to refill instead
//! of allocating a new heap object.

use std::cell::Cell;
use std::sync::Arc;

use super::Storage;

/// One thread's spare storage, and the placeholder that takes its place in a dying tensor.
struct Spare {
    /// A storage of no bytes, shared by the bodies of the thread's spare tensor objects.
    placeholder: Arc<Storage>,
    storage: Cell<Option<Arc<Storage>>>,
}

thread_local! {
    static SPARE: Spare = Spare {
        placeholder: Arc::new(Storage::placeholder()),
        storage: Cell::new(None),
    };
}

/// Takes the storage out of `slot` (a dying tensor's body), leaving the thread's
/// placeholder. When `slot` held the last handle to it and its bytes are an allocator's
/// block, the block goes back to the allocator now (as the drop would return it) and the
/// emptied object becomes the thread's spare; otherwise the handle just drops. False, having
/// done nothing, while the thread exits.
pub(crate) fn take_out(slot: &mut Arc<Storage>) -> bool {
    SPARE
        .try_with(|s| {
            let mut storage = std::mem::replace(slot, s.placeholder.clone());
            if Arc::get_mut(&mut storage).is_some_and(Storage::release_block) {
                // A spare already there is freed: one is enough for any loop.
                s.storage.set(Some(storage));
            }
        })
        .is_ok()
}

/// This thread's spare storage object, emptied, if it has one.
pub(crate) fn take() -> Option<Arc<Storage>> {
    SPARE.try_with(|s| s.storage.take()).ok().flatten()
}
