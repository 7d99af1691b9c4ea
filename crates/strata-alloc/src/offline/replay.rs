//! What-if replay: a recorded allocation history (a snapshot's `device_traces`, strata's or
//! PyTorch's) run again through a fresh caching allocator over the virtual backing, under
//! other settings and optionally another capacity, to see what they would have done to the
//! peaks, to fragmentation and to out-of-memory errors, without rerunning the job.

use std::collections::{HashMap, HashSet};

use crate::backing::simulated::WithSimulatedStreams;
use crate::backing::{Backing, StreamId, VirtualBacking};
use crate::caching::MemoryStats;
use crate::caching::TraceAction;
use crate::caching::{AllocatorConfig, ROUNDUP_INTERVALS};
use crate::caching::{AllocatorSettings, Frame, Snapshot, TraceEntrySnapshot};
use crate::caching::{CachingAllocator, CachingError};

use super::walk::{FreeAt, TraceWalk};
use crate::{Block, DeviceAllocator, Site};

/// The capacity of the replay's device when none is given: larger than any real one.
const UNBOUNDED: usize = 1 << 50;

/// A request the replay could not serve.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReplayOom {
    /// Index of the `alloc` entry in the trace.
    pub entry: usize,
    /// Bytes asked for.
    pub bytes: u64,
    /// Bytes allocated and reserved when it failed.
    pub allocated: u64,
    /// See `allocated`.
    pub reserved: u64,
    /// Why: the new segment it needed (no cached block fitted), whose bytes the device did
    /// not have (0 when the request itself was refused).
    pub segment: u64,
    /// The device's free bytes then (under its capacity or limit).
    pub device_free: u64,
    /// Where the request came from (`file:line (op)`), when the trace says.
    pub site: String,
}

/// The figures of one replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayFigures {
    /// The settings it ran under (`STRATA_ALLOC_CONF` syntax; empty: defaults).
    pub settings: String,
    /// The device capacity it ran with (`None`: unbounded).
    pub capacity: Option<u64>,
    /// Peak bytes of blocks handed out.
    pub peak_allocated: u64,
    /// The trace entry after which allocated bytes first reached that peak (`None`: the
    /// blocks allocated before the trace began already did).
    pub peak_entry: Option<usize>,
    /// Peak bytes reserved from the device.
    pub peak_reserved: u64,
    /// Peak of the bytes asked for.
    pub peak_requested: u64,
    /// Peak count of segments (`segment.all.peak`; PyTorch counts expandable segments as none).
    pub peak_segments: u64,
    /// Times the allocator released every cached segment to retry a request
    /// (`num_alloc_retries`).
    pub alloc_retries: u64,
    /// Reserved bytes at the moment allocated bytes peaked.
    pub reserved_at_peak: u64,
    /// Reserved over allocated at that moment (1.0: no waste).
    pub reserved_per_allocated: f64,
    /// The largest free (cached) block at that moment.
    pub largest_free_block: u64,
    /// Requests that would have run out of memory.
    pub ooms: Vec<ReplayOom>,
}

/// How much of the run the trace covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// Every block freed in the trace was allocated in it: the replay is the whole run.
    Complete,
    /// The trace starts after the run did (a full ring buffer, or recording switched on
    /// late): `missing` blocks were allocated before it; they are allocated first, in
    /// address order, so the figures are a reconstruction, not the run.
    Truncated {
        /// Blocks allocated before the first entry.
        missing: usize,
        /// Their bytes.
        missing_bytes: u64,
    },
}

/// A replay beside the recorded run.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// Trace entries replayed.
    pub entries: usize,
    /// How much of the run the trace covers.
    pub coverage: Coverage,
    /// Peak requested and reserved bytes as the trace itself records them (reserved from
    /// its segment events), and the out-of-memory errors it recorded.
    pub traced_peak_requested: u64,
    /// See `traced_peak_requested`.
    pub traced_peak_reserved: u64,
    /// See `traced_peak_requested`.
    pub traced_ooms: usize,
    /// The replay under the recorded run's own settings and capacity: its allocated bytes
    /// and fragmentation, which the trace does not record.
    pub recorded: ReplayFigures,
    /// The replay under the settings asked for.
    pub what_if: ReplayFigures,
}

/// Why a replay cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The snapshot has no trace to replay.
    #[error(
        "the snapshot has no allocation history (device_traces is empty): record it with \
         record_memory_history before the run. What it can still answer, from its segments: \
         {reserved} bytes reserved, {allocated} allocated, largest free block {largest_free}"
    )]
    NoTrace {
        /// Reserved bytes in the snapshot's segments.
        reserved: u64,
        /// Allocated bytes in them.
        allocated: u64,
        /// The largest inactive block.
        largest_free: u64,
    },
    /// The settings do not parse.
    #[error("allocator settings `{settings}`: {message}")]
    Settings {
        /// The text.
        settings: String,
        /// What is wrong with it.
        message: String,
    },
}

/// The settings a snapshot records, as a configuration: its raw text when strata can read
/// it, else rebuilt from the recorded fields (PyTorch's text may hold keys strata does not
/// take, such as CUDA's backend names).
pub fn recorded_config(s: &AllocatorSettings) -> AllocatorConfig {
    if let Ok(c) = AllocatorConfig::parse(&s.conf) {
        return c;
    }
    let mut c = AllocatorConfig {
        raw: s.conf.clone(),
        max_split_size: (s.max_split_size > 0 && s.max_split_size < (1i64 << 62))
            .then_some(s.max_split_size as usize),
        garbage_collection_threshold: s.garbage_collection_threshold,
        expandable_segments: s.expandable_segments,
        ..AllocatorConfig::default()
    };
    for (mib, d) in &s.roundup_power2_divisions {
        if let Ok(m) = mib.parse::<u64>() {
            let i = (m.max(1).ilog2() as usize).min(ROUNDUP_INTERVALS - 1);
            c.roundup_power2_divisions[i] = *d as usize;
        }
    }
    c
}

/// The site a trace entry names (its innermost frame, with the scope frame if any).
fn site_of(e: &TraceEntrySnapshot) -> String {
    let (site, scope) = Frame::site_and_scope(&e.frames);
    let site = site.unwrap_or_else(|| "<unknown>".to_owned());
    match scope {
        Some(scope) => format!("{site} in {scope}"),
        None => site,
    }
}

/// Blocks the trace frees, or the snapshot holds, without the trace allocating them:
/// `(address, bytes)`, in address order.
fn missing_blocks(trace: &[TraceEntrySnapshot], snapshot: &Snapshot) -> Vec<(u64, u64)> {
    let mut seen = HashSet::new();
    let mut missing: HashMap<u64, u64> = HashMap::new();
    for e in trace {
        let Some(addr) = e.addr else { continue };
        match e.action {
            TraceAction::Alloc => {
                seen.insert(addr);
            }
            TraceAction::FreeRequested | TraceAction::FreeCompleted if !seen.contains(&addr) => {
                missing.entry(addr).or_insert(e.size);
            }
            _ => {}
        }
    }
    for seg in &snapshot.segments {
        for b in &seg.blocks {
            if b.state != crate::caching::BlockState::Inactive && !seen.contains(&b.address) {
                missing.entry(b.address).or_insert(b.requested_size.max(1));
            }
        }
    }
    let mut out: Vec<(u64, u64)> = missing.into_iter().collect();
    out.sort_unstable();
    out
}

/// Streams of the replay's own making, one per free the trace completes late, start here: far
/// above any stream a trace names.
const DEFERRED_STREAMS: u64 = 1 << 62;

/// One run of a trace through a fresh allocator, over a backing's memory with simulated
/// streams (a replay queues no work).
struct Run<'t, B: Backing> {
    trace: &'t [TraceEntrySnapshot],
    a: CachingAllocator<WithSimulatedStreams<B>>,
    /// Whether the device is bounded (a limit or a capacity), so that the run's own releases
    /// before an allocation are the allocator's retries rather than `empty_cache` calls.
    bounded: bool,
    /// The trace's stream handles, as the replay's streams (the default stream, 0, stays 0).
    streams: HashMap<u64, StreamId>,
    /// Blocks the trace holds, by the address it gave them.
    live: HashMap<u64, Block>,
    /// Blocks freed while another stream still used them: the stream the replay holds until
    /// the trace completes the free.
    deferred: HashMap<u64, StreamId>,
    next_deferred: u64,
    ooms: Vec<ReplayOom>,
    peak_allocated: u64,
    peak_entry: Option<usize>,
    reserved_at_peak: u64,
    largest_free: u64,
    /// Entries the run leaves out (the allocations of holders taken away, and their frees).
    skip: HashSet<usize>,
}

/// The virtual device a replay runs on: `capacity` bytes (`None`: unbounded); for a run that
/// broke ties by address (PyTorch's), at the run's own segment addresses, so the replay
/// breaks them the same way.
fn virtual_device(
    trace: &[TraceEntrySnapshot],
    capacity: Option<u64>,
    ties_by_address: bool,
) -> VirtualBacking {
    let capacity = capacity.map_or(UNBOUNDED, |c| c as usize);
    if !ties_by_address {
        return VirtualBacking::new(capacity);
    }
    let segments: Vec<(usize, usize)> = trace
        .iter()
        .filter(|e| e.action == TraceAction::SegmentAlloc)
        .filter_map(|e| Some((e.addr? as usize, e.size as usize)))
        .collect();
    VirtualBacking::with_recorded_addresses(capacity, &segments)
}

impl<'t, B: Backing> Run<'t, B> {
    fn new(
        trace: &'t [TraceEntrySnapshot],
        config: AllocatorConfig,
        backing: B,
        capacity: Option<u64>,
        limit: Option<u64>,
    ) -> Self {
        let a = CachingAllocator::with_config(WithSimulatedStreams::new(backing), config);
        a.set_memory_limit(limit.map(|l| l as usize));
        Run {
            trace,
            a,
            bounded: capacity.is_some() || limit.is_some(),
            streams: HashMap::from([(0, StreamId::DEFAULT)]),
            live: HashMap::new(),
            deferred: HashMap::new(),
            next_deferred: DEFERRED_STREAMS,
            ooms: Vec::new(),
            peak_allocated: 0,
            peak_entry: None,
            reserved_at_peak: 0,
            largest_free: 0,
            skip: HashSet::new(),
        }
    }

    /// At each new peak of allocated bytes (after entry `entry`, or before the trace): what
    /// was reserved then and the largest free block.
    fn observe(&mut self, entry: Option<usize>) {
        let allocated = self.a.memory_allocated() as u64;
        if allocated > self.peak_allocated {
            self.peak_allocated = allocated;
            self.peak_entry = entry;
            self.reserved_at_peak = self.a.memory_reserved() as u64;
            self.largest_free = self.a.largest_free_block() as u64;
        }
    }

    /// The replay's stream for the trace's stream handle `s`.
    fn stream(&mut self, s: u64) -> StreamId {
        let next = StreamId(self.streams.len() as u64);
        *self.streams.entry(s).or_insert(next)
    }

    /// Allocates the blocks the trace frees without allocating them.
    fn allocate_missing(&mut self, missing: &[(u64, u64)]) {
        let unknown = Site::unknown("replay");
        for &(addr, bytes) in missing {
            if let Ok(b) = self.a.allocate(bytes as usize, &unknown) {
                self.live.insert(addr, b);
            }
            self.observe(None);
        }
    }

    /// Replays entry `i`.
    fn step(&mut self, i: usize) {
        if self.skip.contains(&i) {
            return;
        }
        let e = &self.trace[i];
        let unknown = Site::unknown("replay");
        match (e.action, e.addr) {
            (TraceAction::Alloc, Some(addr)) => {
                let stream = self.stream(e.stream);
                match self.a.allocate_on_stream(e.size as usize, stream, &unknown) {
                    Ok(b) => {
                        if let Some(old) = self.live.insert(addr, b) {
                            // SAFETY: `old` came from `a` and its owner (the trace) freed it.
                            unsafe { self.a.deallocate(old) };
                        }
                        self.observe(Some(i));
                    }
                    Err(e) => self.ooms.push(self.oom(i, &e)),
                }
            }
            // The run ran out of memory here: the replay asks for the same bytes (the entry
            // holds the rounded request) and, should it get them, gives them back at once, as
            // the program never held them.
            (TraceAction::Oom, _) => {
                let stream = self.stream(e.stream);
                match self.a.allocate_on_stream(e.size as usize, stream, &unknown) {
                    // SAFETY: `b` came from `a` and nothing holds it.
                    Ok(b) => unsafe { self.a.deallocate(b) },
                    Err(e) => self.ooms.push(self.oom(i, &e)),
                }
            }
            (TraceAction::FreeRequested, Some(addr)) => {
                let completes_now = self.trace.get(i + 1).is_some_and(|n| {
                    n.action == TraceAction::FreeCompleted && n.addr == Some(addr)
                });
                let Some(b) = self.live.remove(&addr) else {
                    return;
                };
                if !completes_now {
                    // Another stream still used the block: it returns to its pool only when
                    // the trace completes the free. A stream of the replay's own, held until
                    // then, stands for that work.
                    let held = StreamId(self.next_deferred);
                    self.next_deferred += 1;
                    self.a.backing().streams.hold(held);
                    self.a.record_stream(&b, held);
                    self.deferred.insert(addr, held);
                }
                // SAFETY: `b` came from `a` and is not used again.
                unsafe { self.a.deallocate(b) };
            }
            (TraceAction::FreeCompleted, Some(addr)) => {
                if let Some(held) = self.deferred.remove(&addr) {
                    self.a.backing().streams.release(held);
                } else if let Some(b) = self.live.remove(&addr) {
                    // A trace without `free_requested` entries frees here.
                    // SAFETY: `b` came from `a` and is not used again.
                    unsafe { self.a.deallocate(b) };
                }
            }
            // The first of a run of segment releases: the program emptied the cache, unless
            // the device is bounded and an allocation follows, when the allocator released
            // them to retry (the replay's allocator makes its own retry).
            (TraceAction::SegmentFree | TraceAction::SegmentUnmap, _) => {
                if i > 0 && Self::releases(&self.trace[i - 1]) {
                    return;
                }
                let next = self.trace[i..].iter().find(|n| !Self::releases(n));
                let retry = self.bounded
                    && next
                        .is_some_and(|n| matches!(n.action, TraceAction::Alloc | TraceAction::Oom));
                if !retry {
                    let _ = self.a.empty_cache();
                }
            }
            _ => {}
        }
    }

    fn releases(e: &TraceEntrySnapshot) -> bool {
        matches!(
            e.action,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap
        )
    }

    fn oom(&self, i: usize, error: &CachingError) -> ReplayOom {
        let e = &self.trace[i];
        let (segment, device_free) = match error {
            CachingError::OutOfMemory(r) => {
                let free = match r.limit {
                    Some(l) => l.saturating_sub(r.reserved).min(r.device_free),
                    None => r.device_free,
                };
                (r.segment_size as u64, free as u64)
            }
            _ => (0, 0),
        };
        ReplayOom {
            entry: i,
            bytes: e.size,
            allocated: self.a.memory_allocated() as u64,
            reserved: self.a.memory_reserved() as u64,
            segment,
            device_free,
            site: site_of(e),
        }
    }

    fn figures(self, capacity: Option<u64>) -> ReplayFigures {
        let stats = self.a.memory_stats();
        ReplayFigures {
            settings: self.a.config().raw,
            capacity,
            peak_allocated: stats.allocated_bytes.all.peak.max(0) as u64,
            peak_entry: self.peak_entry,
            peak_reserved: stats.reserved_bytes.all.peak.max(0) as u64,
            peak_requested: stats.requested_bytes.all.peak.max(0) as u64,
            peak_segments: stats.segment.all.peak.max(0) as u64,
            alloc_retries: stats.num_alloc_retries,
            reserved_at_peak: self.reserved_at_peak,
            reserved_per_allocated: if self.peak_allocated > 0 {
                self.reserved_at_peak as f64 / self.peak_allocated as f64
            } else {
                0.0
            },
            largest_free_block: self.largest_free,
            ooms: self.ooms,
        }
    }
}

/// What follows a replay entry by entry: the entry's index and the statistics after it.
type Observer<'a> = dyn FnMut(usize, &MemoryStats) + 'a;

/// Runs `trace` (after allocating `missing`) through a fresh allocator, calling `observe` (if
/// any) with each entry's index and the allocator's statistics after it.
/// `capacity` is the device's, for the report (the backing enforces it).
fn run<B: Backing>(
    trace: &[TraceEntrySnapshot],
    missing: &[(u64, u64)],
    config: AllocatorConfig,
    backing: B,
    capacity: Option<u64>,
    limit: Option<u64>,
    mut observe: Option<&mut Observer<'_>>,
) -> ReplayFigures {
    let mut r = Run::new(trace, config, backing, capacity, limit);
    r.allocate_missing(missing);
    for i in 0..trace.len() {
        r.step(i);
        if let Some(f) = observe.as_mut() {
            f(i, &r.a.memory_stats());
        }
    }
    r.figures(capacity)
}

/// The peaks the trace records by itself: requested bytes from its `alloc` and
/// `free_completed` entries, reserved bytes from its segment events.
fn traced_peaks(trace: &[TraceEntrySnapshot], missing: &[(u64, u64)]) -> (u64, u64, usize) {
    let before: u64 = missing.iter().map(|(_, b)| *b).sum();
    let mut walk = TraceWalk::new(FreeAt::Completed).with_live_before(before);
    for (i, e) in trace.iter().enumerate() {
        walk.step(i, e);
    }
    (
        walk.peak_live().max(0) as u64,
        walk.peak_reserved().max(0) as u64,
        walk.ooms(),
    )
}

/// What to replay and under what: the device whose trace runs, the what-if settings and
/// capacity, and the recorded run's memory limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    /// The device whose trace runs (index into `device_traces`).
    pub device: usize,
    /// The settings of the what-if run (`STRATA_ALLOC_CONF` syntax; empty: defaults).
    pub what_if: String,
    /// The what-if run's device capacity (`None`: the recorded run's limit, else unbounded).
    pub capacity: Option<u64>,
    /// The recorded run's memory limit, for snapshots that do not record one: PyTorch's
    /// snapshots leave out `set_per_process_memory_fraction` (`None`: the snapshot's own
    /// `memory_limit`, else unlimited).
    pub limit: Option<u64>,
}

impl ReplayOptions {
    /// Device `device`'s trace under the what-if settings `what_if`.
    pub fn new(device: usize, what_if: &str) -> Self {
        ReplayOptions {
            device,
            what_if: what_if.to_owned(),
            ..ReplayOptions::default()
        }
    }
}

/// Replays device `device`'s trace of `snapshot` under its own settings and under `what_if`
/// (`STRATA_ALLOC_CONF` syntax), on a device of `capacity` bytes (`None`: the recorded
/// run's memory limit, else unbounded). [`replay_with`] also takes a limit for the recorded
/// run.
///
/// ```
/// use strata_alloc::offline::replay;
/// use strata_alloc::{CachingAllocator, DeviceAllocator, RecordContext, Site, VirtualBacking};
/// let a = CachingAllocator::new(VirtualBacking::new(1 << 34));
/// a.record_memory_history(true, RecordContext::All, 10_000);
/// let site = Site::unknown("example");
/// let blocks: Vec<_> = (1..20).map(|i| a.allocate(i * (3 << 20), &site).unwrap()).collect();
/// for b in blocks { unsafe { a.deallocate(b) } }
/// let r = replay(&a.snapshot(), 0, "expandable_segments:True", None).unwrap();
/// assert_eq!(r.recorded.peak_reserved, a.memory_stats().reserved_bytes.all.peak as u64);
/// assert!(r.what_if.peak_reserved <= r.recorded.peak_reserved);
/// ```
pub fn replay(
    snapshot: &Snapshot,
    device: usize,
    what_if: &str,
    capacity: Option<u64>,
) -> Result<ReplayReport, ReplayError> {
    let options = ReplayOptions {
        capacity,
        ..ReplayOptions::new(device, what_if)
    };
    replay_with(snapshot, &options)
}

/// The trace of `device` in `snapshot`, or why there is nothing to replay.
fn trace_of(snapshot: &Snapshot, device: usize) -> Result<&[TraceEntrySnapshot], ReplayError> {
    let trace = snapshot
        .device_traces
        .get(device)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if trace.is_empty() {
        let blocks = snapshot.segments.iter().flat_map(|s| &s.blocks);
        return Err(ReplayError::NoTrace {
            reserved: snapshot.total_reserved(),
            allocated: snapshot.total_allocated(),
            largest_free: blocks
                .filter(|b| b.state == crate::caching::BlockState::Inactive)
                .map(|b| b.size)
                .max()
                .unwrap_or(0),
        });
    }
    Ok(trace)
}

/// [`replay`] with every option: the recorded run runs under the snapshot's settings and
/// `options.limit` (else the snapshot's recorded limit); the what-if run under
/// `options.what_if` on a device of `options.capacity` bytes.
pub fn replay_with(
    snapshot: &Snapshot,
    options: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let config = AllocatorConfig::parse(&options.what_if).map_err(|e| ReplayError::Settings {
        settings: options.what_if.clone(),
        message: e.to_string(),
    })?;
    let prepared = PreparedTrace::new(snapshot, options.device)?;
    let (trace, missing) = (prepared.trace, &prepared.missing);
    let coverage = if missing.is_empty() {
        Coverage::Complete
    } else {
        Coverage::Truncated {
            missing: missing.len(),
            missing_bytes: missing.iter().map(|(_, b)| b).sum(),
        }
    };
    let (traced_peak_requested, traced_peak_reserved, traced_ooms) = traced_peaks(trace, missing);
    let limit = options.limit.or(snapshot.allocator_settings.memory_limit);
    let ties = prepared.ties;
    let recorded = run(
        trace,
        missing,
        recorded_config(&snapshot.allocator_settings),
        virtual_device(trace, None, ties),
        None,
        limit,
        None,
    );
    let capacity = options.capacity.or(limit);
    let what_if = run(
        trace,
        missing,
        config,
        virtual_device(trace, capacity, ties),
        capacity,
        None,
        None,
    );
    Ok(ReplayReport {
        entries: trace.len(),
        coverage,
        traced_peak_requested,
        traced_peak_reserved,
        traced_ooms,
        recorded,
        what_if,
    })
}

/// Replays the recorded run alone (the snapshot's settings, `limit` or else its recorded
/// limit) over the virtual backing, calling `observe` with each entry's index and the
/// allocator's statistics after it: how a test follows a run's phases through the replay.
pub fn replay_recorded(
    snapshot: &Snapshot,
    device: usize,
    limit: Option<u64>,
    observe: &mut dyn FnMut(usize, &MemoryStats),
) -> Result<ReplayFigures, ReplayError> {
    let trace = trace_of(snapshot, device)?;
    let ties = snapshot.allocator_settings.ties_by_address;
    replay_recorded_on(
        snapshot,
        device,
        limit,
        virtual_device(trace, None, ties),
        observe,
    )
}

/// [`replay_recorded`] over `backing`: real device memory (a
/// [`CudaBacking`](crate::backing::CudaBacking) replaying a PyTorch run on the GPU it was
/// recorded on), with streams and events simulated, since a replay queues no work. Ties
/// between equal free blocks go by the backing's own rule and addresses.
pub fn replay_recorded_on<B: Backing>(
    snapshot: &Snapshot,
    device: usize,
    limit: Option<u64>,
    backing: B,
    observe: &mut dyn FnMut(usize, &MemoryStats),
) -> Result<ReplayFigures, ReplayError> {
    let prepared = PreparedTrace::new(snapshot, device)?;
    let limit = limit.or(snapshot.allocator_settings.memory_limit);
    Ok(run(
        prepared.trace,
        &prepared.missing,
        recorded_config(&snapshot.allocator_settings),
        backing,
        None,
        limit,
        Some(observe),
    ))
}

/// One device's trace made ready for many replays under different settings: what
/// `strata explain` runs to verify each fix, and to rebuild the allocator's state at a moment.
pub(super) struct PreparedTrace<'t> {
    /// The trace.
    pub(super) trace: &'t [TraceEntrySnapshot],
    /// Blocks held before it began: `(address, bytes)`.
    pub(super) missing: Vec<(u64, u64)>,
    /// Whether the run broke ties by address.
    ties: bool,
}

impl<'t> PreparedTrace<'t> {
    /// Device `device`'s trace of `snapshot`, or why there is none.
    pub(super) fn new(snapshot: &'t Snapshot, device: usize) -> Result<Self, ReplayError> {
        let trace = trace_of(snapshot, device)?;
        Ok(PreparedTrace {
            trace,
            missing: missing_blocks(trace, snapshot),
            ties: snapshot.allocator_settings.ties_by_address,
        })
    }

    fn start(
        &self,
        config: AllocatorConfig,
        limit: Option<u64>,
        skip_missing: &HashSet<u64>,
    ) -> Run<'t, VirtualBacking> {
        let mut r = Run::new(
            self.trace,
            config,
            virtual_device(self.trace, None, self.ties),
            None,
            limit,
        );
        let missing: Vec<(u64, u64)> = self
            .missing
            .iter()
            .filter(|(addr, _)| !skip_missing.contains(addr))
            .copied()
            .collect();
        r.allocate_missing(&missing);
        r
    }

    /// The whole trace under `config`, with reserved bytes held under `limit`, leaving out the
    /// entries in `skip` and the blocks held before the trace at the addresses in
    /// `skip_missing`.
    pub(super) fn run(
        &self,
        config: AllocatorConfig,
        limit: Option<u64>,
        skip: HashSet<usize>,
        skip_missing: &HashSet<u64>,
    ) -> ReplayFigures {
        let mut r = self.start(config, limit, skip_missing);
        r.skip = skip;
        for i in 0..self.trace.len() {
            r.step(i);
        }
        r.figures(limit)
    }

    /// The allocator's state after entries `0..end` under `config` and `limit`, as a
    /// snapshot without a trace.
    pub(super) fn state_before(
        &self,
        config: AllocatorConfig,
        limit: Option<u64>,
        end: usize,
    ) -> Snapshot {
        let mut r = self.start(config, limit, &HashSet::new());
        for i in 0..end.min(self.trace.len()) {
            r.step(i);
        }
        r.a.snapshot()
    }
}
