//! `strata plan` predicts, to the byte, the step `strata train` measures, for every model
//! and every option that changes the step's memory; `--fit` finds a batch size within 90%
//! of the largest that really fits.

use std::path::PathBuf;

use strata::core::{memory, DType, Device, Error};
use strata_cli::train::{fit, plan, train, CheckpointMode, ModelKind, TrainError, TrainOptions};

/// Memory statistics are the process's: one run at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn options(model: ModelKind, batch_size: usize) -> TrainOptions {
    TrainOptions {
        model,
        epochs: 1,
        batch_size,
        workers: 0,
        data_dir: PathBuf::from("/usr/share/datasets/fashion-mnist"),
        // Two full batches: the measured step is the second.
        train_samples: Some(2 * batch_size),
        test_samples: Some(64),
        ..TrainOptions::default()
    }
}

/// Plans the step `o` measures, runs it, and asserts the two agree to the byte: the peaks
/// allocated, reserved and requested, and the mix of categories at the peak. Returns the
/// peak allocated.
fn assert_planned_exactly(o: &TrainOptions, what: &str) -> usize {
    let predicted = plan(o).expect("a plan");
    let measured = train(o, &mut |_: &str| {}).expect("a run");
    assert_eq!(
        (
            predicted.peak_allocated,
            predicted.peak_reserved,
            predicted.peak_requested
        ),
        (
            measured.step_peak_allocated,
            measured.step_peak_reserved,
            measured.step_peak_requested
        ),
        "{what}"
    );
    assert_eq!(
        predicted.categories_at_peak, measured.categories_at_peak,
        "{what}"
    );
    measured.step_peak_allocated
}

/// A change to the options: one of the variants planned.
type Variant = fn(TrainOptions) -> TrainOptions;

#[test]
fn the_plan_equals_the_measured_step_for_every_model_and_option() {
    let _serial = serial();
    let variants: [(&str, Variant); 4] = [
        ("plain", |o| o),
        ("checkpointed", |o| TrainOptions {
            checkpoint_activations: Some(CheckpointMode::Full),
            ..o
        }),
        ("bf16", |o| TrainOptions {
            amp: Some(DType::BF16),
            ..o
        }),
        ("in backward", |o| TrainOptions {
            optimizer_in_backward: true,
            ..o
        }),
    ];
    for model in [ModelKind::Mlp, ModelKind::Cnn, ModelKind::Lstm] {
        for (name, variant) in variants {
            for b in [16, 100, 256] {
                let o = variant(options(model, b));
                assert_planned_exactly(&o, &format!("{model:?} {name} at batch {b}"));
            }
        }
    }
}

#[test]
fn the_plan_equals_the_measured_step_of_the_gpt_for_every_policy() {
    let _serial = serial();
    let variants: [(&str, Variant); 3] = [
        ("plain", |o| o),
        ("selective", |o| TrainOptions {
            checkpoint_activations: Some(CheckpointMode::Selective),
            ..o
        }),
        ("full", |o| TrainOptions {
            checkpoint_activations: Some(CheckpointMode::Full),
            ..o
        }),
    ];
    for b in [4, 12, 40] {
        let mut peaks = Vec::new();
        for (name, variant) in variants {
            let o = variant(TrainOptions {
                model: ModelKind::Gpt,
                batch_size: b,
                steps: Some(2),
                eval_every: 2,
                workers: 0,
                optimizer: strata_cli::train::OptimizerKind::Adamw,
                weight_decay: 0.1,
                data_dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/text"),
                ..TrainOptions::default()
            });
            peaks.push(assert_planned_exactly(
                &o,
                &format!("gpt {name} at batch {b}"),
            ));
        }
        // Each policy keeps less than the one before it.
        assert!(
            peaks[0] > peaks[1] && peaks[1] > peaks[2],
            "batch {b}: step peaks plain, selective, full: {peaks:?}"
        );
    }
}

/// Whether a real run of `o` at batch size `b` holds under `limit`.
fn holds(o: &TrainOptions, b: usize, limit: usize) -> bool {
    memory::empty_cache(Device::Cpu).expect("empty the cache");
    let run = train(
        &TrainOptions {
            batch_size: b,
            memory_limit: Some(limit),
            ..o.clone()
        },
        &mut |_: &str| {},
    );
    memory::set_memory_limit(None, Device::Cpu).expect("no limit");
    match run {
        Ok(_) => true,
        Err(TrainError::Core(Error::OutOfMemory { .. })) => false,
        Err(e) => panic!("batch {b}: {e}"),
    }
}

#[test]
fn fit_reaches_ninety_percent_of_the_largest_batch_that_really_fits() {
    let _serial = serial();
    let limit = 256 << 20;
    let o = TrainOptions {
        epochs: 2,
        train_samples: Some(16384),
        test_samples: Some(1000),
        ..options(ModelKind::Mlp, 128)
    };
    let found = fit(&o, limit).expect("a fit");
    println!("fit: {found:?}");
    // The batch size found runs without running out of memory (what --batch-size auto
    // relies on).
    assert!(holds(&o, found.batch_size, limit));
    // Bisect real runs between it and the whole training slice.
    let (mut lo, mut hi) = (found.batch_size, 16384 + 1);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if holds(&o, mid, limit) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    println!("largest real batch: {lo}");
    assert!(
        found.batch_size * 10 >= lo * 9,
        "fit {} against a real maximum of {lo}",
        found.batch_size
    );
}

#[test]
fn a_plan_under_a_limit_answers_no_with_the_numbers() {
    let _serial = serial();
    let mut o = options(ModelKind::Mlp, 256);
    let unlimited = plan(&o).expect("planned");
    assert!(unlimited.limit.is_none());
    o.memory_limit = Some(1 << 20);
    let tight = plan(&o).expect("a step that does not fit is still planned");
    let check = tight.limit.expect("a limit was given");
    assert!(!check.fits());
    // The same step as without the limit, and what it needs is at least the step itself.
    assert_eq!(tight.peak_reserved, unlimited.peak_reserved);
    assert!(check.needs_reserved >= tight.peak_reserved);
    let first = tight.text().lines().next().unwrap_or_default().to_owned();
    assert!(
        first.starts_with("does not fit: the step needs ")
            && first.contains("and holds under a limit of ")
            && first.contains("; the limit is 1024.00 KiB ("),
        "{first}"
    );
    o.memory_limit = Some(check.needs_reserved);
    let exact = plan(&o).expect("planned");
    assert!(exact.limit.is_some_and(|c| c.fits()));
    // The real run (with its loader and evaluation) holds under the limit the plan names,
    // and not under half of what the plan says it allocates.
    o.memory_limit = None;
    assert!(holds(&o, 256, check.needed()));
    assert!(!holds(&o, 256, check.needs_allocated / 2));
}
