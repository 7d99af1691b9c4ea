//! The memory API as a user meets it: tensors take their bytes from a caching allocator,
//! freed blocks are reused, limits make out-of-memory an `Err` that names who holds the
//! memory, and nothing changes after it.

use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostBacking, HostCachingAllocator};
use strata_core::{memory, with_allocator, DType, Device, Error, Tensor};

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
