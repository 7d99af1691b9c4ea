//! Allocator benchmarks: the caching allocator over host memory beside the system allocator
//! (`std::alloc`), in the same run. Compare each `caching` row with the `system` row of the
//! same size.
//!
//! * `pair`: one allocation and its free, without touching the memory. The caching allocator
//!   serves it from its cache (the segment is created before timing starts).
//! * `touch`: allocate, write one byte in every 4 KiB page, free. The system allocator maps
//!   fresh pages for large buffers and faults on each of them; the caching allocator keeps its
//!   pages resident.
//!
//! Run with `cargo bench -p strata-alloc`.

use std::alloc::Layout;

use divan::Bencher;
use strata_alloc::{CachingAllocator, DeviceAllocator, HostBacking, Site, BLOCK_ALIGN};

fn main() {
    divan::main();
}

/// Sizes of the alloc+free pairs: small pool, small pool, large pool, large (own segment).
const PAIR_SIZES: [usize; 4] = [512, 64 << 10, 4 << 20, 64 << 20];
/// Sizes of the touched buffers.
const TOUCH_SIZES: [usize; 3] = [4 << 20, 16 << 20, 64 << 20];
/// Stride of the writes that fault pages in.
const PAGE: usize = 4096;

fn site() -> Site {
    Site::unknown("bench")
}

/// A caching allocator over host memory whose cache already holds a block of `size` bytes.
fn warm_caching(size: usize) -> CachingAllocator<HostBacking> {
    let a = CachingAllocator::new(HostBacking::new());
    let b = a.allocate(size, &site()).expect("host memory");
    // SAFETY: `b` came from `a` and is not used afterwards.
    unsafe { a.deallocate(b) };
    a
}

/// Writes one byte in every page of `[ptr, ptr + len)`.
///
/// # Safety
/// `ptr` must be valid for writes of `len` bytes.
unsafe fn touch(ptr: *mut u8, len: usize) {
    for off in (0..len).step_by(PAGE) {
        // SAFETY: `off < len`, so the byte lies inside the caller's buffer.
        unsafe { ptr.add(off).write_volatile(1) };
    }
}

/// Allocation and free of `size` bytes through the system allocator, with `f` on the buffer.
fn system_cycle(layout: Layout, f: impl FnOnce(*mut u8)) {
    // SAFETY: `layout` has a non-zero size.
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    f(divan::black_box(p));
    // SAFETY: `p` was allocated above with `layout`.
    unsafe { std::alloc::dealloc(p, layout) };
}

/// Allocation and free of `size` bytes through the caching allocator, with `f` on the buffer.
fn caching_cycle(a: &CachingAllocator<HostBacking>, size: usize, f: impl FnOnce(*mut u8)) {
    let b = a.allocate(size, &site()).expect("host memory");
    f(divan::black_box(b.ptr().as_ptr()));
    // SAFETY: `b` came from `a` and is not used afterwards.
    unsafe { a.deallocate(b) };
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, BLOCK_ALIGN).expect("valid layout")
}

/// Iterations per timed sample of a pair. A pair takes tens of nanoseconds, about what reading
/// the clock takes; left to calibrate itself, divan sometimes settles on one iteration per
/// sample for the first benchmark it runs, and that row then measures mostly the clock.
const PAIR_SAMPLE_SIZE: u32 = 256;

/// Alloc+free pairs without touching the memory.
mod pair {
    use super::*;

    #[divan::bench(args = PAIR_SIZES, sample_size = PAIR_SAMPLE_SIZE)]
    fn caching(bencher: Bencher, size: usize) {
        let a = warm_caching(size);
        bencher.bench_local(|| caching_cycle(&a, size, |_| {}));
    }

    #[divan::bench(args = PAIR_SIZES, sample_size = PAIR_SAMPLE_SIZE)]
    fn system(bencher: Bencher, size: usize) {
        let l = layout(size);
        bencher.bench_local(|| system_cycle(l, |_| {}));
    }
}

/// Allocate, write every page, free.
mod touch {
    use super::*;

    #[divan::bench(args = TOUCH_SIZES, max_time = 2)]
    fn caching(bencher: Bencher, size: usize) {
        let a = warm_caching(size);
        // SAFETY: the pointer is the start of a live block of `size` bytes of host memory.
        caching_cycle(&a, size, |p| unsafe { touch(p, size) });
        bencher.bench_local(|| {
            // SAFETY: as above.
            caching_cycle(&a, size, |p| unsafe { touch(p, size) })
        });
    }

    #[divan::bench(args = TOUCH_SIZES, max_time = 2)]
    fn system(bencher: Bencher, size: usize) {
        let l = layout(size);
        bencher.bench_local(|| {
            // SAFETY: the pointer is the start of a live allocation of `size` bytes.
            system_cycle(l, |p| unsafe { touch(p, size) })
        });
    }
}
