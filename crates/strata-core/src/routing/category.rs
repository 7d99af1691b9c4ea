//! How a new storage's memory is counted from its first byte: as a temporary, or under the
//! category of a scope opened with [`allocating_as`].

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use strata_alloc::Category;

thread_local! {
    static SCOPED: Cell<Option<Category>> = const { Cell::new(None) };
}

/// Scopes open on any thread: while there are none, an allocation skips the thread-local
/// read. A thread's own scope is counted before its first allocation under it, in program
/// order, so `Relaxed` suffices.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` with every storage it allocates on this thread counted under `category` from the
/// moment its memory is handed out: no reading of the statistics, on any thread, sees it as
/// a temporary first (which [`Tensor::mark_category`](crate::Tensor::mark_category) after the
/// allocation cannot promise while other threads read). Scopes nest; the innermost applies,
/// and each ends when `f` returns or unwinds.
///
/// ```
/// use strata_core::{allocating_as, memory, Category, DType, Device, Tensor};
/// let batch = allocating_as(Category::Input, || Tensor::zeros(&[32, 784], DType::F32))?;
/// assert_eq!(batch.memory_category(), Category::Input);
/// let stats = memory::memory_stats(Device::Cpu)?;
/// assert!(stats.category_bytes.get(Category::Input).current >= 32 * 784 * 4);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn allocating_as<R>(category: Category, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Category>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPED.with(|s| s.set(self.0));
            OPEN.fetch_sub(1, Ordering::Relaxed);
        }
    }
    OPEN.fetch_add(1, Ordering::Relaxed);
    let _restore = Restore(SCOPED.with(|s| s.replace(Some(category))));
    f()
}

/// The category of this thread's innermost [`allocating_as`] scope, if any.
#[inline]
pub(crate) fn scoped_category() -> Option<Category> {
    if OPEN.load(Ordering::Relaxed) == 0 {
        None
    } else {
        SCOPED.with(Cell::get)
    }
}
