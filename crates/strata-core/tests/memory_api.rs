//! The memory API as a user meets it: tensors take their bytes from a caching allocator,
//! freed blocks are reused, limits make out-of-memory an `Err` that names who holds the
//! memory, and nothing changes after it.

use std::sync::Arc;

use strata_alloc::{Category, DeviceAllocator, HostBacking, HostCachingAllocator};
use strata_core::{allocating_as, memory, with_allocator, DType, Device, Error, Tensor};

const MIB: usize = 1 << 20;

fn caching() -> (Arc<HostCachingAllocator>, Arc<dyn DeviceAllocator>) {
    let a = Arc::new(HostCachingAllocator::new(HostBacking::new()));
    let d: Arc<dyn DeviceAllocator> = a.clone();
    (a, d)
}

#[test]
fn default_cpu_allocator_caches_and_reports() {
    // Other tests in this binary may allocate concurrently: assert relations, not exact bytes.
    let t = Tensor::zeros(&[3 * MIB / 4], DType::F32).unwrap(); // 3 MiB, large pool
    let allocated = memory::memory_allocated(Device::Cpu).unwrap();
    let reserved = memory::memory_reserved(Device::Cpu).unwrap();
    assert!(allocated >= 3 * MIB, "{allocated}");
    assert!(reserved >= allocated);
    assert!(memory::max_memory_allocated(Device::Cpu).unwrap() >= allocated);
    assert!(memory::max_memory_reserved(Device::Cpu).unwrap() >= reserved);
    let stats = memory::memory_stats_map(Device::Cpu).unwrap();
    for key in [
        "allocated_bytes.all.current",
        "reserved_bytes.large_pool.peak",
        "num_alloc_retries",
        "num_ooms",
    ] {
        assert!(stats.contains_key(key), "missing {key}");
    }
    let typed = memory::memory_stats(Device::Cpu).unwrap();
    assert!(typed.allocated_bytes.all.current >= 3 * MIB as i64);
    let summary = memory::memory_summary(Device::Cpu, false).unwrap();
    assert!(summary.contains("Allocated memory") && summary.contains("Reserved memory"));
    let sites = memory::live_allocations(Device::Cpu).unwrap();
    assert!(
        sites
            .iter()
            .any(|s| s.site.file.ends_with("memory_api.rs") && s.bytes >= 3 * MIB),
        "this file's allocation is listed by site: {sites:?}"
    );
    drop(t);
    memory::empty_cache(Device::Cpu).unwrap();
    assert!(memory::mem_get_info(Device::Cpu).unwrap().1 > 0);
    assert!(matches!(
        memory::memory_allocated(Device::Cuda(0)),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn freed_blocks_are_reused_without_growing_reserved() {
    let (cache, dynamic) = caching();
    with_allocator(&dynamic, || {
        let a = Tensor::ones(&[1 << 20], DType::F32).unwrap(); // 4 MiB
        let b = Tensor::ones(&[1 << 20], DType::F32).unwrap();
        let reserved = cache.memory_reserved();
        for _ in 0..50 {
            let c = a.add(&b).unwrap();
            drop(c);
        }
        assert_eq!(
            cache.memory_reserved(),
            reserved,
            "the loop reuses one cached block"
        );
        assert_eq!(cache.memory_allocated(), 2 * 4 * MIB);
    });
    assert_eq!(cache.memory_allocated(), 0);
}

#[test]
fn out_of_memory_is_an_error_that_changes_nothing() {
    let (cache, dynamic) = caching();
    cache.set_memory_limit(Some(64 * MIB));
    with_allocator(&dynamic, || {
        let held = Tensor::ones(&[6 * MIB], DType::F32).unwrap(); // 24 MiB
        let scratch = Tensor::ones(&[MIB], DType::F32).unwrap();
        drop(scratch); // cached, releasable
        let allocated = cache.memory_allocated();
        let version = held.version();
        let stats = cache.memory_stats_map();
        assert_eq!(stats["num_ooms"], 0);

        let err = match Tensor::cat(&[&held, &held], 0) {
            Ok(_) => panic!("48 MiB cannot fit under a 64 MiB limit beside 24 MiB"),
            Err(e) => e,
        };
        let text = err.to_string();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{text}");
        for needle in [
            "48.00 MiB",
            "reserved but unallocated",
            "memory_api.rs",
            "smaller batch",
        ] {
            assert!(text.contains(needle), "report lacks {needle:?}:\n{text}");
        }
        assert_eq!(cache.memory_allocated(), allocated, "nothing leaked");
        assert_eq!(held.version(), version);
        assert_eq!(held.to_vec::<f32>().unwrap()[0], 1.0);
        let stats = cache.memory_stats_map();
        assert_eq!(stats["num_ooms"], 1);
        assert!(cache.memory_reserved() <= 64 * MIB);
        // After the failure the allocator still works.
        let small = Tensor::zeros(&[MIB], DType::F32).unwrap();
        assert_eq!(small.numel(), MIB);
    });
}

#[test]
fn a_scoped_category_counts_the_memory_from_its_first_byte_and_ends_with_the_scope() {
    let caching = Arc::new(HostCachingAllocator::new(HostBacking::new()));
    let routed: Arc<dyn DeviceAllocator> = caching.clone();
    with_allocator(&routed, || {
        let (input, inner, after) = allocating_as(Category::Input, || {
            let input = Tensor::zeros(&[256], DType::F32).unwrap();
            let inner = allocating_as(Category::Other, || {
                Tensor::zeros(&[128], DType::F32).unwrap()
            });
            // The outer scope applies again once the inner one has ended.
            let after = Tensor::zeros(&[64], DType::F32).unwrap();
            (input, inner, after)
        });
        let plain = Tensor::zeros(&[32], DType::F32).unwrap();
        assert_eq!(input.memory_category(), Category::Input);
        assert_eq!(inner.memory_category(), Category::Other);
        assert_eq!(after.memory_category(), Category::Input);
        assert_eq!(plain.memory_category(), Category::Temporary);
        let stats = caching.memory_stats();
        let bytes = |c| stats.category_bytes.get(c).current;
        assert_eq!(bytes(Category::Input), 1024 + 512);
        assert_eq!(bytes(Category::Other), 512);
        assert_eq!(bytes(Category::Temporary), 512);
        // The peak was reached by the last allocation: the mix at the peak has each block
        // under its category.
        let at_peak = stats.categories_at_peak_with(&Default::default());
        assert_eq!(at_peak["input"], 1024 + 512);
        assert_eq!(at_peak["temporary"], 512);
    });
}

#[test]
fn another_thread_never_sees_a_scoped_allocation_as_a_temporary() {
    let caching = Arc::new(HostCachingAllocator::new(HostBacking::new()));
    let routed: Arc<dyn DeviceAllocator> = caching.clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        let done = done.clone();
        std::thread::spawn(move || {
            with_allocator(&routed, || {
                for _ in 0..3000 {
                    let batch = allocating_as(Category::Input, || {
                        Tensor::empty(&[32, 784], DType::F32).unwrap()
                    });
                    drop(batch);
                }
            });
            done.store(true, std::sync::atomic::Ordering::Release);
        })
    };
    let mut reads = 0u64;
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        let stats = caching.memory_stats();
        assert_eq!(stats.category_bytes.get(Category::Temporary).current, 0);
        reads += 1;
    }
    worker.join().unwrap();
    assert!(reads > 0);
}
