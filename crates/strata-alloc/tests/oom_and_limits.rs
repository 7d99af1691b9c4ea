//! Out-of-memory, the free-and-retry path, the memory limit and the memory fraction.

use std::sync::Arc;

use strata_alloc::{
    AllocError, AllocatorConfig, Block, CachingAllocator, CachingError, DeviceAllocator,
    HostBacking, Site, VirtualBacking,
};

const MIB: usize = 1 << 20;

fn at(line: u32, op: &'static str) -> Site {
    Site {
        file: "train.rs",
        line,
        column: 1,
        op,
        scope: "",
    }
}

#[test]
fn oom_leaves_allocated_bytes_unchanged_and_is_counted() {
    let a = CachingAllocator::new(VirtualBacking::new(64 * MIB));
    let w = a.allocate(30 * MIB, &at(10, "weights")).unwrap();
    let x: Vec<Block> = (0..3)
        .map(|_| a.allocate(3 * MIB, &at(20, "activations")).unwrap())
        .collect();
    let small = a.allocate(100, &at(30, "scalar")).unwrap();
    let before = a.memory_stats();
    let err = a
        .allocate_on_stream(40 * MIB, strata_alloc::StreamId(0), &at(40, "matmul"))
        .unwrap_err();
    let after = a.memory_stats();
    assert_eq!(after.allocated_bytes, before.allocated_bytes);
    assert_eq!(after.allocation, before.allocation);
    assert_eq!(after.num_ooms, 1);
    assert_eq!(
        after.num_alloc_retries, 1,
        "one full flush and retry before giving up"
    );
    a.check_consistency().unwrap();

    let CachingError::OutOfMemory(report) = err else {
        panic!("expected out-of-memory, got {err:?}");
    };
    assert_eq!(report.device, "virtual");
    assert_eq!(report.requested, 40 * MIB);
    assert_eq!(report.rounded, 40 * MIB);
    assert_eq!(report.segment_size, 40 * MIB);
    assert_eq!(report.allocated, 30 * MIB + 9 * MIB + 512);
    // The flush released the (wholly free) nothing; 30 + 20 + 2 MiB are still reserved.
    assert_eq!(report.reserved, 52 * MIB);
    assert_eq!(report.reserved_unallocated, 52 * MIB - report.allocated);
    assert_eq!(report.device_total, 64 * MIB);
    assert_eq!(report.device_free, 12 * MIB);
    assert_eq!(report.largest_free_block, 11 * MIB);
    assert_eq!(report.limit, None);
    assert_eq!(report.top_sites[0].site, at(10, "weights"));
    assert_eq!(report.top_sites[1].site, at(20, "activations"));
    assert_eq!(report.top_sites[1].count, 3);
    assert_eq!(report.top_sites[1].bytes, 9 * MIB);
    let text = report.to_string();
    for needle in [
        "out of memory on virtual",
        "40.00 MiB",
        "64.00 MiB in total",
        "12.00 MiB is free",
        "is allocated to live tensors",
        "reserved but unallocated",
        "largest free block is 11.00 MiB",
        "train.rs:10 (weights)",
        "train.rs:20 (activations)",
        "What to try",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert_eq!(a.last_oom_report().as_ref(), Some(&*report));

    // Through the DeviceAllocator trait the error is the crate's AllocError.
    let e = a.allocate(40 * MIB, &at(41, "matmul")).unwrap_err();
    match &e {
        AllocError::OutOfMemory {
            device,
            requested,
            allocated,
            limit,
            report: Some(full),
        } => {
            assert_eq!(
                (device.as_str(), *requested, *allocated, *limit),
                ("virtual", 40 * MIB, 39 * MIB + 512, None)
            );
            assert_eq!(
                e.to_string(),
                full.to_string(),
                "the message is the full report"
            );
        }
        other => panic!("expected an out-of-memory with its report, got {other:?}"),
    }
    assert_eq!(a.memory_stats().num_ooms, 2);

    // After freeing, the same request succeeds.
    // SAFETY: `w` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(w) };
    let big = a.allocate(40 * MIB, &at(42, "matmul")).unwrap();
    a.check_consistency().unwrap();
    // SAFETY: `big`, `small` and every block in `x` came from `a`'s `allocate` and are not used
    // again.
    unsafe {
        a.deallocate(big);
        a.deallocate(small);
        for b in x {
            a.deallocate(b);
        }
    }
    a.empty_cache().unwrap();
    assert_eq!(a.memory_reserved(), 0);
}

#[test]
fn a_miss_flushes_the_cache_and_retries() {
    let a = CachingAllocator::new(VirtualBacking::new(21 * MIB));
    let b = a.allocate(3 * MIB, &at(1, "x")).unwrap();
    // SAFETY: `b` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(b) };
    assert_eq!(a.memory_reserved(), 20 * MIB);
    // A small request needs a 2 MiB segment: only after the cached 20 MiB go does it fit.
    let s = a.allocate(100, &at(2, "y")).unwrap();
    let st = a.memory_stats();
    assert_eq!(st.num_alloc_retries, 1);
    assert_eq!(st.num_ooms, 0);
    assert_eq!(st.num_device_free, 1);
    assert_eq!(a.memory_reserved(), 2 * MIB);
    // SAFETY: `s` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(s) };
    a.check_consistency().unwrap();
}

/// Fills `segments` 20 MiB segments as [9 MiB free][pin][10 MiB - 512 free] and returns the
/// pins.
fn fragment<B: strata_alloc::Backing>(a: &CachingAllocator<B>, segments: u32) -> Vec<Block> {
    let mut freed = Vec::new();
    let mut pins = Vec::new();
    for i in 0..segments {
        freed.push(a.allocate(9 * MIB, &at(i, "a")).unwrap());
        pins.push(a.allocate(MIB + 512, &at(i, "pin")).unwrap());
        freed.push(a.allocate(10 * MIB - 512, &at(i, "c")).unwrap());
    }
    for b in freed {
        // SAFETY: every block in `freed` came from `a`'s `allocate`, and the loop takes each
        // once.
        unsafe { a.deallocate(b) };
    }
    a.check_consistency().unwrap();
    pins
}

#[test]
fn fragmentation_advice_appears_when_reserved_memory_is_unusable() {
    let a = CachingAllocator::new(VirtualBacking::new(60 * MIB));
    let pins = fragment(&a, 3);
    assert_eq!(a.memory_reserved(), 60 * MIB);
    let err = a.allocate_on_stream(12 * MIB, Default::default(), &at(9, "big"));
    let Err(CachingError::OutOfMemory(r)) = err else {
        panic!("expected out-of-memory");
    };
    assert!(r.reserved_unallocated > 50 * MIB);
    assert_eq!(r.largest_free_block, 10 * MIB - 512);
    assert!(r.to_string().contains("expandable_segments:True"), "{r}");
    for y in pins {
        // SAFETY: every block in `pins` came from `a`'s `allocate`, and the loop takes each
        // once.
        unsafe { a.deallocate(y) };
    }
    // With expandable segments the free pieces of neighbouring pages merge, and it fits.
    let e = CachingAllocator::with_config(
        VirtualBacking::new(60 * MIB),
        AllocatorConfig::parse("expandable_segments:True").unwrap(),
    );
    let pins = fragment(&e, 3);
    assert_eq!(e.memory_reserved(), 60 * MIB);
    let big = e.allocate(12 * MIB, &at(9, "big")).unwrap();
    e.check_consistency().unwrap();
    // SAFETY: `big` came from `e`'s `allocate` and is not used again.
    unsafe { e.deallocate(big) };
    for y in pins {
        // SAFETY: every block in `pins` came from `e`'s `allocate`, and the loop takes each
        // once.
        unsafe { e.deallocate(y) };
    }
}

#[test]
fn the_limit_bounds_reserved_memory() {
    let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
    a.set_memory_limit(Some(50 * MIB));
    assert_eq!(a.memory_limit(), Some(50 * MIB));
    let mut held = Vec::new();
    let mut ooms = 0;
    for i in 0..200usize {
        let size = [100, 3 * MIB, 700 << 10, 12 * MIB, 5 * MIB][i % 5];
        match a.allocate(size, &at(i as u32, "loop")) {
            Ok(b) => held.push(b),
            Err(AllocError::OutOfMemory { limit, .. }) => {
                assert_eq!(limit, Some(50 * MIB));
                ooms += 1;
                // Free the oldest half and go on.
                let n = held.len() / 2;
                for b in held.drain(..n) {
                    // SAFETY: every block in `held` came from `a`'s `allocate`; draining removes
                    // each, so each is returned once.
                    unsafe { a.deallocate(b) };
                }
            }
            Err(e) => panic!("{e}"),
        }
        assert!(a.memory_reserved() <= 50 * MIB);
        assert!(a.max_memory_reserved() <= 50 * MIB);
    }
    assert!(ooms > 0);
    a.check_consistency().unwrap();
    a.set_memory_limit(None);
    let big = a.allocate(200 * MIB, &at(0, "big")).unwrap();
    // SAFETY: `big` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(big) };
    for b in held {
        // SAFETY: every block in `held` came from `a`'s `allocate`, and the loop takes each
        // once.
        unsafe { a.deallocate(b) };
    }
}

#[test]
fn the_fraction_is_of_the_device_total() {
    let a = CachingAllocator::new(VirtualBacking::new(100 * MIB));
    a.set_per_process_memory_fraction(0.25).unwrap();
    assert_eq!(a.memory_limit(), Some(25 * MIB));
    let x = a.allocate(3 * MIB, &at(1, "a")).unwrap();
    let y = a.allocate(3 * MIB, &at(2, "b")).unwrap();
    assert_eq!(a.memory_reserved(), 20 * MIB);
    let err = a.allocate(15 * MIB, &at(3, "c")).unwrap_err();
    assert!(matches!(err, AllocError::OutOfMemory { limit: Some(l), .. } if l == 25 * MIB));
    let r = a.last_oom_report().unwrap();
    assert!(r.to_string().contains("at most 25.00 MiB"), "{r}");
    assert!(r.to_string().contains("raise the memory limit"));
    let e = a.set_per_process_memory_fraction(1.5).unwrap_err();
    assert_eq!(e.key, "per_process_memory_fraction");
    assert!(a.set_per_process_memory_fraction(f64::NAN).is_err());
    // From the settings string too.
    let c = CachingAllocator::with_config(
        VirtualBacking::new(100 * MIB),
        AllocatorConfig::parse("per_process_memory_fraction:0.5").unwrap(),
    );
    assert_eq!(c.memory_limit(), Some(50 * MIB));
    // SAFETY: `x` and `y` came from `a`'s `allocate` and are not used again.
    unsafe {
        a.deallocate(x);
        a.deallocate(y);
    }
}

#[test]
fn the_backing_capacity_is_a_recoverable_oom_on_the_host_too() {
    let a = CachingAllocator::new(HostBacking::with_capacity(32 * MIB));
    let x = a.allocate(20 * MIB, &at(1, "a")).unwrap();
    let err = a.allocate(20 * MIB, &at(2, "b")).unwrap_err();
    assert!(matches!(err, AllocError::OutOfMemory { requested, .. } if requested == 20 * MIB));
    assert!(err.to_string().contains("out of memory on cpu"));
    // SAFETY: `x` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(x) };
    let y = a.allocate(20 * MIB, &at(3, "c")).unwrap();
    // SAFETY: `y` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(y) };
}

#[test]
fn it_is_a_drop_in_device_allocator() {
    let a: Arc<dyn DeviceAllocator> = Arc::new(CachingAllocator::new(HostBacking::new()));
    assert_eq!(a.name(), "caching");
    let b = a.allocate(1000, &at(1, "zeros")).unwrap();
    assert_eq!(b.size(), 1000);
    assert_eq!(b.ptr().as_ptr() as usize % strata_alloc::BLOCK_ALIGN, 0);
    // SAFETY: host blocks are real, writable memory of at least `size` bytes.
    unsafe { std::ptr::write_bytes(b.ptr().as_ptr(), 0xAB, b.size()) };
    assert_eq!(a.memory_allocated(), 1024);
    assert_eq!(a.max_memory_allocated(), 1024);
    // SAFETY: `b` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(b) };
    assert_eq!(a.memory_allocated(), 0);
    a.reset_peak_memory_stats();
    assert_eq!(a.max_memory_allocated(), 0);
    fn send_sync<T: Send + Sync>() {}
    send_sync::<CachingAllocator<HostBacking>>();
    send_sync::<CachingAllocator<VirtualBacking>>();
}

#[test]
fn config_from_env() {
    // Only this test touches the variable.
    std::env::set_var(
        "STRATA_ALLOC_CONF",
        "expandable_segments:True,max_split_size_mb:64",
    );
    let c = AllocatorConfig::from_env().unwrap();
    assert!(c.expandable_segments);
    assert_eq!(c.max_split_size, Some(64 * MIB));
    std::env::set_var("STRATA_ALLOC_CONF", "expandable_segments:yes");
    let e = AllocatorConfig::from_env().unwrap_err();
    assert_eq!(e.key, "expandable_segments");
    std::env::remove_var("STRATA_ALLOC_CONF");
    assert_eq!(
        AllocatorConfig::from_env().unwrap(),
        AllocatorConfig::default()
    );

    // A CUDA device falls back to PyTorch's variables, newest name first, so a PyTorch
    // user's settings carry over; strata's own variable still wins.
    let cuda = strata_alloc::caching::CUDA_ENV_VARS;
    std::env::set_var("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:32");
    assert_eq!(
        AllocatorConfig::from_env_vars(&cuda)
            .unwrap()
            .max_split_size,
        Some(32 * MIB)
    );
    std::env::set_var("PYTORCH_ALLOC_CONF", "expandable_segments:True");
    let c = AllocatorConfig::from_env_vars(&cuda).unwrap();
    assert!(c.expandable_segments && c.max_split_size.is_none());
    std::env::set_var("STRATA_ALLOC_CONF", "max_split_size_mb:64");
    let c = AllocatorConfig::from_env_vars(&cuda).unwrap();
    assert!(!c.expandable_segments && c.max_split_size == Some(64 * MIB));
    std::env::remove_var("STRATA_ALLOC_CONF");
    std::env::set_var("PYTORCH_ALLOC_CONF", "expandable_segments:maybe");
    let e = AllocatorConfig::from_env_vars(&cuda).unwrap_err();
    assert!(
        e.to_string().contains("read from PYTORCH_ALLOC_CONF"),
        "{e}"
    );
    std::env::remove_var("PYTORCH_ALLOC_CONF");
    std::env::remove_var("PYTORCH_CUDA_ALLOC_CONF");
}
