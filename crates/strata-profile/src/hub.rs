//! The one observer strata-profile installs: it keeps each thread's stack of running ops and
//! user ranges, and hands every event to the diagnostics that are listening (a profiler, a
//! view watch, ...). Installed while at least one listener is registered, removed after.

use std::cell::RefCell;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use strata_alloc::Site;
use strata_core::observer::{set_observer, AllocEvent, OpInput, OpObserver};
use strata_core::tensor::{set_view_observer, ViewObserver};
use strata_core::{Device, Tensor};

/// One running op or user range on a thread's stack.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    /// The op's name, or the range's label.
    pub name: &'static str,
    /// Where the op was called from (`None` for a user range).
    pub location: Option<&'static Location<'static>>,
    /// The scope path when it started.
    pub scope: &'static str,
    /// When it started.
    pub start: Instant,
    /// Whether this is a user range (`record_function`) rather than an op.
    pub is_range: bool,
    /// Which installation of the observer pushed it (frames left from an earlier one, whose
    /// end was never seen, are dropped).
    generation: u64,
}

impl Frame {
    /// A frame starting now, in the current scope.
    fn new(
        name: &'static str,
        location: Option<&'static Location<'static>>,
        is_range: bool,
    ) -> Frame {
        Frame {
            name,
            location,
            scope: strata_core::scope::current(),
            start: Instant::now(),
            is_range,
            generation: GENERATION.load(Ordering::Acquire),
        }
    }
}

/// What a diagnostic receives. Every method has a do-nothing default.
pub(crate) trait Listener: Send + Sync {
    /// `frame` was pushed on thread `thread`'s stack (now `depth` deep, itself included).
    fn begin(&self, thread: u64, frame: &Frame, depth: usize, inputs: &[OpInput]) {
        let _ = (thread, frame, depth, inputs);
    }
    /// The top frame of thread `thread` ended; `depth` frames were on the stack with it.
    fn end(&self, thread: u64, frame: &Frame, depth: usize) {
        let _ = (thread, frame, depth);
    }
    /// Memory was allocated or freed on thread `thread`.
    fn memory(&self, thread: u64, event: &AllocEvent) {
        let _ = (thread, event);
    }
    /// A user-facing view op made `view`, at `site`.
    fn view_made(&self, view: &Tensor, site: Site) {
        let _ = (view, site);
    }
    /// `empty_cache` ran.
    fn cache_emptied(&self, device: Device, released: usize, reserved_after: usize) {
        let _ = (device, released, reserved_after);
    }
}

struct Hub {
    listeners: RwLock<Vec<(u64, Arc<dyn Listener>)>>,
}

static HUB: Mutex<Option<Arc<Hub>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    static THREAD: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// A small number naming the calling thread in profiles and traces (1 for the first thread
/// that asked, and so on).
pub(crate) fn thread_index() -> u64 {
    THREAD.with(|t| *t)
}

/// Keeps a listener registered; dropping it unregisters the listener (and uninstalls the
/// observer when it was the last).
pub(crate) struct Registration(u64);

impl Drop for Registration {
    fn drop(&mut self) {
        let mut hub = HUB.lock().unwrap_or_else(|p| p.into_inner());
        let empty = match hub.as_ref() {
            Some(h) => {
                let mut l = h.listeners.write().unwrap_or_else(|p| p.into_inner());
                l.retain(|(id, _)| *id != self.0);
                l.is_empty()
            }
            None => false,
        };
        if empty {
            *hub = None;
            set_observer(None);
            set_view_observer(None);
        }
    }
}

/// A listener kept registered for as long as this lives.
pub(crate) struct Listening<L> {
    /// The listener, shared with the hub.
    pub listener: Arc<L>,
    _registration: Registration,
}

impl<L: Listener + 'static> Listening<L> {
    /// Registers `listener` until the returned value drops.
    pub(crate) fn start(listener: L) -> Listening<L> {
        let listener = Arc::new(listener);
        let registration = register(listener.clone());
        Listening {
            listener,
            _registration: registration,
        }
    }
}

/// Registers `listener`, installing the observer if none of ours is installed.
pub(crate) fn register(listener: Arc<dyn Listener>) -> Registration {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut hub = HUB.lock().unwrap_or_else(|p| p.into_inner());
    match hub.as_ref() {
        Some(h) => h
            .listeners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, listener)),
        None => {
            GENERATION.fetch_add(1, Ordering::AcqRel);
            let h = Arc::new(Hub {
                listeners: RwLock::new(vec![(id, listener)]),
            });
            set_observer(Some(h.clone()));
            set_view_observer(Some(h.clone()));
            *hub = Some(h);
        }
    }
    Registration(id)
}

impl Hub {
    fn each(&self, f: impl Fn(&dyn Listener)) {
        let listeners = self.listeners.read().unwrap_or_else(|p| p.into_inner());
        for (_, l) in listeners.iter() {
            f(l.as_ref());
        }
    }
}

/// Pushes `frame` on this thread's stack and tells every listener.
fn push(frame: Frame, inputs: &[OpInput]) {
    let hub = HUB.lock().unwrap_or_else(|p| p.into_inner()).clone();
    push_to(hub.as_deref(), frame, inputs);
}

fn push_to(hub: Option<&Hub>, frame: Frame, inputs: &[OpInput]) {
    let thread = thread_index();
    let depth = STACK.with(|s| {
        let mut s = s.borrow_mut();
        let current = frame.generation;
        s.retain(|f| f.generation == current);
        s.len() + 1
    });
    if let Some(h) = hub {
        h.each(|l| l.begin(thread, &frame, depth, inputs));
    }
    STACK.with(|s| s.borrow_mut().push(frame));
}

/// Pops this thread's top frame, if its name is `name`, and tells every listener.
fn pop_from(hub: Option<&Hub>, name: &str) {
    let popped = STACK.with(|s| {
        let mut s = s.borrow_mut();
        let depth = s.len();
        match s.last() {
            Some(f) if f.name == name => s.pop().map(|f| (f, depth)),
            _ => None,
        }
    });
    if let (Some(h), Some((frame, depth))) = (hub, popped) {
        let thread = thread_index();
        h.each(|l| l.end(thread, &frame, depth));
    }
}

/// The outermost op or range running on this thread (the user's call), if any.
pub(crate) fn outermost_location() -> Option<&'static Location<'static>> {
    STACK.with(|s| s.borrow().iter().find_map(|f| f.location))
}

impl OpObserver for Hub {
    fn memory(&self, event: &AllocEvent) {
        let thread = thread_index();
        self.each(|l| l.memory(thread, event));
    }

    fn op_begin(&self, op: &'static str, location: &'static Location<'static>, inputs: &[OpInput]) {
        push_to(Some(self), Frame::new(op, Some(location), false), inputs);
    }

    fn op_end(&self, op: &'static str) {
        pop_from(Some(self), op);
    }

    fn cache_emptied(&self, device: Device, released: usize, reserved_after: usize) {
        self.each(|l| l.cache_emptied(device, released, reserved_after));
    }
}

impl ViewObserver for Hub {
    fn view_made(&self, view: &Tensor) {
        let Some(location) = outermost_location() else {
            return;
        };
        let site = Site::new(location, view.view_info().map_or("view", |v| v.op))
            .in_scope(strata_core::scope::current());
        self.each(|l| l.view_made(view, site));
    }
}

/// A user range, as PyTorch's `record_function`: it shows in the profiler's table and trace
/// as a row of its own that contains the ops run inside it. Ends when dropped.
///
/// ```
/// use strata_profile::{profile, record_function, ProfileOptions};
/// use strata_core::{DType, Tensor};
/// let (batch, prof) = profile(ProfileOptions::default(), || {
///     let _data = record_function("data");
///     Tensor::ones(&[64], DType::F32)
/// });
/// batch?;
/// assert!(prof.key_averages().rows().iter().any(|r| r.name == "data"));
/// # Ok::<(), strata_core::Error>(())
/// ```
#[must_use = "the range ends when this guard drops"]
pub struct RecordFunction {
    name: &'static str,
    // A range begins and ends on one thread.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Opens a user range named `label` on this thread until the returned guard drops.
pub fn record_function(label: &str) -> RecordFunction {
    let name = intern(label);
    push(Frame::new(name, None, true), &[]);
    RecordFunction {
        name,
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for RecordFunction {
    fn drop(&mut self) {
        let hub = HUB.lock().unwrap_or_else(|p| p.into_inner()).clone();
        pop_from(hub.as_deref(), self.name);
    }
}

/// The one `'static` copy of `label` (labels are few and reused, so each is leaked once).
pub(crate) fn intern(label: &str) -> &'static str {
    static LABELS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut labels = LABELS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(l) = labels.iter().find(|l| **l == label) {
        return l;
    }
    let l: &'static str = Box::leak(label.to_owned().into_boxed_str());
    labels.push(l);
    l
}

/// The outermost op running on this thread and its source line (the user's call).
pub(crate) fn outermost_frame() -> Option<(&'static str, &'static Location<'static>)> {
    STACK.with(|s| {
        s.borrow()
            .iter()
            .find_map(|f| f.location.map(|l| (f.name, l)))
    })
}
