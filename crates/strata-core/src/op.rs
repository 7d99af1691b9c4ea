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

use crate::observer::{observer, AllocEvent, MemoryAction};
pub use crate::observer::{set_observer, OpInput, OpObserver};
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
/// wrote.
pub(crate) fn outer_site() -> Option<ForwardSite> {
    OUTER_SITE.with(|s| s.get())
}

/// Attributes the ops this thread runs, until dropped, to `location` (a program's line
/// that called a library module, such as `model.call(&x)`), unless an op or an earlier
/// call site already holds the thread: the ops a built-in layer runs then name the line
/// the program wrote, and the module scope names the layer.
pub struct CallSite(bool);

impl CallSite {
    /// Marks `location` (and the module kind `name`) as this thread's call site, if none is.
    pub fn enter(location: &'static Location<'static>, name: &'static str) -> CallSite {
        if backward_site().is_some() {
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
    /// Holds the thread's outer site when this op is the outermost (clears it on drop).
    _outer: CallSite,
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
    /// when an observer is installed).
    #[track_caller]
    #[inline]
    pub fn enter_described(op: &'static str, describe: impl FnOnce() -> Vec<OpInput>) -> Self {
        // Inside backward, allocations belong to the forward op the node was recorded for;
        // inside another op, to the outermost op the program called.
        let (location, outermost) = match (backward_site(), outer_site()) {
            (Some((forward, _)), _) => (forward, false),
            (None, Some((outer, _))) => (outer, false),
            (None, None) => {
                let caller = Location::caller();
                OUTER_SITE.with(|s| s.set(Some((caller, op))));
                (caller, true)
            }
        };
        let observer = observer();
        if let Some(o) = &observer {
            o.op_begin(op, location, &describe());
        }
        OpContext {
            op,
            location,
            _outer: CallSite(outermost),
            observer,
        }
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

    /// A new storage of `nbytes` on `device`, attributed to this op's site.
    pub fn allocate(&self, nbytes: usize, device: Device) -> Result<Arc<Storage>> {
        let allocator = self.allocator(device)?;
        let site = self.site();
        let block = allocator
            .allocate(nbytes, &site)
            .map_err(|source| Error::OutOfMemory {
                op: self.op,
                source,
            })?;
        self.observe_alloc(site, block.size(), device);
        Ok(Arc::new(Storage::from_block(allocator, block, device)))
    }

    /// Tells the observer, if one is installed, that this op got `bytes` at `site`.
    pub(crate) fn observe_alloc(&self, site: Site, bytes: usize, device: Device) {
        if let Some(o) = &self.observer {
            o.memory(&AllocEvent {
                action: MemoryAction::Alloc,
                site,
                bytes,
                category: Category::Temporary,
                device,
            });
        }
    }
}

impl Drop for OpContext {
    fn drop(&mut self) {
        if let Some(o) = &self.observer {
            o.op_end(self.op);
        }
    }
}
