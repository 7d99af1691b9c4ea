//! Streams and events simulated in memory: the virtual backing's, and those of a replay over
//! any backing (a replay queues no work, so its events are bookkeeping only).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use super::{Backing, BackingError, EventId, StreamId};

/// Simulated streams: an event recorded on a stream completes at once unless the stream is
/// held; then it completes when the stream is released or when someone waits on it.
#[derive(Debug, Default)]
pub(crate) struct SimulatedStreams {
    state: Mutex<SimState>,
}

#[derive(Debug, Default)]
struct SimState {
    next_event: u64,
    held: BTreeSet<StreamId>,
    /// Events not yet released: their stream and whether they have completed.
    events: HashMap<u64, (StreamId, bool)>,
}

impl SimulatedStreams {
    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps events recorded on `stream` incomplete until [`release`](Self::release).
    pub fn hold(&self, stream: StreamId) {
        self.lock().held.insert(stream);
    }

    /// Completes every event on `stream`, including those recorded while it was held.
    pub fn release(&self, stream: StreamId) {
        let mut s = self.lock();
        s.held.remove(&stream);
        for (st, done) in s.events.values_mut() {
            if *st == stream {
                *done = true;
            }
        }
    }

    pub fn record_event(&self, stream: StreamId) -> EventId {
        let mut s = self.lock();
        let id = s.next_event;
        s.next_event += 1;
        let done = !s.held.contains(&stream);
        s.events.insert(id, (stream, done));
        EventId(id)
    }

    pub fn query_event(&self, event: EventId) -> Result<bool, BackingError> {
        match self.lock().events.get(&event.0) {
            Some(&(_, done)) => Ok(done),
            None => Err(unknown(event)),
        }
    }

    /// Waiting for an event is simulated as the work before it finishing now.
    pub fn synchronize_event(&self, event: EventId) -> Result<(), BackingError> {
        match self.lock().events.get_mut(&event.0) {
            Some(e) => {
                e.1 = true;
                Ok(())
            }
            None => Err(unknown(event)),
        }
    }

    pub fn release_event(&self, event: EventId) {
        self.lock().events.remove(&event.0);
    }

    pub fn synchronize_stream(&self, stream: StreamId) {
        for (st, done) in self.lock().events.values_mut() {
            if *st == stream {
                *done = true;
            }
        }
    }
}

fn unknown(event: EventId) -> BackingError {
    BackingError::Fatal(format!("unknown event {}", event.0))
}

/// A backing's memory with [`SimulatedStreams`]: what a replay runs on, over the virtual
/// backing or over real device memory.
#[derive(Debug)]
pub(crate) struct WithSimulatedStreams<B> {
    pub inner: B,
    pub streams: SimulatedStreams,
}

impl<B: Backing> WithSimulatedStreams<B> {
    pub fn new(inner: B) -> Self {
        WithSimulatedStreams {
            inner,
            streams: SimulatedStreams::default(),
        }
    }
}

impl<B: Backing> Backing for WithSimulatedStreams<B> {
    fn device_name(&self) -> &str {
        self.inner.device_name()
    }
    fn addresses_are_memory(&self) -> bool {
        self.inner.addresses_are_memory()
    }
    fn orders_by_address(&self) -> bool {
        self.inner.orders_by_address()
    }
    fn allocate_segment(&self, size: usize) -> Result<usize, BackingError> {
        self.inner.allocate_segment(size)
    }
    unsafe fn free_segment(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: forwarded; the caller upholds the same contract.
        unsafe { self.inner.free_segment(addr, size) }
    }
    fn reserve(&self, size: usize) -> Result<usize, BackingError> {
        self.inner.reserve(size)
    }
    fn map(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        self.inner.map(addr, size)
    }
    unsafe fn unmap(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: forwarded; the caller upholds the same contract.
        unsafe { self.inner.unmap(addr, size) }
    }
    unsafe fn release_reservation(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: forwarded; the caller upholds the same contract.
        unsafe { self.inner.release_reservation(addr, size) }
    }
    fn record_event(&self, stream: StreamId) -> Result<EventId, BackingError> {
        Ok(self.streams.record_event(stream))
    }
    fn query_event(&self, event: EventId) -> Result<bool, BackingError> {
        self.streams.query_event(event)
    }
    fn synchronize_event(&self, event: EventId) -> Result<(), BackingError> {
        self.streams.synchronize_event(event)
    }
    fn release_event(&self, event: EventId) {
        self.streams.release_event(event)
    }
    fn synchronize_stream(&self, stream: StreamId) -> Result<(), BackingError> {
        self.streams.synchronize_stream(stream);
        Ok(())
    }
    fn mem_info(&self) -> (usize, usize) {
        self.inner.mem_info()
    }
}
