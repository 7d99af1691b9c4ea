//! `strata train` on real Fashion-MNIST (a slice of it, to stay quick): it learns, its
//! report's memory figures hold together, and saved weights evaluate to the same accuracy.

use std::path::PathBuf;

use strata_cli::train::{
    evaluate, model_with_weights, test_set, train, ModelKind, OptimizerKind, TrainOptions,
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
        optimizer: OptimizerKind::Adam,
        workers: 2,
        prefetch: Some(2),
        data_dir: PathBuf::from("/usr/share/datasets/fashion-mnist"),
        train_samples: Some(4096),
        test_samples: Some(1000),
        ..TrainOptions::default()
    }
}

fn accuracy(r: &strata_cli::train::Report) -> f64 {
    r.test_accuracy.unwrap_or(-1.0)
}

#[test]
fn the_mlp_learns_and_its_step_is_measured() -> Result<(), Box<dyn std::error::Error>> {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("strata-train-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let weights = dir.join("mlp.safetensors");
    let o = TrainOptions {
        save: Some(weights.clone()),
        ..options(ModelKind::Mlp)
    };
    let mut lines = Vec::new();
    let r = train(&o, &mut |l: &str| lines.push(l.to_owned()))?;
    println!("{}", r.text());
    assert_eq!(lines.len(), 1);
    // 4096 images, one epoch: well above chance (10%).
    assert!(accuracy(&r) > 0.65, "accuracy {}", accuracy(&r));
    let losses = r.train_loss.clone().unwrap_or_default();
    assert_eq!(losses.len(), 1);
    assert!(losses[0] < 1.5);
    // The measured step holds at least the largest layer's gradient (1024 x 1024 floats)
    // and never more than it reserved.
    assert!(r.step_peak_allocated >= 1024 * 1024 * 4);
    assert!(r.step_peak_reserved >= r.step_peak_allocated);
    assert!(r.step_peak_requested <= r.step_peak_allocated);
    // The mlp's step peaks in Adam's update: every gradient is alive, the activations
    // are gone.
    assert!(r.categories_at_peak["gradient"] >= 1024 * 1024 * 4);
    assert_eq!(r.categories_at_peak["activation"], 0);
    // Parameters: 784·1024 + 1024·1024 + 1024·10 weights and 2058 biases, in floats.
    let params = (784 * 1024 + 1024 * 1024 + 1024 * 10 + 2058) * 4;
    assert!(r.categories_at_peak["parameter"] >= params);
    // Adam's two moments per parameter, and a step count each.
    let state = r.categories_at_peak["optimizer_state"];
    let two = 2 * r.categories_at_peak["parameter"];
    assert!(
        state >= two && state <= two + 6 * 512,
        "{state} against {two}"
    );
    assert!(!r.top_holders.is_empty());
    assert!(r.watch_findings.is_empty(), "{:?}", r.watch_findings);
    // The saved weights evaluate to the same accuracy.
    let model = model_with_weights(&o, Some(&weights))?;
    let (acc, loss) = evaluate(model.as_ref(), test_set(&o)?, &o)?;
    assert_eq!(Some(acc), r.test_accuracy);
    assert!((loss - r.test_loss.unwrap_or(-1.0)).abs() < 1e-9);
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[test]
fn the_cnn_and_the_lstm_learn() -> Result<(), Box<dyn std::error::Error>> {
    let _serial = serial();
    for (model, floor) in [(ModelKind::Cnn, 0.6), (ModelKind::Lstm, 0.4)] {
        let o = TrainOptions {
            train_samples: Some(2048),
            test_samples: Some(500),
            ..options(model)
        };
        let r = train(&o, &mut |_: &str| {})?;
        println!("{}", r.text());
        assert!(accuracy(&r) > floor, "{model:?}: {}", accuracy(&r));
        assert!(r.step_peak_allocated > 0);
        // Both peak in backward, with the saved activations alive.
        assert!(r.categories_at_peak["activation"] > 0);
    }
    Ok(())
}

#[test]
fn the_commands_run_end_to_end() -> Result<(), Box<dyn std::error::Error>> {
    use std::process::Command;
    let dir = std::env::temp_dir().join(format!("strata-cmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (weights, report) = (dir.join("w.safetensors"), dir.join("r.json"));
    let strata = env!("CARGO_BIN_EXE_strata");
    let train = Command::new(strata)
        .args([
            "train",
            "--epochs",
            "1",
            "--train-samples",
            "1024",
            "--test-samples",
            "300",
        ])
        .arg("--save")
        .arg(&weights)
        .arg("--report-json")
        .arg(&report)
        .output()?;
    assert!(
        train.status.success(),
        "{}",
        String::from_utf8_lossy(&train.stderr)
    );
    let text = String::from_utf8_lossy(&train.stdout);
    assert!(
        text.contains("memory of one training step (measured alone"),
        "{text}"
    );
    // The category table is labelled as the run's, and says what its total holds.
    assert!(
        text.contains("the run's allocator at that step's peak"),
        "{text}"
    );
    assert!(text.contains("  total "), "{text}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report)?)?;
    for key in [
        "test_accuracy",
        "test_loss",
        "train_loss",
        "epoch_seconds",
        "data_wait_seconds",
    ] {
        assert!(json.get(key).is_some(), "{key} missing");
    }
    let eval = Command::new(strata)
        .args(["eval", "--test-samples", "300", "--load"])
        .arg(&weights)
        .output()?;
    assert!(
        eval.status.success(),
        "{}",
        String::from_utf8_lossy(&eval.stderr)
    );
    let accuracy = 100.0 * json["test_accuracy"].as_f64().unwrap_or(-1.0);
    assert!(String::from_utf8_lossy(&eval.stdout).contains(&format!("{accuracy:.2}%")));
    let summary = Command::new(strata)
        .args(["summary", "--test-samples", "100"])
        .output()?;
    assert!(summary.status.success());
    assert!(String::from_utf8_lossy(&summary.stdout).contains("Allocated memory"));
    let meta = Command::new(strata)
        .args([
            "train", "--device", "meta", "--epochs", "1", "--model", "cnn",
        ])
        .arg("--report-json")
        .arg(&report)
        .output()?;
    assert!(
        meta.status.success(),
        "{}",
        String::from_utf8_lossy(&meta.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report)?)?;
    for key in ["test_accuracy", "test_loss", "train_loss"] {
        assert!(json[key].is_null(), "{key} on meta: {}", json[key]);
    }
    assert!(json["step_peak_allocated"].as_u64().unwrap_or(0) > 0);
    assert_eq!(json["split_steps"].as_u64(), Some(0));
    let bad = Command::new(strata)
        .args(["train", "--memory-limit", "2XB"])
        .output()?;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown unit"));
    // A GPU that cannot be used is said so, with the reason, and the run does not start.
    let cuda = Command::new(strata)
        .args(["train", "--device", "cuda", "--epochs", "1"])
        .output()?;
    assert!(!cuda.status.success());
    let said = String::from_utf8_lossy(&cuda.stderr);
    assert!(said.contains("--device cuda:0 is not available"), "{said}");
    if strata::core::cuda::device_count().is_err() {
        assert!(said.contains("no CUDA driver found"), "{said}");
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[test]
fn mixed_precision_and_stepping_in_backward_learn() -> Result<(), Box<dyn std::error::Error>> {
    let _serial = serial();
    let plain = train(&options(ModelKind::Mlp), &mut |_: &str| {})?;
    for (amp, in_backward) in [
        (Some(strata::core::DType::BF16), false),
        (Some(strata::core::DType::F16), false),
        (None, true),
    ] {
        let o = TrainOptions {
            amp,
            optimizer_in_backward: in_backward,
            ..options(ModelKind::Mlp)
        };
        let r = train(&o, &mut |_: &str| {})?;
        assert!(
            accuracy(&r) > 0.65,
            "{amp:?} {in_backward}: {}",
            accuracy(&r)
        );
        if in_backward {
            // Each gradient is freed as soon as its parameter stepped: the step holds at
            // most the largest one, never all of them.
            assert!(r.categories_at_peak["gradient"] < plain.categories_at_peak["gradient"]);
        }
    }
    let both = TrainOptions {
        amp: Some(strata::core::DType::F16),
        optimizer_in_backward: true,
        ..options(ModelKind::Mlp)
    };
    assert!(train(&both, &mut |_: &str| {}).is_err());
    Ok(())
}
