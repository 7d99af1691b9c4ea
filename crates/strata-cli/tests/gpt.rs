//! `strata train --model gpt` on a small text in the repository (the first 40,000 bytes of
//! the corpus's Romeo and Juliet): training by steps with evaluations, saving and
//! evaluating nanoGPT-layout weights, the meta device, the errors a user meets first, and
//! five steps from PyTorch's initial weights against PyTorch's losses (the fixture of
//! scripts/gpt-fixtures.py).

use std::path::PathBuf;
use std::process::Command;

use strata::core::Device;
use strata::data::{CharCorpus, RandomWindows, SampleContext};
use strata::nn::state::StateDict;
use strata_cli::train::{
    evaluate, model_with_weights, sample, test_set, train, ModelKind, SampleOptions, TrainError,
    TrainOptions,
};

/// Memory statistics and the global generator are the process's: one run at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn sample_text() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/text")
}

fn options(steps: usize, eval_every: usize) -> TrainOptions {
    TrainOptions {
        model: ModelKind::Gpt,
        batch_size: 12,
        steps: Some(steps),
        eval_every,
        workers: 0,
        optimizer: strata_cli::train::OptimizerKind::Adamw,
        weight_decay: 0.1,
        data_dir: sample_text(),
        ..TrainOptions::default()
    }
}

#[test]
fn the_gpt_learns_and_reports_each_evaluation() -> Result<(), Box<dyn std::error::Error>> {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("strata-gpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let weights = dir.join("gpt.safetensors");
    let o = TrainOptions {
        save: Some(weights.clone()),
        ..options(30, 10)
    };
    let r = train(&o, &mut |_: &str| {})?;
    let steps: Vec<usize> = r.evaluations.iter().map(|e| e.step).collect();
    assert_eq!(steps, [10, 20, 30]);
    let first = r.evaluations[0].val_loss.ok_or("a value")?;
    let last = r.val_loss.ok_or("a value")?;
    // The text has 66 characters: a uniform guess costs ln 66 = 4.19 nats.
    assert!(last < first && last < 3.6, "{first} then {last}");
    assert!(r.evaluations.iter().all(|e| e.train_loss.is_some()));
    assert_eq!(r.test_accuracy, None);
    assert_eq!(r.epoch_seconds.len(), 3);
    assert!(r.step_peak_allocated > 0 && r.watch_findings.is_empty());
    // Saved under nanoGPT's keys, the tied weight under both names.
    let dict = StateDict::load(&weights)?;
    assert!(dict.get("lm_head.weight").is_some() && dict.get("transformer.wte.weight").is_some());
    assert_eq!(dict.iter().count(), 2 + 4 * 6 + 2);
    assert!(dict.iter().all(|(k, _)| !k.ends_with(".bias")));
    // `strata eval` gives the last evaluation's loss.
    let model = model_with_weights(&o, Some(&weights))?;
    let (_, loss) = evaluate(model.as_ref(), test_set(&o)?, &o)?;
    assert!((loss - last).abs() < 1e-9, "{loss} against {last}");
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[test]
fn a_meta_run_has_the_same_evaluations_without_values() -> Result<(), Box<dyn std::error::Error>> {
    let _serial = serial();
    let r = train(
        &TrainOptions {
            device: Device::Meta,
            ..options(5, 2)
        },
        &mut |_: &str| {},
    )?;
    let steps: Vec<usize> = r.evaluations.iter().map(|e| e.step).collect();
    assert_eq!(steps, [2, 4, 5]);
    assert!(r
        .evaluations
        .iter()
        .all(|e| e.val_loss.is_none() && e.train_loss.is_none()));
    assert!(r.step_peak_allocated > 0);
    Ok(())
}

#[test]
fn steps_are_for_the_gpt_and_a_missing_corpus_names_its_fetch() {
    let _serial = serial();
    let mlp = TrainOptions {
        steps: Some(10),
        ..TrainOptions::default()
    };
    let err = train(&mlp, &mut |_: &str| {}).expect_err("--steps with the mlp");
    assert!(err.to_string().contains("use --epochs"), "{err}");
    let missing = TrainOptions {
        data_dir: std::env::temp_dir().join("strata-no-corpus-here"),
        ..options(2, 2)
    };
    let err = train(&missing, &mut |_: &str| {}).expect_err("no corpus");
    assert!(matches!(err, TrainError::Data(_)));
    assert!(
        err.to_string().contains("scripts/fetch-shakespeare"),
        "{err}"
    );
}

#[test]
fn the_command_line_trains_by_steps_and_refuses_epochs() -> Result<(), Box<dyn std::error::Error>> {
    let _serial = serial();
    let strata = env!("CARGO_BIN_EXE_strata");
    let text = sample_text();
    let refused = Command::new(strata)
        .args(["train", "--model", "gpt", "--epochs", "2", "--data-dir"])
        .arg(&text)
        .output()?;
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("trains by steps") && err.contains("--steps"),
        "{err}"
    );
    let run = Command::new(strata)
        .args([
            "train",
            "--model",
            "gpt",
            "--steps",
            "4",
            "--eval-every",
            "2",
        ])
        .args(["--workers", "0", "--data-dir"])
        .arg(&text)
        .output()?;
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        out.contains("step 2: train loss") && out.contains("step 4:"),
        "{out}"
    );
    let missing = Command::new(strata)
        .args(["plan", "--model", "gpt", "--data-dir"])
        .arg(std::env::temp_dir().join("strata-no-corpus-here"))
        .output()?;
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("scripts/fetch-shakespeare"), "{err}");
    Ok(())
}

#[test]
fn five_steps_from_pytorchs_weights_give_pytorchs_losses() -> Result<(), Box<dyn std::error::Error>>
{
    let _serial = serial();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpt");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json"))?)?;
    let number = |v: &serde_json::Value| v.as_f64().ok_or("a number in expected.json");
    // The fixture's windows are strata's own draws for loader seed 0 (scripts/gpt_reference.py
    // repeats them): the two sides train on the same batches.
    let corpus = CharCorpus::shakespeare(&sample_text())?;
    assert_eq!(
        corpus.vocab().len() as f64,
        number(&expected["vocab_size"])?
    );
    let windows = RandomWindows::new(corpus.split().0, 64, 60)?;
    let starts = expected["starts"].as_array().ok_or("starts")?;
    for (i, start) in starts
        .iter()
        .flat_map(|b| b.as_array().into_iter().flatten())
        .enumerate()
    {
        let drawn = windows.start(&mut SampleContext::new(0, 0, i));
        assert_eq!(drawn as f64, number(start)?, "window {i}");
    }
    // Five steps of the recipe from PyTorch's initial weights, evaluated after each.
    let o = TrainOptions {
        load: Some(fixture.join("init.safetensors")),
        ..options(5, 1)
    };
    let r = train(&o, &mut |_: &str| {})?;
    let losses = expected["losses"].as_array().ok_or("losses")?;
    assert_eq!(r.evaluations.len(), losses.len());
    for (i, (e, want)) in r.evaluations.iter().zip(losses).enumerate() {
        let got = e.train_loss.ok_or("a loss")?;
        let want = number(want)?;
        assert!(
            (got - want).abs() < 1e-4,
            "step {i}: strata {got}, PyTorch {want}"
        );
    }
    let val = r.val_loss.ok_or("a validation loss")?;
    let want = number(&expected["val_loss_after"])?;
    assert!(
        (val - want).abs() < 1e-4,
        "validation: strata {val}, PyTorch {want}"
    );
    Ok(())
}

#[test]
fn sampling_uses_the_cache_and_its_memory_is_planned() -> Result<(), Box<dyn std::error::Error>> {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("strata-gpt-sample-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let weights = dir.join("gpt.safetensors");
    train(
        &TrainOptions {
            save: Some(weights.clone()),
            ..options(20, 20)
        },
        &mut |_: &str| {},
    )?;
    for tokens in [10, 100] {
        let o = SampleOptions {
            data_dir: sample_text(),
            load: Some(weights.clone()),
            prompt: "ROMEO:".into(),
            tokens,
            seed: 5,
            ..SampleOptions::default()
        };
        let r = sample(&o)?;
        let text = r.text.clone().ok_or("a text")?;
        assert!(
            text.starts_with("ROMEO:") && text.len() == 6 + tokens,
            "{text:?}"
        );
        // Keys and values of 4 blocks for 64 positions of width 128, in f32.
        assert_eq!(r.cache_bytes, 4 * 2 * 64 * 128 * 4);
        assert!(r.peak_allocated >= r.cache_bytes);
        // The same seed draws the same text.
        assert_eq!(sample(&o)?.text, r.text);
        // `strata plan --sample` runs the generation on meta: the same peaks to the byte,
        // with 100 tokens past the context (cropped and recomputed).
        let planned = sample(&SampleOptions {
            device: Device::Meta,
            ..o.clone()
        })?;
        assert_eq!(planned.text, None);
        assert_eq!(
            (
                planned.peak_allocated,
                planned.peak_reserved,
                planned.peak_requested
            ),
            (r.peak_allocated, r.peak_reserved, r.peak_requested),
            "{tokens} tokens"
        );
        assert_eq!(planned.cache_bytes, r.cache_bytes);
    }
    let unknown = SampleOptions {
        data_dir: sample_text(),
        load: Some(weights.clone()),
        prompt: "ROMEO: ~".into(),
        ..SampleOptions::default()
    };
    let err = sample(&unknown).expect_err("a character outside the vocabulary");
    assert!(err.to_string().contains('~'), "{err}");
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
