//! The observer: a process-wide hook that receives every op's begin and end and every
//! allocation and free, for profilers and memory watches. With none installed, each op and
//! each freed storage pays one atomic load.

use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use strata_alloc::{Category, Site};

use crate::{DType, Device};

/// One tensor operand of an op, as the observer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpInput {
    /// The operand's shape.
    pub shape: Vec<usize>,
    /// The operand's dtype.
    pub dtype: DType,
}

/// Receives op begin/end events and allocation/free events (for profilers and memory
/// watches). Installed with [`set_observer`].
pub trait OpObserver: Send + Sync {
    /// Memory was allocated or freed (by default, ignored).
    fn memory(&self, event: &AllocEvent) {
        let _ = event;
    }
    /// An op started, called from `location`, with these tensor operands (empty for ops
    /// entered without a description of their operands: factories, internal steps).
    fn op_begin(&self, op: &'static str, location: &'static Location<'static>, inputs: &[OpInput]);
    /// The op that started last on this thread finished (successfully or not).
    fn op_end(&self, op: &'static str);
    /// `memory::empty_cache(device)` released `released` bytes of cached segments and left
    /// `reserved_after` bytes reserved (by default, ignored).
    fn cache_emptied(&self, device: Device, released: usize, reserved_after: usize) {
        let _ = (device, released, reserved_after);
    }
}

/// Whether memory was handed out or given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryAction {
    /// A new storage got its bytes.
    Alloc,
    /// A storage's bytes went back to its allocator.
    Free,
}

/// One allocation or free, as the observer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocEvent {
    /// What happened.
    pub action: MemoryAction,
    /// Who asked for the memory: the op, its source line and its scope path (for a free,
    /// the allocation's).
    pub site: Site,
    /// Bytes of the storage.
    pub bytes: usize,
    /// What the bytes held (a new allocation is a temporary until something marks it, or
    /// the category of the [`allocating_as`](crate::allocating_as) scope it was made in).
    pub category: Category,
    /// The device the bytes are on.
    pub device: Device,
}

/// What listens to ops, in one word so that an op reads it with one atomic load: bit 0 is
/// set while an observer is installed, and each live [`ProgramLines`] adds
/// [`ONE_PROGRAM_LINES`].
static ATTENTION: AtomicUsize = AtomicUsize::new(0);
const OBSERVER_BIT: usize = 1;
const ONE_PROGRAM_LINES: usize = 2;
static OBSERVER: RwLock<Option<Arc<dyn OpObserver>>> = RwLock::new(None);

/// Installs (or with `None` removes) the process-wide op observer. With none installed the
/// hook costs one atomic load per op.
pub fn set_observer(observer: Option<Arc<dyn OpObserver>>) {
    let mut slot = OBSERVER.write().unwrap_or_else(|p| p.into_inner());
    if observer.is_some() {
        ATTENTION.fetch_or(OBSERVER_BIT, Ordering::Release);
    } else {
        ATTENTION.fetch_and(!OBSERVER_BIT, Ordering::Release);
    }
    *slot = observer;
}

/// Ops inside ops name the program's line while one of these lives (and while an observer
/// is installed): the memory watches hold one, so a finding names the line the program
/// wrote (`loss = cross_entropy(..)`), not the line inside strata where `cross_entropy`
/// divides. Without either, an op records only its own caller, which costs nothing extra.
#[derive(Debug)]
pub struct ProgramLines(());

impl ProgramLines {
    /// Starts attributing ops to the program's lines, until dropped.
    pub fn record() -> ProgramLines {
        ATTENTION.fetch_add(ONE_PROGRAM_LINES, Ordering::AcqRel);
        ProgramLines(())
    }
}

impl Clone for ProgramLines {
    fn clone(&self) -> Self {
        ProgramLines::record()
    }
}

impl Drop for ProgramLines {
    fn drop(&mut self) {
        ATTENTION.fetch_sub(ONE_PROGRAM_LINES, Ordering::AcqRel);
    }
}

/// What listens to ops now (one atomic load): read once per op, then passed to
/// [`observer_if`] and [`attributing`].
#[inline]
pub(crate) fn attention() -> usize {
    ATTENTION.load(Ordering::Acquire)
}

/// Whether ops are attributed to the program's lines under `attention`.
#[inline]
pub(crate) fn attributing(attention: usize) -> bool {
    attention != 0
}

/// The installed observer under `attention`, if any.
#[inline]
pub(crate) fn observer_if(attention: usize) -> Option<Arc<dyn OpObserver>> {
    if attention & OBSERVER_BIT == 0 {
        return None;
    }
    OBSERVER.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Whether an observer is installed (one atomic load).
#[inline]
pub(crate) fn observing() -> bool {
    attention() & OBSERVER_BIT != 0
}

/// The installed observer, if any (one atomic load when there is none).
pub(crate) fn observer() -> Option<Arc<dyn OpObserver>> {
    observer_if(attention())
}
