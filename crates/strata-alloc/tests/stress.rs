//! Eight threads allocating, writing, checking and freeing host memory concurrently.

use std::sync::Arc;
use std::thread;

use strata_alloc::{
    AllocatorConfig, Block, CachingAllocator, DeviceAllocator, HostBacking, Site, StreamId,
};

const MIB: usize = 1 << 20;
const THREADS: usize = 8;

/// A small deterministic generator (xorshift), one per thread.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Offsets written in a block (at least 8 bytes): every 64 KiB and its last whole 8 bytes,
/// never overlapping.
fn probes(size: usize) -> Vec<usize> {
    let last = size / 8 * 8 - 8;
    let mut v: Vec<usize> = (0..last).step_by(64 << 10).collect();
    v.push(last);
    v
}

fn stamp(b: &Block, tag: u64) {
    for off in probes(b.size()) {
        // SAFETY: host blocks are writable memory of at least `size` bytes, owned by this
        // thread until deallocated; probes stay inside.
        unsafe { (b.ptr().as_ptr().add(off) as *mut u64).write_unaligned(tag) };
    }
}

fn verify(b: &Block, tag: u64) {
    for off in probes(b.size()) {
        // SAFETY: as in `stamp`.
        let v = unsafe { (b.ptr().as_ptr().add(off) as *const u64).read_unaligned() };
        assert_eq!(v, tag, "block {:p} was overwritten at +{off}", b.ptr());
    }
}

fn hammer(conf: &str, iterations: usize) {
    let backing = Arc::new(HostBacking::with_capacity(1 << 31));
    let a = Arc::new(CachingAllocator::with_config(
        backing.clone(),
        AllocatorConfig::parse(conf).unwrap(),
    ));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let a = Arc::clone(&a);
            thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                let mut held: Vec<(Block, u64)> = Vec::new();
                let site = Site::unknown("stress");
                let stream = StreamId((t % 2) as u64);
                for i in 0..iterations {
                    let r = rng.next();
                    if held.len() < 12 && !r.is_multiple_of(3) {
                        let size = match r % 10 {
                            0..=5 => 8 + (r >> 8) as usize % (64 << 10),
                            6..=8 => 8 + (r >> 8) as usize % (4 * MIB),
                            _ => 10 * MIB + (r >> 8) as usize % (6 * MIB),
                        };
                        let b = a
                            .allocate_on_stream(size, stream, &site)
                            .expect("2 GiB holds 96 blocks even if each pins its own segment");
                        let tag = ((t as u64) << 56) | i as u64;
                        stamp(&b, tag);
                        held.push((b, tag));
                    } else if !held.is_empty() {
                        let (b, tag) = held.swap_remove((r >> 4) as usize % held.len());
                        verify(&b, tag);
                        // SAFETY: `b` came from `a.allocate` on this thread, was removed from
                        // `held`, and is not used after `verify`.
                        unsafe { a.deallocate(b) };
                    }
                    if i % 500 == 0 && t == 0 {
                        a.empty_cache().unwrap();
                    }
                }
                for (b, tag) in held {
                    verify(&b, tag);
                    // SAFETY: `b` came from `a.allocate` on this thread and is not used after
                    // `verify`.
                    unsafe { a.deallocate(b) };
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    a.check_consistency().unwrap();
    assert_eq!(a.memory_allocated(), 0);
    let st = a.memory_stats();
    assert!(st.allocation.all.allocated > (THREADS * iterations / 3) as i64);
    a.empty_cache().unwrap();
    assert_eq!(a.memory_reserved(), 0);
    assert_eq!(backing.mapped_bytes(), 0);
}

#[test]
fn eight_threads_default_settings() {
    hammer("", 3000);
}

#[test]
fn eight_threads_expandable_segments() {
    hammer("expandable_segments:True", 1500);
}

#[test]
fn eight_threads_with_power2_rounding_and_split_limit() {
    hammer("roundup_power2_divisions:4,max_split_size_mb:20", 1500);
}
