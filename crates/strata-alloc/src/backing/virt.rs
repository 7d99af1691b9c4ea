//! `VirtualBacking`: address ranges without memory, for simulation and planning.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use super::{Backing, BackingError, EventId, StreamId};

/// Every range starts on a 2 MiB boundary and is followed by a 2 MiB gap, so ranges never touch.
const RANGE_ALIGN: usize = 2 << 20;
/// The first address handed out (a fake device address, far from anything mapped).
const BASE: usize = 1 << 40;

/// A backing that hands out address ranges only: it never maps or touches memory.
///
/// Blocks from an allocator over this backing have addresses that must never be dereferenced;
/// it exists to run the real allocation algorithm cheaply (tests, simulation, predicting the
/// peak memory of a program on a `meta` device). A capacity bounds the bytes "mapped" at once so
/// out-of-memory can be simulated. Addresses are never reused.
///
/// Streams are simulated: an event recorded on a stream completes at once unless the stream is
/// held with [`hold_stream`](Self::hold_stream); then it completes when the stream is released
/// or when someone synchronises on the event.
#[derive(Debug)]
pub struct VirtualBacking {
    capacity: usize,
    state: Mutex<VirtualState>,
}

#[derive(Debug)]
struct VirtualState {
    next_addr: usize,
    mapped: usize,
    next_event: u64,
    held: BTreeSet<StreamId>,
    /// Events not yet released: their stream and whether they have completed.
    events: HashMap<u64, (StreamId, bool)>,
}

impl VirtualBacking {
    /// A backing of `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        VirtualBacking {
            capacity,
            state: Mutex::new(VirtualState {
                next_addr: BASE,
                mapped: 0,
                next_event: 0,
                held: BTreeSet::new(),
                events: HashMap::new(),
            }),
        }
    }

    /// The most bytes mapped at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes currently "mapped" (segments plus mapped expandable pages).
    pub fn mapped_bytes(&self) -> usize {
        self.lock().mapped
    }

    /// Simulates a busy stream: events recorded on it stay incomplete until
    /// [`release_stream`](Self::release_stream).
    pub fn hold_stream(&self, stream: StreamId) {
        self.lock().held.insert(stream);
    }

    /// Lets all work on `stream` complete, including events recorded while it was held.
    pub fn release_stream(&self, stream: StreamId) {
        let mut s = self.lock();
        s.held.remove(&stream);
        for (st, done) in s.events.values_mut() {
            if *st == stream {
                *done = true;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VirtualState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take_range(s: &mut VirtualState, size: usize) -> Result<usize, BackingError> {
        let span = size
            .checked_next_multiple_of(RANGE_ALIGN)
            .and_then(|r| r.checked_add(RANGE_ALIGN))
            .ok_or(BackingError::OutOfMemory { requested: size })?;
        let addr = s.next_addr;
        s.next_addr = addr
            .checked_add(span)
            .ok_or(BackingError::OutOfMemory { requested: size })?;
        Ok(addr)
    }

    fn charge(&self, s: &mut VirtualState, size: usize) -> Result<(), BackingError> {
        match s.mapped.checked_add(size) {
            Some(t) if t <= self.capacity => {
                s.mapped = t;
                Ok(())
            }
            _ => Err(BackingError::OutOfMemory { requested: size }),
        }
    }
}

impl Backing for VirtualBacking {
    fn device_name(&self) -> &str {
        "virtual"
    }

    fn addresses_are_memory(&self) -> bool {
        false
    }

    fn allocate_segment(&self, size: usize) -> Result<usize, BackingError> {
        if size == 0 {
            return Err(BackingError::Fatal("a segment cannot be empty".into()));
        }
        let mut s = self.lock();
        self.charge(&mut s, size)?;
        match Self::take_range(&mut s, size) {
            Ok(a) => Ok(a),
            Err(e) => {
                s.mapped -= size;
                Err(e)
            }
        }
    }

    unsafe fn free_segment(&self, _addr: usize, size: usize) -> Result<(), BackingError> {
        let mut s = self.lock();
        s.mapped = s.mapped.checked_sub(size).ok_or_else(|| {
            BackingError::Fatal(format!("freeing {size} bytes that were never mapped"))
        })?;
        Ok(())
    }

    fn reserve(&self, size: usize) -> Result<usize, BackingError> {
        Self::take_range(&mut self.lock(), size)
    }

    fn map(&self, _addr: usize, size: usize) -> Result<(), BackingError> {
        let mut s = self.lock();
        self.charge(&mut s, size)
    }

    unsafe fn unmap(&self, _addr: usize, size: usize) -> Result<(), BackingError> {
        let mut s = self.lock();
        s.mapped = s.mapped.checked_sub(size).ok_or_else(|| {
            BackingError::Fatal(format!("unmapping {size} bytes that were never mapped"))
        })?;
        Ok(())
    }

    unsafe fn release_reservation(&self, _addr: usize, _size: usize) -> Result<(), BackingError> {
        Ok(())
    }

    fn record_event(&self, stream: StreamId) -> Result<EventId, BackingError> {
        let mut s = self.lock();
        let id = s.next_event;
        s.next_event += 1;
        let done = !s.held.contains(&stream);
        s.events.insert(id, (stream, done));
        Ok(EventId(id))
    }

    fn query_event(&self, event: EventId) -> Result<bool, BackingError> {
        let s = self.lock();
        match s.events.get(&event.0) {
            Some(&(_, done)) => Ok(done),
            None => Err(BackingError::Fatal(format!("unknown event {}", event.0))),
        }
    }

    fn synchronize_event(&self, event: EventId) -> Result<(), BackingError> {
        // Waiting for an event is simulated as the work before it finishing now.
        match self.lock().events.get_mut(&event.0) {
            Some(e) => {
                e.1 = true;
                Ok(())
            }
            None => Err(BackingError::Fatal(format!("unknown event {}", event.0))),
        }
    }

    fn release_event(&self, event: EventId) {
        self.lock().events.remove(&event.0);
    }

    fn synchronize_stream(&self, stream: StreamId) -> Result<(), BackingError> {
        for (st, done) in self.lock().events.values_mut() {
            if *st == stream {
                *done = true;
            }
        }
        Ok(())
    }

    fn mem_info(&self) -> (usize, usize) {
        (self.capacity - self.lock().mapped, self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_aligned_disjoint_and_bounded() {
        let b = VirtualBacking::new(10 << 20);
        let a = b.allocate_segment(3 << 20).unwrap();
        let c = b.allocate_segment(512).unwrap();
        assert_eq!(a % RANGE_ALIGN, 0);
        assert!(c >= a + (3 << 20));
        assert_eq!(b.mapped_bytes(), (3 << 20) + 512);
        assert!(matches!(
            b.allocate_segment(8 << 20),
            Err(BackingError::OutOfMemory { .. })
        ));
        // SAFETY: `a` and its size come from the `allocate_segment` call above; virtual ranges
        // are never dereferenced.
        unsafe { b.free_segment(a, 3 << 20).unwrap() };
        assert_eq!(b.mem_info(), ((10 << 20) - 512, 10 << 20));
        let r = b.reserve(1 << 30).unwrap();
        b.map(r, 2 << 20).unwrap();
        assert!(b.map(r + (2 << 20), 8 << 20).is_err());
        // SAFETY: the range is exactly the one mapped above; virtual ranges are never
        // dereferenced.
        unsafe { b.unmap(r, 2 << 20).unwrap() };
        assert_eq!(b.mapped_bytes(), 512);
    }

    #[test]
    fn held_streams_delay_events() {
        let b = VirtualBacking::new(0);
        let s = StreamId(1);
        b.hold_stream(s);
        let e = b.record_event(s).unwrap();
        let f = b.record_event(StreamId(2)).unwrap();
        assert!(!b.query_event(e).unwrap());
        assert!(b.query_event(f).unwrap());
        b.release_stream(s);
        assert!(b.query_event(e).unwrap());
        b.hold_stream(s);
        let g = b.record_event(s).unwrap();
        b.synchronize_event(g).unwrap();
        assert!(b.query_event(g).unwrap());
        b.release_event(e);
        assert!(b.query_event(e).is_err());
    }
}
