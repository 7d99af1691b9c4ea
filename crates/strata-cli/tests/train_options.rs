//! The options of `strata train` that change memory: the meta device allocates what the CPU
//! does, checkpointing trades activations for recomputation, a split step equals the
//! full-batch step, and a snapshot of the run can be read back.

use std::path::PathBuf;
use std::sync::Arc;

use strata::alloc::{DeviceAllocator, HostCachingAllocator};
use strata::core::{manual_seed, with_allocator, Tensor};
use strata::data::{DataLoader, LoaderOptions};
use strata_cli::train::{
    test_set, train, CheckpointMode, Model, ModelKind, OnOom, OptimizerKind, Report, Stepper,
    TrainError, TrainOptions,
};

/// Memory statistics are the process's: one run at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn options(model: ModelKind) -> TrainOptions {
    TrainOptions {
        model,
        epochs: 1,
        batch_size: 64,
        workers: 0,
        data_dir: PathBuf::from("/usr/share/datasets/fashion-mnist"),
        train_samples: Some(1024),
        test_samples: Some(256),
        ..TrainOptions::default()
    }
}

fn run(o: &TrainOptions) -> Report {
    // Each run starts with nothing cached, as a new process would.
    strata::core::memory::empty_cache(o.device).expect("empty the cache");
    match train(o, &mut |_: &str| {}) {
        Ok(r) => r,
        Err(e) => panic!("{:?} run failed: {e}", o.model),
    }
}

#[test]
fn a_meta_run_allocates_exactly_what_the_cpu_run_does() {
    let _serial = serial();
    for model in [ModelKind::Mlp, ModelKind::Cnn, ModelKind::Lstm] {
        let cpu = run(&options(model));
        let meta = run(&TrainOptions {
            device: strata::core::Device::Meta,
            ..options(model)
        });
        assert_eq!(meta.device, "meta");
        assert!(meta.test_accuracy.is_none() && meta.train_loss.is_none());
        assert!(cpu.test_accuracy.is_some());
        let peaks = |r: &Report| {
            (
                r.step_peak_allocated,
                r.step_peak_reserved,
                r.step_peak_requested,
                r.run_peak_allocated,
                r.run_peak_reserved,
            )
        };
        assert_eq!(peaks(&meta), peaks(&cpu), "{model:?}");
        assert_eq!(meta.categories_at_peak, cpu.categories_at_peak, "{model:?}");
    }
}

#[test]
fn checkpointing_lowers_the_step_peak_and_learns_alike() {
    let _serial = serial();
    for model in [ModelKind::Cnn, ModelKind::Lstm] {
        let plain = run(&options(model));
        let checkpointed = run(&TrainOptions {
            checkpoint_activations: Some(CheckpointMode::Full),
            ..options(model)
        });
        assert!(
            checkpointed.step_peak_allocated < plain.step_peak_allocated,
            "{model:?}: {} against {}",
            checkpointed.step_peak_allocated,
            plain.step_peak_allocated
        );
        assert!(
            checkpointed.categories_at_peak["activation"] < plain.categories_at_peak["activation"]
        );
        let (a, b) = (
            plain.test_accuracy.unwrap_or(0.0),
            checkpointed.test_accuracy.unwrap_or(1.0),
        );
        // The same gradients up to rounding (the cnn's BatchNorm statistics are updated
        // again by the recomputation, as in PyTorch).
        assert!((a - b).abs() <= 0.01, "{model:?}: {a} against {b}");
        // The classifiers have no selective policy: a clear error before anything runs.
        let refused = train(
            &TrainOptions {
                checkpoint_activations: Some(CheckpointMode::Selective),
                ..options(model)
            },
            &mut |_: &str| {},
        );
        match refused {
            Err(TrainError::Options(m)) => assert!(m.contains("only the gpt has one"), "{m}"),
            Err(e) => panic!("{model:?}: another error: {e}"),
            Ok(_) => panic!("{model:?}: selective checkpointing ran without a policy"),
        }
        let built = Model::build(model, Some(CheckpointMode::Selective));
        assert!(
            matches!(&built, Err(e) if e.to_string().contains("needs a policy")),
            "{model:?}: Model::build took selective checkpointing without a policy"
        );
    }
}

/// The first `n` test images and labels, as one batch.
fn batch(n: usize) -> (Tensor, Tensor) {
    let o = TrainOptions {
        test_samples: Some(n),
        ..options(ModelKind::Mlp)
    };
    let data = test_set(&o).expect("the dataset");
    let mut loader = DataLoader::new(
        data,
        LoaderOptions {
            batch_size: n,
            ..LoaderOptions::default()
        },
    )
    .expect("a loader");
    let first = loader.epoch().expect("an epoch").next();
    let mut t = first
        .expect("a batch")
        .expect("a batch")
        .tensors
        .into_iter();
    (t.next().expect("images"), t.next().expect("labels"))
}

/// A model and its stepper, from seed 0, after one full step on `(x, y)`.
fn warmed(kind: ModelKind, o: &TrainOptions, x: &Tensor, y: &Tensor) -> (Model, Stepper) {
    manual_seed(0);
    let model = Model::build(kind, None).expect("a model");
    let mut stepper = Stepper::new(&model, o).expect("a stepper");
    stepper.step(&model, x, y, &mut || {}).expect("a step");
    (model, stepper)
}

/// Runs `f` on a fresh caching allocator capped at `limit`; returns its result and the
/// allocator's peak allocated and reserved bytes.
fn on_fresh<R>(limit: Option<usize>, f: impl FnOnce() -> R) -> (R, usize, usize) {
    let fresh = Arc::new(HostCachingAllocator::host().expect("an allocator"));
    fresh.set_memory_limit(limit);
    let routed: Arc<dyn DeviceAllocator> = fresh.clone();
    let out = with_allocator(&routed, f);
    let stats = fresh.memory_stats();
    (
        out,
        stats.allocated_bytes.all.peak as usize,
        stats.reserved_bytes.all.peak as usize,
    )
}

#[test]
fn a_step_split_after_running_out_of_memory_equals_the_full_batch_step() {
    let _serial = serial();
    for (kind, n) in [(ModelKind::Mlp, 4096), (ModelKind::Lstm, 512)] {
        let o = TrainOptions {
            optimizer: OptimizerKind::Sgd,
            lr: 0.1,
            momentum: 0.9,
            on_oom: OnOom::Split,
            ..options(kind)
        };
        let (x, y) = batch(n);
        // Three identical models, one full step each (momentum exists from here on).
        let (full, mut full_step) = warmed(kind, &o, &x, &y);
        let (halves, mut halves_step) = warmed(kind, &o, &x, &y);
        let (split, mut split_step) = warmed(kind, &o, &x, &y);
        let (done, full_peak, full_reserved) =
            on_fresh(None, || full_step.step(&full, &x, &y, &mut || {}));
        assert_eq!(done.expect("the full step").parts, 1);
        let (done, half_peak, half_reserved) = on_fresh(None, || {
            halves_step.step_in_parts(&halves, &x, &y, 2, &mut || {})
        });
        assert_eq!(done.expect("the step in halves").parts, 2);
        println!(
            "{kind:?}: full {full_peak} ({full_reserved}), halves {half_peak} ({half_reserved})"
        );
        assert!(
            half_reserved < full_peak,
            "{kind:?}: {half_reserved} against {full_peak}"
        );
        // Under a cap above what the halves reserve and below what the full step must
        // allocate, the full step runs out of memory and is split in two.
        let limit = (half_reserved + full_peak) / 2;
        let (done, _, reserved) =
            on_fresh(Some(limit), || split_step.step(&split, &x, &y, &mut || {}));
        let outcome = done.expect("the split step");
        assert_eq!(outcome.parts, 2, "{kind:?}");
        assert!(reserved <= limit);
        for (name, a) in full.module().named_parameters() {
            let b = split
                .module()
                .named_parameters()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, t)| t)
                .expect("the same parameter");
            let (a, b) = (a.to_vec::<f32>().expect("a"), b.to_vec::<f32>().expect("b"));
            for (u, v) in a.iter().zip(&b) {
                assert!(
                    (u - v).abs() <= 1e-5 + 1e-4 * u.abs(),
                    "{kind:?} {name}: {u} against {v}"
                );
            }
        }
    }
}

#[test]
fn a_run_under_a_memory_limit_splits_its_steps_or_stops() {
    let _serial = serial();
    let o = TrainOptions {
        batch_size: 2048,
        train_samples: Some(8192),
        memory_limit: Some(64 << 20),
        ..options(ModelKind::Mlp)
    };
    let stopped = train(&o, &mut |_: &str| {});
    match stopped {
        Err(e) => assert!(e.to_string().contains("out of memory"), "{e}"),
        Ok(_) => panic!("a full step of 2048 images fits in 64 MiB: the test needs a lower limit"),
    }
    let split = run(&TrainOptions {
        on_oom: OnOom::Split,
        ..o.clone()
    });
    assert!(split.split_steps > 0);
    assert!(split.run_peak_reserved <= 64 << 20);
    assert!(split.test_accuracy.unwrap_or(0.0) > 0.5);
    strata::core::memory::set_memory_limit(None, strata::core::Device::Cpu).expect("no limit");
}

#[test]
fn the_snapshot_of_a_run_is_a_pickle_with_its_history() {
    let _serial = serial();
    let path = std::env::temp_dir().join(format!("strata-snap-{}.pickle", std::process::id()));
    run(&TrainOptions {
        snapshot: Some(path.clone()),
        ..options(ModelKind::Mlp)
    });
    let bytes = std::fs::read(&path).expect("the snapshot");
    assert_eq!(&bytes[..2], b"\x80\x04", "a protocol 4 pickle");
    let text = String::from_utf8_lossy(&bytes);
    for key in ["segments", "device_traces", "alloc", "free_completed"] {
        assert!(text.contains(key), "{key} missing");
    }
    let _ = std::fs::remove_file(path);
}
