//! The findings no PyTorch tool gives, each on its pitfall and its fix: views that keep
//! storages alive, hidden copies, `empty_cache` in a loop, devices that do not match,
//! fragmentation; and a shadowed binding that keeps a tensor alive to the end of its scope,
//! measured with the memory tracker.

mod common;

use strata_core::autocast::with_autocast;
use strata_core::device::DefaultDevice;
use strata_core::{memory, Category, DType, Device, Tensor};
use strata_nn::module::shared;
use strata_nn::{Linear, Module};
use strata_profile::{
    check_devices, fragmentation, CopyKind, CopyWatch, EmptyCacheWatch, FindingKind, MemoryMonitor,
    MemoryTracker, ProfileError, ViewWatch,
};

type Res = Result<(), Box<dyn std::error::Error>>;

const MIB: usize = 1 << 20;

/// A loader-like step: a large batch of rows, of which only the first row is kept.
fn first_row(rows: usize, cols: usize) -> strata_core::Result<Tensor> {
    let batch = Tensor::zeros(&[rows, cols], DType::F32)?;
    batch.select(0, 0) // a small view of the large batch
}

#[test]
fn a_small_view_keeping_a_large_storage() -> Res {
    let _serial = common::serial();
    let watch = ViewWatch::start();
    let before = memory::memory_allocated(Device::Cpu)?;
    let row = first_row(400, 2560)?; // a 10 KiB row of a 3.9 MiB batch
    assert!(memory::memory_allocated(Device::Cpu)? - before >= 400 * 2560 * 4);
    let found = watch.report(MIB, 4);
    println!("{}", found[0]);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].kind, FindingKind::ViewRetention);
    assert!(found[0].message.starts_with("a 10.0 KiB view made at"));
    assert!(found[0].message.contains("findings.rs"));
    assert!(found[0].message.contains("keeps a 3.9 MiB storage alive"));
    // The fix: a copy of its own, and the view dropped: the batch is freed.
    let row_copy = row.deep_clone()?;
    drop(row);
    assert!(memory::memory_allocated(Device::Cpu)? - before < 16 * 1024);
    assert!(watch.report(MIB, 4).is_empty());
    // A view whose base is still held is not the one keeping it alive.
    let batch = Tensor::zeros(&[400, 2560], DType::F32)?;
    let view = batch.select(0, 0)?;
    assert!(watch.report(MIB, 4).is_empty());
    drop((batch, view, row_copy));
    Ok(())
}

#[test]
fn copies_hidden_in_reshape_contiguous_and_casts() -> Res {
    let _serial = common::serial();
    let x = Tensor::randn(&[128, 64], DType::F32)?;
    let watch = CopyWatch::start();
    let flat = x.reshape(&[-1])?; // contiguous: a view, no copy
    assert!(watch.usage().is_empty());
    let flat_t = x.t()?.reshape(&[-1])?; // transposed: reshape copies
    let dense = x.t()?.contiguous()?; // copies a strided tensor
    let half = x.to(DType::F16)?; // a cast
    let layer = Linear::new(64, 32, true)?;
    let out = with_autocast(DType::BF16, || layer.call(&x))??; // casts x and the weights
    let usage = watch.usage();
    for u in &usage {
        println!("{u:?}");
    }
    let of = |k: CopyKind| usage.iter().filter(|u| u.kind == k).collect::<Vec<_>>();
    assert_eq!(of(CopyKind::Reshape).len(), 1);
    assert_eq!(of(CopyKind::Reshape)[0].bytes, 128 * 64 * 4);
    assert!(of(CopyKind::Reshape)[0].place.contains("findings.rs"));
    assert_eq!(of(CopyKind::Contiguous)[0].bytes, 128 * 64 * 4);
    assert_eq!(of(CopyKind::Cast)[0].bytes, 128 * 64 * 2);
    let autocast = of(CopyKind::AutocastCast);
    assert!(!autocast.is_empty());
    assert!(
        autocast.iter().map(|u| u.count).sum::<usize>() >= 2,
        "input and weight"
    );
    assert_eq!(watch.report().len(), usage.len());
    drop((flat, flat_t, dense, half, out));
    Ok(())
}

#[test]
fn empty_cache_in_a_loop() -> Res {
    let _serial = common::serial();
    let meta = Tensor::on(Device::Meta);
    // The pitfall: emptying the cache every step; each step reserves it all again.
    let watch = EmptyCacheWatch::start();
    for _ in 0..5 {
        let act = meta.zeros(&[8 * MIB / 4], DType::F32)?;
        drop(act);
        memory::empty_cache(Device::Meta)?;
    }
    let again = watch.reserved_again();
    assert_eq!(again.len(), 4);
    assert!(again.iter().all(|(_, b)| *b >= 8 * MIB));
    let found = watch.report().expect("empty_cache in a loop");
    println!("{found}");
    assert_eq!(found.kind, FindingKind::EmptyCacheInLoop);
    drop(watch);
    // The fix: let the cache serve each step; at most one call after the loop.
    let watch = EmptyCacheWatch::start();
    for _ in 0..5 {
        drop(meta.zeros(&[8 * MIB / 4], DType::F32)?);
    }
    memory::empty_cache(Device::Meta)?;
    assert!(watch.report().is_none());
    Ok(())
}

#[test]
fn every_mismatched_device_in_one_error() -> Res {
    let _serial = common::serial();
    let m = common::mlp(8, 16, 4)?;
    {
        let _meta = DefaultDevice::set(Device::Meta);
        m.push(shared(Linear::new(4, 2, true)?))?; // built on the wrong device
    }
    let x = Tensor::on(Device::Meta).zeros(&[1, 8], DType::F32)?;
    let err = check_devices(&m, &[("x", &x)]).expect_err("mismatch");
    println!("{err}");
    let ProfileError::DeviceMismatch {
        expected,
        mismatched,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(*expected, Device::Cpu);
    let names: Vec<&str> = mismatched.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["parameter `3.weight`", "parameter `3.bias`", "input `x`"]
    );
    // The fix: everything on one device.
    let m2 = common::mlp(8, 16, 4)?;
    let x = Tensor::zeros(&[1, 8], DType::F32)?;
    assert!(check_devices(&m2, &[("x", &x)]).is_ok());
    Ok(())
}

#[test]
fn fragmentation_is_reported_with_settings_to_try() -> Res {
    let _serial = common::serial();
    memory::empty_cache(Device::Meta)?;
    let meta = Tensor::on(Device::Meta);
    // Six 3 MiB blocks share one segment; freeing every other one leaves holes that no
    // request larger than 3 MiB can use.
    let blocks: Vec<Tensor> = (0..6)
        .map(|_| meta.zeros(&[3 * MIB / 4], DType::F32))
        .collect::<strata_core::Result<_>>()?;
    let kept: Vec<Tensor> = blocks.into_iter().step_by(2).collect();
    let report = fragmentation(Device::Meta)?;
    println!("{report}");
    assert!(report.free >= 9 * MIB);
    assert!(report.largest_free_block < report.free / 2);
    assert!(report.inactive_split_bytes >= 9 * MIB);
    let found = report.finding().expect("fragmented");
    println!("{found}");
    assert!(found.message.contains("expandable_segments:True"));
    assert!(found.message.contains("max_split_size_mb:"));
    drop(kept);
    memory::empty_cache(Device::Meta)?;
    assert!(fragmentation(Device::Meta)?.finding().is_none());
    Ok(())
}

#[test]
fn a_shadowed_binding_lives_to_the_end_of_its_scope() -> Res {
    let _serial = common::serial();
    let tracker = MemoryTracker::new(Device::Meta);
    let meta = Tensor::on(Device::Meta);
    let n = 4 * MIB / 4; // 4 MiB of f32
    {
        // The pitfall: `let x = f(x)` shadows the old `x` but does not drop it; every
        // intermediate stays alive until the block ends.
        let _p = tracker.phase("shadowed")?;
        let x = meta.ones(&[n], DType::F32)?;
        let x = x.exp()?;
        let x = x.sqrt()?;
        let x = x.neg()?;
        drop(x);
    }
    {
        // The fix: drop what is no longer needed (or reuse it in place).
        let _p = tracker.phase("dropped")?;
        let x = meta.ones(&[n], DType::F32)?;
        let y = x.exp()?;
        drop(x);
        let x = y.sqrt()?;
        drop(y);
        let y = x.neg()?;
        drop(x);
        drop(y);
    }
    let phases = tracker.phases();
    println!("{}", tracker.report());
    assert_eq!(phases[0].label, "shadowed");
    assert!(phases[0].peak - phases[0].start >= 16 * MIB);
    assert!(phases[1].peak - phases[1].start <= 8 * MIB);
    let temp = |p: &strata_profile::Phase| {
        p.categories
            .iter()
            .find(|c| c.category == Category::Temporary)
            .map(|c| c.peak - c.start)
    };
    assert_eq!(temp(&phases[0]), Some(16 * MIB));
    assert_eq!(temp(&phases[1]), Some(8 * MIB));
    Ok(())
}

#[test]
fn phases_nest_and_keep_their_peaks() -> Res {
    let _serial = common::serial();
    let tracker = MemoryTracker::new(Device::Meta);
    let meta = Tensor::on(Device::Meta);
    {
        let _step = tracker.phase("step")?;
        {
            let _fwd = tracker.phase("forward")?;
            let a = meta.zeros(&[2 * MIB / 4], DType::F32)?;
            drop(a);
        }
        {
            let _opt = tracker.phase("optimizer")?;
            let b = meta.zeros(&[MIB / 4], DType::F32)?;
            drop(b);
        }
    }
    let phases = tracker.phases();
    let labels: Vec<&str> = phases.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(labels, ["forward", "optimizer", "step"]);
    assert_eq!(phases[0].peak - phases[0].start, 2 * MIB);
    assert_eq!(phases[1].peak - phases[1].start, MIB);
    // The step's peak covers the forward's, though the optimizer phase reset the counters.
    assert_eq!(phases[2].peak - phases[2].start, 2 * MIB);
    Ok(())
}

#[test]
fn the_monitor_samples_in_the_background() -> Res {
    let _serial = common::serial();
    let meta = Tensor::on(Device::Meta);
    let base = memory::memory_allocated(Device::Meta)?;
    let monitor = MemoryMonitor::start(Device::Meta, std::time::Duration::from_millis(1))?;
    let held = meta.zeros(&[16 * MIB / 4], DType::F32)?;
    // Wait for a sample that sees the tensor (the test does not bound the time).
    while monitor.peak_allocated() < base + 16 * MIB {
        std::thread::yield_now();
    }
    drop(held);
    let samples = monitor.stop();
    assert!(samples.windows(2).all(|w| w[0].elapsed <= w[1].elapsed));
    assert!(samples.iter().all(|s| s.reserved >= s.allocated));
    Ok(())
}
