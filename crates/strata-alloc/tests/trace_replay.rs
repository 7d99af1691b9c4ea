//! Replays the synthetic MLP training trace (`strata_alloc::trace`) on the caching allocator
//! over a `VirtualBacking` and checks every segment it creates, every block address it hands
//! out, and its reserved and allocated bytes after every call against a small, independent
//! re-computation of PyTorch's caching rules (`shared/reference/pytorch-memory-spec.md`
//! §1.3–1.8). With expandable segments the replay must reserve at most 15% above the peak of
//! allocated bytes. Everything here is a deterministic simulation; nothing is timed.

use strata_alloc::caching::BlockState;
use strata_alloc::trace::{replay, MlpTraining, Trace, TraceOp};
use strata_alloc::{
    AllocatorConfig, Block, CachingAllocator, DeviceAllocator, Site, VirtualBacking,
};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// PyTorch's caching rules with default settings, one stream, no limit, written as plainly as
/// possible: segments are vectors of blocks in address order.
#[derive(Debug, Default)]
struct Model {
    segments: Vec<ModelSegment>,
    reserved: usize,
    allocated: usize,
}

#[derive(Debug)]
struct ModelSegment {
    small: bool,
    size: usize,
    /// (size, allocated), in address order.
    blocks: Vec<(usize, bool)>,
}

impl Model {
    /// Rounds to 512 bytes; pool small iff the rounded size is at most 1 MiB.
    fn round(n: usize) -> usize {
        n.max(1).div_ceil(512) * 512
    }

    /// The segment a miss asks for.
    fn segment_size(size: usize) -> usize {
        if size <= MIB {
            2 * MIB
        } else if size < 10 * MIB {
            20 * MIB
        } else {
            size.div_ceil(2 * MIB) * 2 * MIB
        }
    }

    /// Allocates `n` bytes; returns (segment index, offset, block size).
    fn alloc(&mut self, n: usize) -> (usize, usize, usize) {
        let size = Self::round(n);
        let small = size <= MIB;
        // Best fit: the smallest free block of the pool that fits; ties to the older segment,
        // then the lower offset (the virtual backing hands out increasing addresses, so this
        // is PyTorch's lowest-address tie-break).
        let mut best: Option<(usize, usize, usize)> = None; // (size, segment, block index)
        for (s, seg) in self.segments.iter().enumerate() {
            if seg.small != small {
                continue;
            }
            for (b, &(bsize, used)) in seg.blocks.iter().enumerate() {
                if !used && bsize >= size && best.is_none_or(|(best_size, ..)| bsize < best_size) {
                    best = Some((bsize, s, b));
                }
            }
        }
        let (s, b) = match best {
            Some((_, s, b)) => (s, b),
            None => {
                let seg_size = Self::segment_size(size);
                self.segments.push(ModelSegment {
                    small,
                    size: seg_size,
                    blocks: vec![(seg_size, false)],
                });
                self.reserved += seg_size;
                (self.segments.len() - 1, 0)
            }
        };
        let seg = &mut self.segments[s];
        let bsize = seg.blocks[b].0;
        let remaining = bsize - size;
        let split = if small {
            remaining >= 512
        } else {
            remaining > MIB
        };
        let taken = if split {
            seg.blocks[b] = (size, true);
            seg.blocks.insert(b + 1, (remaining, false));
            size
        } else {
            seg.blocks[b].1 = true;
            bsize
        };
        self.allocated += taken;
        let offset = seg.blocks[..b].iter().map(|&(sz, _)| sz).sum();
        (s, offset, taken)
    }

    /// Frees the block at `offset` of segment `s`, merging it with free neighbours.
    fn free(&mut self, s: usize, offset: usize) {
        let seg = &mut self.segments[s];
        let mut at = 0;
        let mut b = 0;
        while at != offset {
            at += seg.blocks[b].0;
            b += 1;
        }
        assert!(seg.blocks[b].1, "model: double free");
        seg.blocks[b].1 = false;
        self.allocated -= seg.blocks[b].0;
        if b + 1 < seg.blocks.len() && !seg.blocks[b + 1].1 {
            seg.blocks[b].0 += seg.blocks.remove(b + 1).0;
        }
        if b > 0 && !seg.blocks[b - 1].1 {
            seg.blocks[b - 1].0 += seg.blocks.remove(b).0;
        }
    }

    /// (size, allocated) of every block, per segment in creation order.
    fn layout(&self) -> Vec<Vec<(usize, bool)>> {
        self.segments.iter().map(|s| s.blocks.clone()).collect()
    }
}

fn allocator(conf: &str) -> CachingAllocator<VirtualBacking> {
    CachingAllocator::with_config(
        VirtualBacking::new(1 << 40),
        AllocatorConfig::parse(conf).unwrap(),
    )
}

fn layout(a: &CachingAllocator<VirtualBacking>) -> Vec<Vec<(usize, bool)>> {
    a.segments()
        .iter()
        .map(|s| {
            s.blocks
                .iter()
                .map(|b| (b.size, b.state == Some(BlockState::ActiveAllocated)))
                .collect()
        })
        .collect()
}

/// Replays `trace` on a default-configured allocator and on the model side by side.
fn check_against_model(trace: &Trace) {
    trace.validate().unwrap();
    let a = allocator("");
    let site = Site::unknown("trace_replay");
    let mut model = Model::default();
    let mut live: Vec<Option<(Block, usize, usize)>> = (0..trace.buffers).map(|_| None).collect();
    let mut step = 0;
    for (i, op) in trace.ops.iter().enumerate() {
        match *op {
            TraceOp::Alloc { id, size } => {
                let block = a.allocate(size, &site).unwrap();
                let (s, offset, _) = model.alloc(size);
                let segments = a.segments();
                assert_eq!(
                    segments.len(),
                    model.segments.len(),
                    "op {i}: segment count (alloc of {size} bytes)"
                );
                assert_eq!(
                    block.ptr().as_ptr() as usize,
                    segments[s].address + offset,
                    "op {i}: block of {size} bytes not where best fit puts it"
                );
                live[id] = Some((block, s, offset));
            }
            TraceOp::Free { id } => {
                let (block, s, offset) = live[id].take().unwrap();
                // SAFETY: the block came from `a`; virtual addresses are never dereferenced.
                unsafe { a.deallocate(block) };
                model.free(s, offset);
            }
        }
        assert_eq!(
            a.memory_reserved(),
            model.reserved,
            "op {i}: reserved bytes"
        );
        assert_eq!(
            a.memory_allocated(),
            model.allocated,
            "op {i}: allocated bytes"
        );
        if trace.step_ends.get(step) == Some(&(i + 1)) {
            assert_eq!(
                layout(&a),
                model.layout(),
                "layout at the end of step {step}"
            );
            a.check_consistency().unwrap();
            step += 1;
        }
    }
    let created: Vec<usize> = a.segments().iter().map(|s| s.size).collect();
    let expected: Vec<usize> = model.segments.iter().map(|s| s.size).collect();
    assert_eq!(created, expected, "sizes of the segments created, in order");
    for (block, ..) in live.into_iter().flatten() {
        // SAFETY: as above.
        unsafe { a.deallocate(block) };
    }
}

#[test]
fn model_agrees_with_the_worked_examples() {
    let mut m = Model::default();
    let (_, _, small) = m.alloc(100);
    assert_eq!((small, m.reserved), (512, 2 * MIB));
    let (_, _, eleven) = m.alloc(11 * MIB);
    assert_eq!((eleven, m.reserved), (12 * MIB, 14 * MIB)); // 1 MiB left: not split
    let (s3, o3, three) = m.alloc(3 * MIB);
    assert_eq!((three, m.reserved), (3 * MIB, 34 * MIB));
    m.free(s3, o3);
    assert_eq!(m.layout()[2], vec![(20 * MIB, false)]);
    let (_, _, twelve) = m.alloc(12 * MIB);
    assert_eq!(twelve, 12 * MIB); // carved from the cached 20 MiB segment
    assert_eq!(m.reserved, 34 * MIB);
}

#[test]
fn default_segments_follow_pytorch_rules_on_the_mlp_trace() {
    check_against_model(&MlpTraining::default().trace());
}

#[test]
fn default_segments_follow_pytorch_rules_on_the_small_mlp() {
    // Batches of 64 and 128 keep every activation in the small pool.
    check_against_model(&MlpTraining::small().trace());
}

#[test]
fn expandable_segments_reserve_at_most_15_percent_over_peak() {
    let trace = MlpTraining::default().trace();
    let plain = replay(&allocator(""), &trace, |_, _| {}).unwrap();
    let a = allocator("expandable_segments:True");
    let mut consistent = Ok(());
    let expandable = replay(&a, &trace, |i, a| {
        if trace.step_ends.contains(&(i + 1)) && consistent.is_ok() {
            consistent = a.check_consistency();
        }
    })
    .unwrap();
    consistent.unwrap();
    // Expandable segments grow in whole pages of 2 MiB (small pool) or 20 MiB (large pool).
    assert_eq!(expandable.peak_reserved % (2 * MIB), 0);
    assert!(
        expandable.overhead() <= 1.15,
        "expandable: reserved {} KiB over peak allocated {} KiB = {:.3}",
        expandable.peak_reserved / KIB,
        expandable.peak_allocated / KIB,
        expandable.overhead()
    );
    assert!(
        expandable.peak_reserved <= plain.peak_reserved,
        "expandable {expandable:?} reserves more than default segments {plain:?}"
    );
    // Both allocators hand out the same rounded sizes (no split leaves slack with expandable
    // segments; the default large pool may hand out up to 1 MiB more per block).
    assert!(expandable.peak_allocated <= plain.peak_allocated);
    assert!(expandable.peak_allocated >= trace.peak_requested());
    assert_eq!(a.memory_allocated(), 0);
}

#[test]
fn page_rounding_sets_the_floor_of_the_small_mlp() {
    // The figures the `caching` module docs give for expandable segments on this model.
    let trace = MlpTraining::small().trace();
    for conf in ["", "expandable_segments:True"] {
        let a = allocator(conf);
        let r = replay(&a, &trace, |_, _| {}).unwrap();
        let st = a.memory_stats();
        let large = st.allocated_bytes.large_pool.peak as usize;
        let small = st.allocated_bytes.small_pool.peak as usize;
        assert!((35 * MIB..36 * MIB).contains(&large), "{conf}: {large}");
        assert!((2 * MIB..3 * MIB).contains(&small), "{conf}: {small}");
        assert_eq!(
            st.reserved_bytes.large_pool.peak as usize,
            40 * MIB,
            "{conf}"
        );
        assert_eq!(
            st.reserved_bytes.small_pool.peak as usize,
            4 * MIB,
            "{conf}"
        );
        assert_eq!(r.peak_reserved, 44 * MIB, "{conf}");
        assert!(
            (35 * MIB..36 * MIB).contains(&r.peak_allocated),
            "{conf}: {r:?}"
        );
        assert!((1.23..1.25).contains(&r.overhead()), "{conf}: {r:?}");
    }
}
