//! Each thread's spare tensor object: the object of the last plain tensor that died on the
//! thread, kept to be filled in again by the next op instead of being freed and allocated
//! anew.
//!
//! A tensor is two heap objects (its `TensorImpl` and its `Storage`), and a loop such as
//! `x = f(x)` frees one pair and allocates the next on every op: two `malloc`s and two
//! `free`s, more than the rest of a one-element op costs. When the last handle to a tensor
//! that is no view, has no autograd state and no version of its own drops, its storage is
//! taken out (the storage's own spare, `storage::spare`: when no other tensor shares it, its
//! block goes back to the allocator at once, so the memory and every statistic move exactly
//! as when it is freed, and the emptied object is kept) and the tensor object waits here,
//! one per thread, for [`take_tensor`]. Only heap objects are kept: never memory an
//! allocator counts, never a value anything can still reach (nothing else held them).

use std::sync::Arc;

use super::TensorImpl;
use crate::spare_slot::SpareSlot;
use crate::storage::spare as storage_spare;

thread_local! {
    /// The stand-in's storage is a stand-in too, so a handle left holding it frees
    /// nothing when it drops.
    static SPARE: SpareSlot<TensorImpl> = SpareSlot::new(TensorImpl::stand_in());
}

/// Called as the handle `handle` drops: when it is the last handle to a plain tensor, keeps
/// the tensor object as this thread's spare and leaves a stand-in in `handle`, whose drop
/// then frees nothing. Otherwise does nothing, and the handle drops as usual.
pub(super) fn keep(handle: &mut Arc<TensorImpl>) {
    // Most handles that drop are not the last (clones, inputs kept by the graph): one load
    // tells them apart before the thread-local is touched.
    if Arc::strong_count(handle) != 1 {
        return;
    }
    // While the thread exits its spare may be gone: the handle then drops as usual.
    let _ = SPARE.try_with(|spare| keep_in(handle, spare));
}

fn keep_in(handle: &mut Arc<TensorImpl>, spare: &SpareSlot<TensorImpl>) {
    let Some(inner) = Arc::get_mut(handle) else {
        return;
    };
    if !inner.is_plain() {
        return;
    }
    let body = inner.body.get_mut().unwrap_or_else(|p| p.into_inner());
    // The storage first, as a drop would: its block goes back to the allocator now.
    if !storage_spare::take_out(&mut body.storage) {
        return;
    }
    spare.keep(spare.take_out(handle));
}

/// This thread's spare tensor object, if it has one. Its body holds a stand-in storage;
/// the caller overwrites all of it.
pub(super) fn take_tensor() -> Option<Arc<TensorImpl>> {
    SPARE.try_with(SpareSlot::take).ok().flatten()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use strata_alloc::{DeviceAllocator, HostBacking, HostCachingAllocator};

    use crate::{with_allocator, DType, Tensor};

    /// Runs `f` with a private caching allocator for the CPU, so that its counts are this
    /// test's alone.
    fn with_cache(f: impl FnOnce(&HostCachingAllocator)) {
        let cache = Arc::new(HostCachingAllocator::new(HostBacking::new()));
        let dynamic: Arc<dyn DeviceAllocator> = cache.clone();
        with_allocator(&dynamic, || f(&cache));
    }

    #[test]
    fn a_dropped_plain_tensor_gives_its_objects_to_the_next_result() {
        with_cache(|cache| {
            let a = Tensor::ones(&[3], DType::F32).unwrap();
            let b = Tensor::full(&[3], 2.0, DType::F32).unwrap();
            let c = a.add(&b).unwrap();
            let (object, storage) = (Arc::as_ptr(&c.0), c.storage_id());
            let before = cache.memory_allocated();
            drop(c);
            // The memory went back at the drop, as it does without a spare.
            assert_eq!(cache.memory_allocated(), before - 512);
            // Had the object gone back to the heap, this request of its size would get it.
            let decoy = vec![0u8; 16 + std::mem::size_of::<super::TensorImpl>()];
            let d = a.mul(&b).unwrap();
            assert_eq!(Arc::as_ptr(&d.0), object, "the tensor object was reused");
            // A new storage identity, version and values: nothing of `c` shows through.
            assert_ne!(d.storage_id(), storage);
            assert_eq!(d.version(), 0);
            assert!(!d.requires_grad());
            assert_eq!(d.to_vec::<f32>().unwrap(), vec![2.0; 3]);
            assert_eq!(cache.memory_allocated(), before);
            drop(decoy);
        });
    }

    #[test]
    fn tensors_something_else_still_reaches_are_not_kept() {
        with_cache(|_| {
            let a = Tensor::ones(&[4], DType::F32).unwrap();
            // A weak handle: the object must stay what it was until the handle notices.
            let c = a.add(&a).unwrap();
            let weak = c.downgrade_handle();
            let object = Arc::as_ptr(&c.0);
            drop(c);
            assert!(weak.upgrade().is_none());
            let d = a.add(&a).unwrap();
            assert_ne!(Arc::as_ptr(&d.0), object);
            // A view keeps its base's storage: dropping the base keeps the view's values.
            let base = a.add(&a).unwrap();
            let view = base.narrow(0, 1, 2).unwrap();
            drop(base);
            let _other = a.mul(&a).unwrap();
            assert_eq!(view.to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
            // A tensor in a graph keeps its autograd state until it really drops.
            let x = Tensor::ones(&[2], DType::F32)
                .unwrap()
                .requires_grad_(true)
                .unwrap();
            let y = x.mul(&x).unwrap();
            let loss = y.sum(None, false).unwrap();
            drop(y);
            loss.backward().unwrap();
            assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
        });
    }

    #[test]
    fn a_shared_storage_stays_with_the_tensor_that_still_uses_it() {
        with_cache(|cache| {
            let a = Tensor::ones(&[4], DType::F32).unwrap();
            let c = a.add(&a).unwrap();
            let alias = c.detach().unwrap();
            let held = cache.memory_allocated();
            drop(c);
            // The storage is still `alias`'s: nothing went back to the allocator.
            assert_eq!(cache.memory_allocated(), held);
            let _d = a.mul(&a).unwrap();
            assert_eq!(alias.to_vec::<f32>().unwrap(), vec![2.0; 4]);
        });
    }

    #[test]
    fn a_tensor_dropped_on_another_thread_is_freed_there() {
        with_cache(|cache| {
            let a = Tensor::ones(&[8], DType::F32).unwrap();
            let c = a.add(&a).unwrap();
            let held = cache.memory_allocated();
            std::thread::spawn(move || drop(c)).join().unwrap();
            assert_eq!(cache.memory_allocated(), held - 512);
        });
    }
}
