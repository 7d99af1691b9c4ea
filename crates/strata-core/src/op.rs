//! The one way into every op: an [`OpContext`] built at the public entry point.
//!
//! Public ops are `#[track_caller]` and start with `OpContext::enter("name")`, which captures
//! the user's source location, the op name, the allocator to use, and notifies the observer
//! hook. Allocation sites, profiling and (later) autograd decisions live here, once. Closures
//! and module boundaries lose `#[track_caller]`, so the context is captured at the entry and
//! passed down, never re-derived.

use std::cell::Cell;
use std::panic::Location;
use std::sync::Arc;

use strata_alloc::{Category, DeviceAllocator, Site};

use crate::observer::{attention, attributing, observer_if, AllocEvent, MemoryAction};
pub use crate::observer::{set_observer, OpInput, OpObserver, ProgramLines};
use crate::routing::current_allocator;
use crate::storage::Storage;
use crate::{Device, Error, Result};

thread_local! {
    static BACKWARD_SITE: Cell<Option<ForwardSite>> = const { Cell::new(None) };
    static OUTER_SITE: Cell<Option<ForwardSite>> = const { Cell::new(None) };
}

/// A forward op's source location and name.
type ForwardSite = (&'static Location<'static>, &'static str);

/// The forward op whose backward is running on this thread: ops entered meanwhile attribute
/// their allocations to it rather than to the autograd engine's own source lines.
fn backward_site() -> Option<ForwardSite> {
    BACKWARD_SITE.with(|s| s.get())
}

/// Marks, until dropped, that the backward of a forward op runs on this thread (set by the
/// autograd engine around each node it runs).
pub(crate) struct BackwardSite(Option<ForwardSite>);

impl BackwardSite {
    /// Attributes this thread's allocations to `site` (or to nobody with `None`) until the
    /// guard drops.
    pub(crate) fn enter(site: Option<ForwardSite>) -> BackwardSite {
        BackwardSite(BACKWARD_SITE.with(|s| s.replace(site)))
    }
}

impl Drop for BackwardSite {
    fn drop(&mut self) {
        let previous = self.0;
        BACKWARD_SITE.with(|s| s.set(previous));
    }
}

/// The public op the program called that is running on this thread (its line and name),
/// if any: ops it runs inside itself (`cross_entropy`'s `div`, `linear`'s transpose) are
/// attributed to it, so every allocation, graph node and finding names a line the program
/// wrote. Recorded only while an observer (a profiler) is installed or a [`ProgramLines`]
/// lives (a memory watch), so ops pay nothing for it otherwise.
pub(crate) fn outer_site() -> Option<ForwardSite> {
    OUTER_SITE.with(|s| s.get())
}

/// Attributes the ops this thread runs, until dropped, to `location` (a program's line
/// that called a library module, such as `model.call(&x)`), unless an op or an earlier
/// call site already holds the thread: the ops a built-in layer runs then name the line
/// the program wrote, and the module scope names the layer. Does nothing while ops are not
/// attributed to the program's lines (see [`ProgramLines`]).
pub struct CallSite(bool);

impl CallSite {
    /// Marks `location` (and the module kind `name`) as this thread's call site, if none is
    /// and ops are attributed to the program's lines.
    pub fn enter(location: &'static Location<'static>, name: &'static str) -> CallSite {
        if !attributing(attention()) || backward_site().is_some() {
            return CallSite(false);
        }
        CallSite(OUTER_SITE.with(|s| {
            if s.get().is_some() {
                return false;
            }
            s.set(Some((location, name)));
            true
        }))
    }
}

impl Drop for CallSite {
    fn drop(&mut self) {
        if self.0 {
            OUTER_SITE.with(|s| s.set(None));
        }
    }
}

/// Everything an op knows about the call that started it.
pub struct OpContext {
    op: &'static str,
    location: &'static Location<'static>,
    /// Whether this op set the thread's outer site (cleared again on drop).
    outermost: bool,
    observer: Option<Arc<dyn OpObserver>>,
}

impl OpContext {
    /// Starts op `op` for the caller of the `#[track_caller]` function that calls this.
    #[track_caller]
    #[inline]
    pub fn enter(op: &'static str) -> Self {
        Self::enter_described(op, Vec::new)
    }

    /// Starts op `op` whose tensor operands `describe` lists for the observer (called only
    /// when an observer is installed). Always inlined: every op's entry makes one, and a
    /// call of its own cost a one-element add 23 instructions.
    #[track_caller]
    #[inline(always)]
    pub fn enter_described(op: &'static str, describe: impl FnOnce() -> Vec<OpInput>) -> Self {
        let attention = attention();
        let (location, outermost) = if attributing(attention) {
            Self::attribute(op, Location::caller())
        } else {
            // Nobody listens: an op is attributed to its own caller (or, inside backward, to
            // the forward op the node was recorded for) and touches no outer site.
            match backward_site() {
                Some((forward, _)) => (forward, false),
                None => (Location::caller(), false),
            }
        };
        let observer = observer_if(attention);
        if let Some(o) = &observer {
            o.op_begin(op, location, &describe());
        }
        OpContext {
            op,
            location,
            outermost,
            observer,
        }
    }

    /// Where an op's allocations belong while ops are attributed to the program's lines:
    /// inside backward, to the forward op the node was recorded for; inside another op or
    /// a library module's call, to the line the program wrote; otherwise to `caller`, which
    /// becomes the thread's outer site (`true`: this op set it).
    fn attribute(
        op: &'static str,
        caller: &'static Location<'static>,
    ) -> (&'static Location<'static>, bool) {
        if let Some((forward, _)) = backward_site() {
            return (forward, false);
        }
        OUTER_SITE.with(|s| match s.get() {
            Some((outer, _)) => (outer, false),
            None => {
                s.set(Some((caller, op)));
                (caller, true)
            }
        })
    }

    /// The op's name.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// The user's source location (of the outermost op the program called).
    pub fn location(&self) -> &'static Location<'static> {
        self.location
    }

    /// The allocation site this op records: its source line, its name, and the scope path
    /// it runs in (in backward, its forward op's).
    pub fn site(&self) -> Site {
        Site::new(self.location, self.op).in_scope(crate::scope::current())
    }

    /// The allocator new storages on `device` come from.
    pub fn allocator(&self, device: Device) -> Result<Arc<dyn DeviceAllocator>> {
        current_allocator(device)
    }

    /// A new storage of `nbytes` on `device`, attributed to this op's site and counted as a
    /// temporary, or under the category of this thread's
    /// [`allocating_as`](crate::allocating_as) scope.
    pub fn allocate(&self, nbytes: usize, device: Device) -> Result<Arc<Storage>> {
        let allocator = crate::routing::allocator_for(device)?;
        let site = self.site();
        let scoped = crate::routing::scoped_category();
        let block = match scoped {
            None => allocator.get().allocate(nbytes, &site),
            Some(c) => allocator.get().allocate_as(nbytes, &site, c),
        }
        .map_err(|source| Error::OutOfMemory {
            op: self.op,
            source,
        })?;
        self.observe_alloc(site, block.size(), device, scoped);
        // The thread's spare storage object, when it has one, saves a heap allocation.
        if let Some(mut spare) = crate::storage::spare::take() {
            if let Some(s) = Arc::get_mut(&mut spare) {
                s.refill(allocator.get(), block, device);
                return Ok(marked(spare, scoped));
            }
        }
        let storage = Storage::from_block(allocator.into_arc(), block, device);
        Ok(marked(Arc::new(storage), scoped))
    }

    /// Tells the observer, if one is installed, that this op got `bytes` at `site`, counted
    /// under `category` (a temporary when `None`).
    pub(crate) fn observe_alloc(
        &self,
        site: Site,
        bytes: usize,
        device: Device,
        category: Option<Category>,
    ) {
        if let Some(o) = &self.observer {
            o.memory(&AllocEvent {
                action: MemoryAction::Alloc,
                site,
                bytes,
                category: category.unwrap_or(Category::Temporary),
                device,
            });
        }
    }
}

/// `storage`, recorded as `category`'s when given (its allocator counts it so already).
#[inline]
fn marked(storage: Arc<Storage>, category: Option<Category>) -> Arc<Storage> {
    if let Some(c) = category {
        mark_scoped(&storage, c);
    }
    storage
}

#[cold]
#[inline(never)]
fn mark_scoped(storage: &Storage, category: Category) {
    storage.mark_category(category);
}

impl Drop for OpContext {
    fn drop(&mut self) {
        if let Some(o) = &self.observer {
            o.op_end(self.op);
        }
        if self.outermost {
            OUTER_SITE.with(|s| s.set(None));
        }
    }
}
