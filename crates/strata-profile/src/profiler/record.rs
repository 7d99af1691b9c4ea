//! The profiler's listener: per thread, the open ops with the memory they and their children
//! allocated and freed, turned into one [`OpEvent`] when each ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use strata_core::observer::{AllocEvent, MemoryAction, OpInput};
use strata_core::Device;

use crate::hub::{Frame, Listener};

/// One op or user range the profiler saw, with its time and the memory its thread allocated
/// and freed while it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct OpEvent {
    /// The op's name (`"matmul"`), or the user range's label.
    pub name: &'static str,
    /// The thread it ran on (a small number; see the trace's thread names).
    pub thread: u64,
    /// Start, in microseconds since profiling started.
    pub start_us: f64,
    /// Wall time from start to end, children included, in microseconds.
    pub duration_us: f64,
    /// Wall time minus that of the ops it called directly.
    pub self_us: f64,
    /// Ops and ranges open on its thread when it started, itself included (1 at the top).
    pub depth: usize,
    /// True for a user range ([`crate::record_function`]).
    pub is_range: bool,
    /// The shapes and dtypes of its tensor operands (empty unless shapes are recorded).
    pub inputs: Vec<OpInput>,
    /// The scope path it ran in (`features.3`; empty outside every scope).
    pub scope: &'static str,
    /// The source line that called it (`file:line`; empty for a range).
    pub location: String,
    /// Bytes allocated on its thread while it ran, by it and the ops it called.
    pub allocated: usize,
    /// Bytes freed on its thread while it ran, by it and the ops it called.
    pub freed: usize,
    /// Bytes it allocated itself (not through an op it called).
    pub self_allocated: usize,
    /// Bytes it freed itself.
    pub self_freed: usize,
    /// The most bytes its thread held above what it held when the op started.
    pub peak: usize,
}

/// A sample of memory in use, for the trace's counter tracks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemorySample {
    /// When, in microseconds since profiling started.
    pub time_us: f64,
    /// The device whose memory it counts.
    pub device: Device,
    /// Bytes allocated by every thread since profiling started, minus bytes freed: the
    /// change in the device's allocated memory over the profile.
    pub allocated: i64,
}

/// Memory a thread allocated or freed outside every op (a tensor dropped by user code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutsideOps {
    /// Bytes allocated outside ops.
    pub allocated: usize,
    /// Bytes freed outside ops (tensors dropped by the program).
    pub freed: usize,
    /// Events counted.
    pub events: usize,
}

struct Open {
    depth: usize,
    allocated: usize,
    freed: usize,
    self_allocated: usize,
    self_freed: usize,
    net_start: i64,
    peak: i64,
    children_us: f64,
    inputs: Vec<OpInput>,
}

#[derive(Default)]
struct ThreadState {
    open: Vec<Open>,
    net: i64,
}

#[derive(Default)]
pub(crate) struct Recorded {
    pub events: Vec<OpEvent>,
    pub samples: Vec<MemorySample>,
    pub outside: OutsideOps,
    threads: HashMap<u64, ThreadState>,
    running: HashMap<Device, i64>,
}

/// The listener: records while `recording` is on.
pub(crate) struct Recorder {
    origin: Instant,
    record_shapes: bool,
    profile_memory: bool,
    pub recording: AtomicBool,
    pub state: Mutex<Recorded>,
}

impl Recorder {
    pub(crate) fn new(record_shapes: bool, profile_memory: bool, recording: bool) -> Recorder {
        Recorder {
            origin: Instant::now(),
            record_shapes,
            profile_memory,
            recording: AtomicBool::new(recording),
            state: Mutex::new(Recorded::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn micros(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.origin).as_nanos() as f64 / 1000.0
    }

    /// Forgets what was recorded (the warm-up steps of a schedule), keeping open ops open.
    pub(crate) fn discard(&self) {
        let mut st = self.lock();
        st.events.clear();
        st.samples.clear();
        st.outside = OutsideOps::default();
    }

    /// Takes what was recorded.
    pub(crate) fn take(&self) -> (Vec<OpEvent>, Vec<MemorySample>, OutsideOps) {
        let mut st = self.lock();
        (
            std::mem::take(&mut st.events),
            std::mem::take(&mut st.samples),
            std::mem::take(&mut st.outside),
        )
    }

    fn on(&self) -> bool {
        self.recording.load(Ordering::Acquire)
    }
}

impl Listener for Recorder {
    fn begin(&self, thread: u64, _frame: &Frame, depth: usize, inputs: &[OpInput]) {
        // Ops are tracked while not recording too, so that each end finds its begin.
        let inputs = if self.record_shapes && self.on() {
            inputs.to_vec()
        } else {
            Vec::new()
        };
        let mut st = self.lock();
        let ts = st.threads.entry(thread).or_default();
        let net_start = ts.net;
        ts.open.push(Open {
            depth,
            allocated: 0,
            freed: 0,
            self_allocated: 0,
            self_freed: 0,
            net_start,
            peak: 0,
            children_us: 0.0,
            inputs,
        });
    }

    fn end(&self, thread: u64, frame: &Frame, depth: usize) {
        let end = Instant::now();
        let mut st = self.lock();
        let Some(ts) = st.threads.get_mut(&thread) else {
            return;
        };
        // An op that began before this profiler listened has no entry: nothing to close.
        if ts.open.last().map(|o| o.depth) != Some(depth) {
            return;
        }
        let Some(open) = ts.open.pop() else {
            return;
        };
        let start_us = self.micros(frame.start);
        let duration_us = (self.micros(end) - start_us).max(0.0);
        if let Some(parent) = ts.open.last_mut() {
            parent.children_us += duration_us;
        }
        if !self.on() {
            return;
        }
        let event = OpEvent {
            name: frame.name,
            thread,
            start_us,
            duration_us,
            self_us: (duration_us - open.children_us).max(0.0),
            depth,
            is_range: frame.is_range,
            inputs: open.inputs,
            scope: frame.scope,
            location: frame
                .location
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default(),
            allocated: open.allocated,
            freed: open.freed,
            self_allocated: open.self_allocated,
            self_freed: open.self_freed,
            peak: open.peak.max(0) as usize,
        };
        st.events.push(event);
    }

    fn memory(&self, thread: u64, event: &AllocEvent) {
        if !self.on() || !self.profile_memory {
            return;
        }
        let now = self.micros(Instant::now());
        let mut st = self.lock();
        let bytes = event.bytes;
        let signed = match event.action {
            MemoryAction::Alloc => bytes as i64,
            MemoryAction::Free => -(bytes as i64),
        };
        let running = st.running.entry(event.device).or_insert(0);
        *running += signed;
        let allocated = *running;
        st.samples.push(MemorySample {
            time_us: now,
            device: event.device,
            allocated,
        });
        let ts = st.threads.entry(thread).or_default();
        ts.net += signed;
        let net = ts.net;
        let top = ts.open.len();
        for (i, open) in ts.open.iter_mut().enumerate() {
            let own = i + 1 == top;
            match event.action {
                MemoryAction::Alloc => {
                    open.allocated += bytes;
                    if own {
                        open.self_allocated += bytes;
                    }
                }
                MemoryAction::Free => {
                    open.freed += bytes;
                    if own {
                        open.self_freed += bytes;
                    }
                }
            }
            open.peak = open.peak.max(net - open.net_start);
        }
        if top == 0 {
            match event.action {
                MemoryAction::Alloc => st.outside.allocated += bytes,
                MemoryAction::Free => st.outside.freed += bytes,
            }
            st.outside.events += 1;
        }
    }
}
