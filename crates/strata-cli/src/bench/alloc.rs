//! Allocator rows of `strata bench`: the caching allocator over host memory beside the system
//! allocator (`std::alloc`), and a training-loop trace replayed on the caching allocator with
//! and without expandable segments. Every figure is measured in the same run as its baseline.
//!
//! * Alloc+free pairs (512 B, 64 KiB, 4 MiB, 64 MiB) without touching the memory: nanoseconds
//!   per pair. The caching allocator serves them from its cache.
//! * Alloc, write one byte per 4 KiB page, free (4, 16, 64 MiB): microseconds per iteration,
//!   and minor page faults per iteration (`getrusage(RUSAGE_SELF).ru_minflt`). In steady state
//!   the caching allocator's pages stay resident, so it takes no faults.
//! * The MLP training traces of [`strata_alloc::trace`], replayed on a caching allocator over
//!   a virtual backing: peak reserved bytes over peak allocated bytes (1.0 is no overhead).

use std::alloc::Layout;
use std::hint::black_box;

use strata::Error;
use strata_alloc::trace::{replay, MlpTraining, ReplayReport};
use strata_alloc::{
    AllocError, AllocatorConfig, CachingAllocator, DeviceAllocator, HostBacking, Site,
    VirtualBacking, BLOCK_ALIGN,
};

use super::{median, Row};

/// Sizes of the alloc+free pairs.
pub const PAIR_SIZES: [usize; 4] = [512, 64 << 10, 4 << 20, 64 << 20];
/// Sizes of the touched buffers.
pub const TOUCH_SIZES: [usize; 3] = [4 << 20, 16 << 20, 64 << 20];
/// Stride of the writes that fault pages in.
const PAGE: usize = 4096;
const SYSTEM: &str = "system allocator";

/// The allocator rows of `strata bench`. `quick` uses fewer repetitions.
pub fn rows(quick: bool) -> strata::Result<Vec<Row>> {
    let reps = if quick { 3 } else { 10 };
    let mut rows = Vec::new();

    let pair_iters = if quick { 10_000 } else { 50_000 };
    for size in PAIR_SIZES {
        let a = warm_caching(size)?;
        let strata = per_iter_ns(reps, pair_iters, || caching_cycle(&a, size, |_| ()))?;
        let layout = layout(size)?;
        let system = per_iter_ns(reps, pair_iters, || {
            system_cycle(layout, |_| ());
            Ok(())
        })?;
        rows.push(lower_is_better(
            format!("alloc+free {} (cached pair)", size_name(size)),
            strata,
            system,
            SYSTEM,
            "ns",
        ));
    }

    for size in TOUCH_SIZES {
        // About 256 MiB of pages per timed run (a quarter of that when quick).
        let iters = ((256 << 20) / size / if quick { 4 } else { 1 }).max(1);
        let a = warm_caching(size)?;
        let touch_caching = || {
            // SAFETY: the pointer is the start of a live block of `size` bytes of host memory.
            caching_cycle(&a, size, |p| unsafe { touch(p, size) })
        };
        let layout = layout(size)?;
        let touch_system = || {
            // SAFETY: the pointer is the start of a live allocation of `size` bytes.
            system_cycle(layout, |p| unsafe { touch(p, size) });
            Ok(())
        };
        let strata = per_iter_ns(reps, iters, touch_caching)? / 1e3;
        let system = per_iter_ns(reps, iters, touch_system)? / 1e3;
        let name = format!("alloc+touch+free {}", size_name(size));
        rows.push(lower_is_better(name.clone(), strata, system, SYSTEM, "µs"));
        let strata_faults = faults_per_iter(iters, touch_caching)?;
        let system_faults = faults_per_iter(iters, touch_system)?;
        rows.push(lower_is_better(
            format!("{name}: page faults"),
            strata_faults,
            system_faults,
            SYSTEM,
            "minor faults/iter",
        ));
    }

    for (name, spec) in [
        ("deep MLP", MlpTraining::default()),
        ("MLP 784-1024-1024-10", MlpTraining::small()),
    ] {
        let trace = spec.trace();
        let default = replay_on(&trace, "")?;
        let expandable = replay_on(&trace, "expandable_segments:True")?;
        rows.push(lower_is_better(
            format!("{name} trace: reserved/peak, default"),
            default.overhead(),
            1.0,
            "ideal: reserved = peak allocated",
            "ratio",
        ));
        rows.push(lower_is_better(
            format!("{name} trace: reserved/peak, expandable"),
            expandable.overhead(),
            default.overhead(),
            "caching, default segments",
            "ratio",
        ));
    }
    Ok(rows)
}

/// A row whose figures are costs: the ratio is baseline / strata. A strata cost of zero
/// against a non-zero baseline has no finite ratio (`None`); zero against zero is 1.
fn lower_is_better(
    name: String,
    strata: f64,
    baseline: f64,
    baseline_name: &str,
    unit: &str,
) -> Row {
    let ratio = if strata != 0.0 {
        Some(baseline / strata)
    } else if baseline == 0.0 {
        Some(1.0)
    } else {
        None
    };
    Row {
        name,
        strata,
        baseline: Some(baseline),
        baseline_name: baseline_name.to_string(),
        ratio,
        unit: unit.to_string(),
    }
}

fn size_name(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn site() -> Site {
    Site::unknown("bench")
}

fn oom(source: AllocError) -> Error {
    Error::OutOfMemory {
        op: "bench",
        source,
    }
}

fn layout(size: usize) -> strata::Result<Layout> {
    Layout::from_size_align(size, BLOCK_ALIGN)
        .map_err(|e| Error::argument("bench", e.to_string(), None))
}

/// A caching allocator over host memory whose cache holds a block of `size` bytes whose
/// pages have all been touched.
fn warm_caching(size: usize) -> strata::Result<CachingAllocator<HostBacking>> {
    let a = CachingAllocator::new(HostBacking::new());
    // SAFETY: the pointer is the start of a live block of `size` bytes of host memory.
    caching_cycle(&a, size, |p| unsafe { touch(p, size) })?;
    Ok(a)
}

/// Allocates `size` bytes from `a`, runs `f` on the buffer, frees it.
fn caching_cycle(
    a: &CachingAllocator<HostBacking>,
    size: usize,
    f: impl FnOnce(*mut u8),
) -> strata::Result<()> {
    let b = a.allocate(size, &site()).map_err(oom)?;
    f(black_box(b.ptr().as_ptr()));
    // SAFETY: `b` came from `a` and is not used afterwards.
    unsafe { a.deallocate(b) };
    Ok(())
}

/// Allocates `layout` from the system allocator, runs `f` on the buffer, frees it.
fn system_cycle(layout: Layout, f: impl FnOnce(*mut u8)) {
    // SAFETY: every layout here has a non-zero size.
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    f(black_box(p));
    // SAFETY: `p` was allocated above with `layout`.
    unsafe { std::alloc::dealloc(p, layout) };
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

/// Median nanoseconds per call of `f` over runs of `iters` calls.
fn per_iter_ns(
    reps: usize,
    iters: usize,
    mut f: impl FnMut() -> strata::Result<()>,
) -> strata::Result<f64> {
    let mut outcome = Ok(());
    let t = median(reps, || {
        for _ in 0..iters {
            if outcome.is_ok() {
                outcome = f();
            }
        }
    });
    outcome.map(|()| t.as_secs_f64() * 1e9 / iters as f64)
}

/// Minor page faults of the process (`getrusage(RUSAGE_SELF).ru_minflt`).
pub fn minor_faults() -> u64 {
    // SAFETY: `rusage` is plain integers, for which all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    u64::try_from(usage.ru_minflt).unwrap_or(0)
}

/// Minor page faults per call of `f` over `iters` calls, after one warm-up call.
fn faults_per_iter(iters: usize, mut f: impl FnMut() -> strata::Result<()>) -> strata::Result<f64> {
    f()?;
    let before = minor_faults();
    for _ in 0..iters {
        f()?;
    }
    Ok(minor_faults().saturating_sub(before) as f64 / iters as f64)
}

/// Replays `trace` on a fresh caching allocator over a virtual backing configured by `conf`.
fn replay_on(trace: &strata_alloc::trace::Trace, conf: &str) -> strata::Result<ReplayReport> {
    let config =
        AllocatorConfig::parse(conf).map_err(|e| Error::argument("bench", e.to_string(), None))?;
    let a = CachingAllocator::with_config(VirtualBacking::new(1 << 40), config);
    replay(&a, trace, |_, _| {}).map_err(oom)
}
