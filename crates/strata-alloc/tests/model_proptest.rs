//! Random sequences of allocations, frees, `empty_cache`, limit changes and cross-stream uses:
//! the bookkeeping stays consistent, statistics equal what the blocks say, live blocks never
//! overlap, everything returns to zero at the end, and host and virtual backings make
//! identical choices.

use std::sync::Arc;

use proptest::prelude::*;
use strata_alloc::caching::{BlockState, SegmentLayout};
use strata_alloc::{
    AllocError, AllocatorConfig, Backing, Block, CachingAllocator, DeviceAllocator, HostBacking,
    Site, StreamId, VirtualBacking,
};

const MIB: usize = 1 << 20;
const CAPACITY: usize = 256 * MIB;

#[derive(Debug, Clone)]
enum Op {
    Alloc { size: usize, stream: u64 },
    Free(usize),
    EmptyCache,
    SetLimit(Option<usize>),
    RecordStream(usize, u64),
    HoldStream(u64),
    ReleaseStream(u64),
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        // Repeated sizes make equal-sized free blocks in different segments, where the
        // tie-break (segment order, not address) decides.
        4 => prop::sample::select(vec![100, 512, 4096, MIB, 3 * MIB, 12 * MIB, 19 * MIB]),
        4 => 1usize..4096,
        4 => 4096usize..MIB,
        3 => MIB..10 * MIB,
        2 => 10 * MIB..48 * MIB,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (size(), 0u64..3).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        7 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::EmptyCache),
        1 => prop::option::of(16 * MIB..CAPACITY).prop_map(Op::SetLimit),
        1 => (any::<usize>(), 0u64..3).prop_map(|(i, s)| Op::RecordStream(i, s)),
        1 => (0u64..3).prop_map(Op::HoldStream),
        1 => (0u64..3).prop_map(Op::ReleaseStream),
    ]
}

fn config() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just(""),
        Just("expandable_segments:True"),
        Just("max_split_size_mb:24"),
        Just("roundup_power2_divisions:4"),
        Just("garbage_collection_threshold:0.6"),
        Just("max_split_size_mb:32,garbage_collection_threshold:0.5,roundup_power2_divisions:[1:2,>:8]"),
        Just("expandable_segments:True,roundup_power2_divisions:[>:4],garbage_collection_threshold:0.8"),
        Just("backend:system"),
    ]
}

fn site(i: usize) -> Site {
    const OPS: [&str; 3] = ["zeros", "matmul", "add"];
    Site {
        file: "model.rs",
        line: (i % 7) as u32,
        column: 0,
        op: OPS[i % 3],
        scope: "",
    }
}

/// A block as (offset, size, requested, state).
type BlockShape = (usize, usize, usize, Option<BlockState>);
/// A segment as (seq, size, mapped bytes, stream, expandable, blocks).
type SegmentShape = (u64, usize, usize, u64, bool, Vec<BlockShape>);

/// The allocator's layout without addresses: what must be identical across backings.
fn shape(segs: &[SegmentLayout]) -> Vec<SegmentShape> {
    segs.iter()
        .map(|s| {
            (
                s.seq,
                s.size,
                s.mapped_bytes,
                s.stream.0,
                s.expandable,
                s.blocks
                    .iter()
                    .map(|b| (b.offset, b.size, b.requested, b.state))
                    .collect(),
            )
        })
        .collect()
}

/// Where a block lies, as (segment sequence number, offset).
fn place(segs: &[SegmentLayout], b: &Block) -> (u64, usize) {
    let addr = b.ptr().as_ptr() as usize;
    let s = segs
        .iter()
        .find(|s| s.address <= addr && addr < s.address + s.size)
        .expect("a live block lies in a segment");
    (s.seq, addr - s.address)
}

/// One allocator under test and the blocks it has handed out.
struct Run<B: Backing> {
    a: CachingAllocator<Arc<B>>,
    live: Vec<Block>,
    ops: usize,
}

impl<B: Backing> Run<B> {
    fn new(backing: Arc<B>, conf: &str) -> Self {
        Run {
            a: CachingAllocator::with_config(backing, AllocatorConfig::parse(conf).unwrap()),
            live: Vec::new(),
            ops: 0,
        }
    }

    /// Applies one op and checks the invariants. Returns what happened, for comparison.
    fn step(&mut self, op: &Op, hold: impl Fn(u64, bool)) -> Result<String, TestCaseError> {
        self.ops += 1;
        let a = &self.a;
        let out = match *op {
            Op::Alloc { size, stream } => {
                let before = a.memory_stats();
                let reserved_before = a.memory_reserved();
                match a.allocate_on_stream(size, StreamId(stream), &site(self.ops)) {
                    Ok(b) => {
                        if let Some(l) = a.memory_limit() {
                            prop_assert!(a.memory_reserved() <= l.max(reserved_before));
                        }
                        self.live.push(b);
                        format!("ok {:?}", place(&a.segments(), self.live.last().unwrap()))
                    }
                    Err(e) => {
                        let after = a.memory_stats();
                        let is_oom = matches!(AllocError::from(e), AllocError::OutOfMemory { .. });
                        prop_assert!(is_oom, "only out-of-memory can fail here");
                        prop_assert_eq!(after.allocated_bytes, before.allocated_bytes);
                        prop_assert_eq!(after.allocation, before.allocation);
                        prop_assert_eq!(after.num_ooms, before.num_ooms + 1);
                        prop_assert!(after.num_alloc_retries > before.num_alloc_retries);
                        "oom".to_string()
                    }
                }
            }
            Op::Free(i) => {
                if self.live.is_empty() {
                    "none".to_string()
                } else {
                    let b = self.live.swap_remove(i % self.live.len());
                    // SAFETY: every block in `live` came from `a.allocate_on_stream` in this
                    // run, and it was removed from `live`, so it is returned once.
                    unsafe { a.deallocate(b) };
                    "freed".to_string()
                }
            }
            Op::EmptyCache => {
                a.empty_cache().unwrap();
                format!("reserved {}", a.memory_reserved())
            }
            Op::SetLimit(l) => {
                a.set_memory_limit(l);
                "limit".to_string()
            }
            Op::RecordStream(i, s) => {
                if self.live.is_empty() {
                    "none".to_string()
                } else {
                    let b = &self.live[i % self.live.len()];
                    prop_assert!(a.record_stream(b, StreamId(s)));
                    "recorded".to_string()
                }
            }
            Op::HoldStream(s) => {
                hold(s, true);
                "hold".to_string()
            }
            Op::ReleaseStream(s) => {
                hold(s, false);
                "release".to_string()
            }
        };
        if let Err(e) = a.check_consistency() {
            return Err(TestCaseError::fail(format!("after {op:?}: {e}")));
        }
        // Live blocks never overlap.
        let mut spans: Vec<(usize, usize)> = self
            .live
            .iter()
            .map(|b| (b.ptr().as_ptr() as usize, b.size()))
            .collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            prop_assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap: {:?}", w);
        }
        let st = a.memory_stats();
        prop_assert_eq!(st.allocation.all.current as usize, self.live.len());
        let requested: usize = self.live.iter().map(|b| b.size()).sum();
        let active_requested = st.requested_bytes.all.current as usize;
        prop_assert!(active_requested >= requested);
        Ok(out)
    }

    fn finish(mut self, release: impl Fn()) -> Result<(), TestCaseError> {
        for b in self.live.drain(..) {
            // SAFETY: every block in `live` came from `self.a`, and draining `live` returns
            // each once.
            unsafe { self.a.deallocate(b) };
        }
        release();
        self.a.empty_cache().unwrap();
        self.a.check_consistency().map_err(TestCaseError::fail)?;
        let st = self.a.memory_stats();
        prop_assert_eq!(self.a.memory_reserved(), 0);
        prop_assert_eq!(st.reserved_bytes.all.current, 0);
        prop_assert_eq!(st.allocated_bytes.all.current, 0);
        prop_assert_eq!(st.active_bytes.all.current, 0);
        prop_assert_eq!(st.requested_bytes.all.current, 0);
        prop_assert_eq!(st.inactive_split.all.current, 0);
        prop_assert_eq!(st.segment.all.current, 0);
        prop_assert!(self.a.segments().is_empty());
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_the_books_straight(
        conf in config(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let backing = Arc::new(VirtualBacking::new(CAPACITY));
        let mut run = Run::new(backing.clone(), conf);
        for op in &ops {
            let b = backing.clone();
            run.step(op, move |s, on| if on { b.hold_stream(StreamId(s)) } else { b.release_stream(StreamId(s)) })?;
        }
        let b = backing.clone();
        run.finish(move || for s in 0..3 { b.release_stream(StreamId(s)) })?;
        prop_assert_eq!(backing.mapped_bytes(), 0);
    }

    #[test]
    fn host_and_virtual_backings_make_identical_choices(
        conf in config(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        // Streams are never held here: host events complete at once, so the virtual ones must
        // too for the runs to be comparable.
        let ops: Vec<Op> = ops
            .into_iter()
            .filter(|o| !matches!(o, Op::HoldStream(_) | Op::ReleaseStream(_)))
            .collect();
        let host = Arc::new(HostBacking::with_capacity(CAPACITY));
        let virt = Arc::new(VirtualBacking::new(CAPACITY));
        let mut h = Run::new(host.clone(), conf);
        let mut v = Run::new(virt.clone(), conf);
        for op in &ops {
            let oh = h.step(op, |_, _| {})?;
            let ov = v.step(op, |_, _| {})?;
            prop_assert_eq!(&oh, &ov, "different outcome of {:?}", op);
            prop_assert_eq!(shape(&h.a.segments()), shape(&v.a.segments()), "after {:?}", op);
            prop_assert_eq!(h.a.memory_stats(), v.a.memory_stats());
        }
        h.finish(|| {})?;
        v.finish(|| {})?;
        prop_assert_eq!(host.mapped_bytes(), 0);
        prop_assert_eq!(virt.mapped_bytes(), 0);
    }
}

#[test]
fn oom_on_a_full_device_then_recovery() {
    // A deterministic companion to the properties: fill the device, fail, free, succeed.
    let a = CachingAllocator::new(VirtualBacking::new(64 * MIB));
    let mut held = Vec::new();
    while let Ok(b) = a.allocate(5 * MIB, &site(0)) {
        held.push(b);
    }
    assert_eq!(
        held.len(),
        12,
        "three 20 MiB segments hold four 5 MiB blocks each"
    );
    let st = a.memory_stats();
    assert_eq!(st.num_ooms, 1);
    assert_eq!(st.num_alloc_retries, 1);
    for b in held {
        // SAFETY: every block in `held` came from `a`'s `allocate`, and the loop takes each
        // once.
        unsafe { a.deallocate(b) };
    }
    a.empty_cache().unwrap();
    assert_eq!(a.memory_reserved(), 0);
    a.check_consistency().unwrap();
}
