//! Per-device allocator routing.

use super::*;
use strata_alloc::HostAllocator;

fn host() -> Arc<dyn DeviceAllocator> {
    Arc::new(HostAllocator::new())
}

#[test]
fn overrides_apply_to_their_own_device_only() {
    let (cpu, meta) = (host(), host());
    with_device_allocator(Device::Meta, &meta, || {
        assert!(Arc::ptr_eq(
            &current_allocator(Device::Meta).unwrap(),
            &meta
        ));
        // The CPU keeps its default while only the meta device is routed.
        let default = current_allocator(Device::Cpu).unwrap();
        assert!(!Arc::ptr_eq(&default, &meta));
        with_allocator(&cpu, || {
            assert!(Arc::ptr_eq(&current_allocator(Device::Cpu).unwrap(), &cpu));
            assert!(Arc::ptr_eq(
                &current_allocator(Device::Meta).unwrap(),
                &meta
            ));
        });
        assert!(Arc::ptr_eq(
            &current_allocator(Device::Cpu).unwrap(),
            &default
        ));
    });
    // Outside the override the meta device has its own default allocator.
    let default_meta = current_allocator(Device::Meta).unwrap();
    assert!(!Arc::ptr_eq(&default_meta, &meta));
    assert_eq!(
        default_meta.name(),
        current_allocator(Device::Meta).unwrap().name()
    );
}

#[test]
fn cuda_indices_are_routed_separately_and_unrouted_ones_refuse() {
    let zero = host();
    with_device_allocator(Device::Cuda(0), &zero, || {
        assert!(Arc::ptr_eq(
            &current_allocator(Device::Cuda(0)).unwrap(),
            &zero
        ));
        let err = current_allocator(Device::Cuda(1)).unwrap_err().to_string();
        assert!(err.contains("CUDA"), "{err}");
    });
}

#[test]
fn the_innermost_override_wins_and_unwinding_restores_the_outer_one() {
    let (outer, inner) = (host(), host());
    with_allocator(&outer, || {
        with_allocator(&inner, || {
            assert!(Arc::ptr_eq(
                &current_allocator(Device::Cpu).unwrap(),
                &inner
            ));
        });
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_allocator(&inner, || panic!("unwinds through the override"))
        }));
        assert!(caught.is_err());
        assert!(Arc::ptr_eq(
            &current_allocator(Device::Cpu).unwrap(),
            &outer
        ));
    });
}

#[test]
fn an_override_on_one_thread_leaves_the_others_on_their_default() {
    let routed = host();
    let default = current_allocator(Device::Cpu).unwrap();
    let (installed, done) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|s| {
        s.spawn(|| {
            with_allocator(&routed, || {
                installed.wait();
                done.wait();
            })
        });
        // While the other thread holds its override (so overrides exist in the process),
        // this thread, which installed none, still allocates from the default.
        installed.wait();
        assert!(Arc::ptr_eq(
            &current_allocator(Device::Cpu).unwrap(),
            &default
        ));
        with_allocator(&routed, || {
            assert!(Arc::ptr_eq(
                &current_allocator(Device::Cpu).unwrap(),
                &routed
            ));
        });
        done.wait();
    });
    assert!(Arc::ptr_eq(
        &current_allocator(Device::Cpu).unwrap(),
        &default
    ));
}
