//! Each thread's spare storage object: the emptied storage of the last plain tensor that
//! died on the thread (see `tensor::spare`), kept for the next allocation to refill instead
//! of allocating a new heap object.

use std::sync::Arc;

use super::Storage;
use crate::spare_slot::SpareSlot;

thread_local! {
    /// The stand-in is a storage of no bytes, shared by the bodies of the thread's spare
    /// tensor objects.
    static SPARE: SpareSlot<Storage> = SpareSlot::new(Storage::stand_in());
}

/// Takes the storage out of `slot` (a dying tensor's body), leaving the thread's
/// stand-in. When `slot` held the last handle to it and its bytes are an allocator's
/// block, the block goes back to the allocator now (as the drop would return it) and the
/// emptied object becomes the thread's spare; otherwise the handle just drops. False, having
/// done nothing, while the thread exits.
pub(crate) fn take_out(slot: &mut Arc<Storage>) -> bool {
    SPARE
        .try_with(|s| {
            let mut storage = s.take_out(slot);
            if Arc::get_mut(&mut storage).is_some_and(Storage::release_block) {
                s.keep(storage);
            }
        })
        .is_ok()
}

/// This thread's spare storage object, emptied, if it has one.
pub(crate) fn take() -> Option<Arc<Storage>> {
    SPARE.try_with(SpareSlot::take).ok().flatten()
}
