//! The caching allocator over real device memory (`CudaBacking`): segments, expandable
//! segments, limits and out-of-memory, cross-stream reuse, and PyTorch's own CUDA runs
//! replayed on the device.
//!
//! Every test needs a CUDA device: they are ignored by `cargo test` and run by
//! `scripts/gpu-check`'s runner with `--ignored`, where they fail if no device is found.

#![cfg(feature = "cuda")]

mod goldens;

use strata_alloc::backing::cuda::{device_count, CudaBacking};
use strata_alloc::caching::TraceAction;
use strata_alloc::offline::replay_recorded_on;
use strata_alloc::{AllocatorConfig, Backing, CachingAllocator, DeviceAllocator, Site, StreamId};

const MIB: usize = 1 << 20;

/// Device 0's backing; fails the test when there is no device.
fn device() -> CudaBacking {
    let count = device_count().unwrap_or_else(|e| panic!("no CUDA device to test on: {e}"));
    assert!(count > 0, "no CUDA device to test on: the driver sees none");
    CudaBacking::new(0).unwrap_or_else(|e| panic!("cuda:0: {e}"))
}

fn allocator(settings: &str) -> CachingAllocator<CudaBacking> {
    let config = AllocatorConfig::parse(settings).expect("settings");
    CachingAllocator::with_config(device(), config)
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn segments_come_from_device_memory_and_go_back() {
    let a = allocator("");
    let (free_before, total) = a.backing().mem_info();
    assert!(total > 0 && free_before <= total);
    let site = Site::unknown("gpu test");
    let small = a.allocate(1000, &site).expect("room");
    let large = a.allocate(30 * MIB, &site).expect("room");
    assert_eq!(a.memory_allocated(), 1024 + 30 * MIB);
    assert_eq!(a.memory_reserved(), 2 * MIB + 30 * MIB);
    let (free_during, _) = a.backing().mem_info();
    assert!(
        free_during + 32 * MIB <= free_before + 2 * MIB,
        "{free_during} {free_before}"
    );
    a.check_consistency().expect("consistent");
    // SAFETY: both blocks came from `a` and are not used again.
    unsafe {
        a.deallocate(small);
        a.deallocate(large);
    }
    assert_eq!(a.memory_allocated(), 0);
    assert_eq!(a.memory_reserved(), 32 * MIB);
    a.empty_cache().expect("released");
    assert_eq!(a.memory_reserved(), 0);
    let stats = a.memory_stats();
    assert_eq!(stats.segment.all.peak, 2);
    assert_eq!(stats.num_device_free, 2);
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn expandable_segments_map_and_unmap_device_pages() {
    let a = allocator("expandable_segments:True");
    let granularity = a.backing().granularity().expect("the virtual-memory API");
    assert!(granularity > 0 && (20 * MIB).is_multiple_of(granularity));
    let site = Site::unknown("gpu test");
    let blocks: Vec<_> = [30, 50, 7]
        .iter()
        .map(|m| a.allocate(m * MIB, &site).expect("room"))
        .collect();
    // Pages of 20 MiB in the large pool, mapped as the segment grows.
    assert_eq!(a.memory_reserved(), 100 * MIB);
    a.check_consistency().expect("consistent");
    for b in blocks {
        // SAFETY: each block came from `a` and is not used again.
        unsafe { a.deallocate(b) };
    }
    a.empty_cache().expect("unmapped");
    assert_eq!(a.memory_reserved(), 0);
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn a_limit_runs_out_with_the_devices_memory_in_the_report() {
    let a = allocator("");
    a.set_memory_limit(Some(64 * MIB));
    let site = Site::unknown("gpu test");
    let mut held = Vec::new();
    let err = loop {
        match a.allocate_on_stream(24 * MIB, StreamId::DEFAULT, &site) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
        assert!(held.len() < 10, "the limit was not enforced");
    };
    assert_eq!(held.len(), 2);
    let report = a.last_oom_report().expect("a report");
    assert!(report.device_total > 0 && report.device_free <= report.device_total);
    assert!(err.to_string().contains("out of memory"), "{err}");
    assert_eq!(a.memory_stats().num_ooms, 1);
    for b in held {
        // SAFETY: each block came from `a` and is not used again.
        unsafe { a.deallocate(b) };
    }
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn a_block_used_on_another_stream_waits_for_its_event() {
    use strata_alloc::backing::cuda::{live_streams, CudaStream};
    let a = allocator("");
    let side_stream = CudaStream::new(0).expect("a stream");
    let side = side_stream.id();
    assert!(live_streams(0).contains(&side));
    let site = Site::unknown("gpu test");
    let b = a.allocate(4 * MIB, &site).expect("room");
    let addr = b.ptr().as_ptr() as usize;
    assert!(a.record_stream(&b, side));
    // SAFETY: `b` came from `a`; the side stream has no work that touches it.
    unsafe { a.deallocate(b) };
    a.backing().synchronize_stream(side).expect("synchronized");
    // The event has completed: the next request of the size takes the same block.
    let again = a.allocate(4 * MIB, &site).expect("room");
    assert_eq!(again.ptr().as_ptr() as usize, addr);
    // SAFETY: as above.
    unsafe { a.deallocate(again) };
    drop(side_stream);
    // A stream that is gone is an error, not a handle the driver is given.
    assert!(!live_streams(0).contains(&side));
    assert!(a.backing().synchronize_stream(side).is_err());
    assert!(a.backing().record_event(StreamId(12345)).is_err());
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn pytorchs_runs_replayed_on_device_memory() {
    let _ = device();
    let mut differences = Vec::new();
    println!("program.setting: strata on the device / PyTorch (allocated peak, reserved peak, segment peak, retries, ooms)");
    for program in goldens::PROGRAMS {
        for setting in goldens::SETTINGS {
            let name = format!("{program}.{setting}");
            let (snapshot, figures) = goldens::golden(program, setting);
            let stat = |k: &str| goldens::stat(&figures, k);
            let limit = figures["limit_bytes"].as_u64();
            let r = replay_recorded_on(&snapshot, 0, limit, device(), &mut |_, _| {})
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let ours = [
                r.peak_allocated,
                r.peak_reserved,
                r.peak_segments,
                r.alloc_retries,
                r.ooms.len() as u64,
            ];
            let theirs = [
                stat("allocated_bytes.all.peak"),
                stat("reserved_bytes.all.peak"),
                stat("segment.all.peak"),
                stat("num_alloc_retries"),
                stat("num_ooms"),
            ];
            println!("{name}: {ours:?} / {theirs:?}");
            if ours != theirs {
                differences.push(name.clone());
            }
            let traced = snapshot.device_traces[0]
                .iter()
                .filter(|e| e.action == TraceAction::Oom)
                .count();
            assert_eq!(traced as u64, stat("num_ooms"), "{name}");
        }
    }
    assert!(
        differences.is_empty(),
        "differ from PyTorch: {differences:?}"
    );
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn a_missing_device_is_an_error_naming_the_count() {
    let count = device_count().expect("a driver");
    let e = CudaBacking::new(count).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("no CUDA device {count}: this machine has {count}")
    );
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn the_current_stream_chooses_the_pool() {
    use strata_alloc::backing::cuda::{current_stream, set_current_stream, CudaStream};
    let a = allocator("");
    let side = CudaStream::new(0).expect("a stream");
    let site = Site::unknown("gpu test");
    let before = set_current_stream(0, side.id());
    let on_side = a.allocate(MIB, &site).expect("room");
    assert_eq!(a.segments()[0].stream, side.id());
    // SAFETY: the block came from `a` and is not used again.
    unsafe { a.deallocate(on_side) };
    set_current_stream(0, before);
    assert_eq!(current_stream(0), StreamId::DEFAULT);
    // The side stream's cached block is not the default stream's: a second segment.
    let on_default = a.allocate(MIB, &site).expect("room");
    assert_eq!(a.memory_reserved(), 4 * MIB);
    // SAFETY: as above.
    unsafe { a.deallocate(on_default) };
    a.empty_cache().expect("released");
    assert_eq!(a.memory_reserved(), 0);
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn events_order_streams_and_time_their_work() {
    use cudarc::driver::sys;
    use strata_alloc::backing::cuda::{CudaEvent, CudaStream};
    let a = allocator("");
    let (first, second) = (
        CudaStream::new(0).expect("a stream"),
        CudaStream::new(0).expect("a stream"),
    );
    let (start, end) = (
        CudaEvent::new(0, true).expect("an event"),
        CudaEvent::new(0, true).expect("an event"),
    );
    let site = Site::unknown("gpu test");
    let bytes = 256 * MIB;
    let b = a.allocate(bytes, &site).expect("room");
    start.record(&first).expect("recorded");
    for value in 0..8u8 {
        // SAFETY: the block holds `bytes` bytes of device memory owned by this test; the
        // stream belongs to the same context, which `record` bound on this thread.
        let r = unsafe {
            sys::cuMemsetD8Async(
                b.ptr().as_ptr() as usize as sys::CUdeviceptr,
                value,
                bytes,
                first.id().0 as usize as sys::CUstream,
            )
        };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    }
    end.record(&first).expect("recorded");
    second.wait_stream(&first).expect("ordered");
    second.synchronize().expect("synchronized");
    // `second` waited for everything `first` had queued, `end` included.
    assert!(end.query().expect("queried"));
    assert!(first.query().expect("queried"));
    let ms = start.elapsed_ms(&end).expect("timed");
    assert!(ms > 0.0, "{ms} ms for 2 GiB of memset");
    let untimed = CudaEvent::new(0, false).expect("an event");
    assert!(untimed.elapsed_ms(&end).is_err());
    // SAFETY: the work that used the block has finished (synchronized above).
    unsafe { a.deallocate(b) };
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn pinned_blocks_are_page_locked_by_the_driver() {
    use cudarc::driver::sys;
    use strata_alloc::PinnedHostAllocator;
    let _ = device();
    let pinned = PinnedHostAllocator::new();
    assert!(pinned.is_page_locked());
    let site = Site::unknown("gpu test");
    let b = pinned.allocate(3 * MIB, &site).expect("room");
    let mut flags = 0u32;
    // SAFETY: `b` is live host memory from the driver; `flags` is a valid out-pointer.
    let r = unsafe { sys::cuMemHostGetFlags(&mut flags, b.ptr().as_ptr().cast()) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "not page-locked memory");
    // SAFETY: the block came from `pinned` and is not used again.
    unsafe { pinned.deallocate(b) };
    pinned.empty_cache();
    assert_eq!(pinned.stats().allocated_bytes.current, 0);
}
