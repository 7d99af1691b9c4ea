//! The memory API and streams of a CUDA device, on a real one.
//!
//! Every test needs a CUDA device: they are ignored by `cargo test` and run by
//! `scripts/gpu-check`'s runner with `--ignored`, where they fail if no device is found.

#![cfg(feature = "cuda")]

use strata_core::{cuda, memory, Device};

fn device() -> Device {
    let n = cuda::device_count().unwrap_or_else(|e| panic!("no CUDA device to test on: {e}"));
    assert!(n > 0, "no CUDA device to test on: the driver sees none");
    Device::Cuda(0)
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn every_memory_function_answers_for_a_cuda_device() {
    let gpu = device();
    assert!(cuda::is_available());
    memory::reset_peak_memory_stats(gpu).expect("reset");
    assert_eq!(memory::memory_allocated(gpu).expect("allocated"), 0);
    let (free, total) = memory::mem_get_info(gpu).expect("mem_get_info");
    assert!(total > 0 && free <= total);
    memory::set_per_process_memory_fraction(0.5, gpu).expect("fraction");
    assert_eq!(memory::memory_limit(gpu).expect("limit"), Some(total / 2));
    memory::set_memory_limit(None, gpu).expect("no limit");
    let summary = memory::memory_summary(gpu, true).expect("summary");
    assert!(summary.contains("Allocated memory"), "{summary}");
    memory::empty_cache(gpu).expect("empty_cache");
    assert_eq!(memory::memory_reserved(gpu).expect("reserved"), 0);
    let snap = memory::snapshot(gpu).expect("snapshot");
    assert!(snap.allocator_settings.ties_by_address);
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn streams_scope_events_order_and_time() {
    let _ = device();
    let side = cuda::Stream::new(0).expect("a stream");
    let default = cuda::current_stream(0).expect("current");
    assert_eq!(default.id(), strata_alloc::StreamId::DEFAULT);
    cuda::with_stream(&side, || {
        assert_eq!(cuda::current_stream(0).expect("current").id(), side.id());
    });
    assert_eq!(cuda::current_stream(0).expect("current").id(), default.id());
    let (start, end) = (
        cuda::Event::new(0, true).expect("event"),
        cuda::Event::new(0, true).expect("event"),
    );
    start.record(&side).expect("recorded");
    end.record(&side).expect("recorded");
    end.synchronize().expect("synchronized");
    assert!(start.elapsed_time(&end).expect("timed") >= 0.0);
    let marker = side.record_event().expect("event");
    default.wait_stream(&side).expect("ordered");
    marker.wait(&default).expect("ordered");
    cuda::synchronize(0).expect("synchronized");
    assert!(side.query().expect("queried") && marker.query().expect("queried"));
}
