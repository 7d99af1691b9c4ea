//! `VirtualBacking`: address ranges without memory, for simulation and planning.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use super::simulated::SimulatedStreams;
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
    name: &'static str,
    state: Mutex<VirtualState>,
    streams: SimulatedStreams,
}

#[derive(Debug)]
struct VirtualState {
    next_addr: usize,
    mapped: usize,
    /// A recorded run's segment addresses, when replaying one.
    recorded: Option<RecordedAddresses>,
}

/// The segment addresses a recorded run got, handed out again, per size, in the order it got
/// them, so that an allocator ordering blocks by address makes the run's choices.
#[derive(Debug)]
struct RecordedAddresses {
    /// Per size, the addresses not handed out yet.
    pending: HashMap<usize, VecDeque<usize>>,
    /// Segments living at recorded addresses: base to size.
    live: BTreeMap<usize, usize>,
}

impl RecordedAddresses {
    /// The next recorded address for a segment of `size` bytes that overlaps no live one.
    fn take(&mut self, size: usize) -> Option<usize> {
        let queue = self.pending.get_mut(&size)?;
        while let Some(addr) = queue.pop_front() {
            let end = addr.checked_add(size)?;
            let before = self.live.range(..end).next_back();
            if before.is_none_or(|(&b, &sz)| b + sz <= addr) {
                self.live.insert(addr, size);
                return Some(addr);
            }
        }
        None
    }
}

impl VirtualBacking {
    /// A backing of `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        VirtualBacking {
            capacity,
            name: "virtual",
            state: Mutex::new(VirtualState {
                next_addr: BASE,
                mapped: 0,
                recorded: None,
            }),
            streams: SimulatedStreams::default(),
        }
    }

    /// The same backing, named `name` in messages (an out-of-memory report says "out of
    /// memory on meta" for the meta device's allocators instead of "virtual").
    pub fn named(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// A backing of `capacity` bytes that hands out the segment addresses a recorded run got:
    /// `segments` holds each segment's `(address, size)` in the order the run allocated them.
    /// A segment of a size the run allocated gets the run's next address for that size,
    /// unless a live segment overlaps it; any other range gets a fresh address above them all.
    /// Its allocators order free blocks by address, as PyTorch does, so a replay of the run
    /// makes the run's choices ([`Backing::orders_by_address`]).
    pub fn with_recorded_addresses(capacity: usize, segments: &[(usize, usize)]) -> Self {
        let b = Self::new(capacity);
        let mut pending: HashMap<usize, VecDeque<usize>> = HashMap::new();
        let mut top = BASE;
        for &(addr, size) in segments {
            if addr != 0 && addr.is_multiple_of(512) {
                pending.entry(size).or_default().push_back(addr);
                top = top.max(addr.saturating_add(size));
            }
        }
        {
            let mut st = b.lock();
            st.next_addr = top
                .saturating_add(RANGE_ALIGN)
                .next_multiple_of(RANGE_ALIGN);
            st.recorded = Some(RecordedAddresses {
                pending,
                live: BTreeMap::new(),
            });
        }
        b
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
        self.streams.hold(stream);
    }

    /// Lets all work on `stream` complete, including events recorded while it was held.
    pub fn release_stream(&self, stream: StreamId) {
        self.streams.release(stream);
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
        self.name
    }

    fn addresses_are_memory(&self) -> bool {
        false
    }

    fn orders_by_address(&self) -> bool {
        self.lock().recorded.is_some()
    }

    fn allocate_segment(&self, size: usize) -> Result<usize, BackingError> {
        if size == 0 {
            return Err(BackingError::Fatal("a segment cannot be empty".into()));
        }
        let mut s = self.lock();
        self.charge(&mut s, size)?;
        if let Some(addr) = s.recorded.as_mut().and_then(|r| r.take(size)) {
            return Ok(addr);
        }
        match Self::take_range(&mut s, size) {
            Ok(a) => Ok(a),
            Err(e) => {
                s.mapped -= size;
                Err(e)
            }
        }
    }

    unsafe fn free_segment(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        let mut s = self.lock();
        if let Some(r) = s.recorded.as_mut() {
            r.live.remove(&addr);
        }
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
    fn recorded_addresses_come_back_in_order_per_size_unless_taken() {
        let mib = 1usize << 20;
        let (hi, lo, other) = (0x7f00_0000_0000, 0x7e00_0000_0000, 0x7d00_0000_0000);
        let b = VirtualBacking::with_recorded_addresses(
            1 << 40,
            &[(hi, 2 * mib), (lo, 2 * mib), (other, 20 * mib)],
        );
        assert!(b.orders_by_address());
        assert!(!VirtualBacking::new(1).orders_by_address());
        assert_eq!(b.allocate_segment(2 * mib).unwrap(), hi);
        assert_eq!(b.allocate_segment(20 * mib).unwrap(), other);
        assert_eq!(b.allocate_segment(2 * mib).unwrap(), lo);
        // The recording is used up: a fresh range above every recorded one.
        let fresh = b.allocate_segment(2 * mib).unwrap();
        assert!(fresh > hi + 2 * mib && fresh.is_multiple_of(RANGE_ALIGN));
        assert_eq!(b.mapped_bytes(), 26 * mib);
        // SAFETY: the range comes from the `allocate_segment` call above; virtual ranges are
        // never dereferenced.
        unsafe { b.free_segment(hi, 2 * mib).unwrap() };
        assert_eq!(b.mapped_bytes(), 24 * mib);

        // A recorded address that a live segment overlaps is skipped.
        let b = VirtualBacking::with_recorded_addresses(
            1 << 40,
            &[(hi, 20 * mib), (hi + 2 * mib, 2 * mib), (lo, 2 * mib)],
        );
        assert_eq!(b.allocate_segment(20 * mib).unwrap(), hi);
        assert_eq!(b.allocate_segment(2 * mib).unwrap(), lo);
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
