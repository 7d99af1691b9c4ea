//! `strata train` killed at any point resumes bit for bit: a short run is trained without
//! interruption, then again aborted at each crash point in turn (`STRATA_CRASH_AT`) and
//! resumed from its checkpoints; the resumed run's final weights must be the uninterrupted
//! run's, byte for byte, and its per-epoch figures the same (times excluded). One run is
//! also killed with SIGKILL at random moments from outside. Damaged and mismatched
//! checkpoints are refused or passed over, each with a message that names the problem.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const STRATA: &str = env!("CARGO_BIN_EXE_strata");
const FASHION_MNIST: &str = "/usr/share/datasets/fashion-mnist";

/// A training configuration and the crash points (point, pass) it is aborted at.
struct Config {
    name: &'static str,
    args: Vec<&'static str>,
    every: &'static str,
    crashes: Vec<(&'static str, u32)>,
}

/// The mlp: 3 epochs of 40 steps, a checkpoint every 10 steps and at each epoch's end (so
/// 12 checkpoints, the 4th at the end of epoch 1).
fn mlp(name: &'static str, extra: &[&'static str]) -> Config {
    let mut args = vec![
        "--data-dir",
        FASHION_MNIST,
        "--model",
        "mlp",
        "--epochs",
        "3",
        "--batch-size",
        "32",
        "--train-samples",
        "1280",
        "--test-samples",
        "256",
    ];
    args.extend_from_slice(extra);
    Config {
        name,
        args,
        every: "10",
        crashes: vec![
            ("after-backward", 25),   // mid-epoch 1: back to step 20
            ("after-step", 50),       // before step 50's checkpoint: back to 40
            ("checkpoint-write", 6),  // step 60's file half written: back to 50
            ("checkpoint-rename", 4), // epoch 1's file renamed, folder not synced
            ("epoch-end", 2),         // between epochs 2 and 3
        ],
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-resume-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

fn strata(args: &[&str], crash: Option<String>) -> Output {
    let mut c = Command::new(STRATA);
    c.arg("train").args(args);
    c.env_remove("STRATA_CRASH_AT");
    if let Some(at) = crash {
        c.env("STRATA_CRASH_AT", at);
    }
    c.output().expect("strata runs")
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The report's figures that must not depend on interruptions (times and whole-run peaks
/// left out: a resumed process has its own clock and allocator).
fn figures(report: &Path) -> Value {
    let text = std::fs::read_to_string(report).expect("the report");
    let all: Value = serde_json::from_str(&text).expect("the report is JSON");
    let keep = [
        "test_accuracy",
        "test_loss",
        "test_accuracy_per_epoch",
        "train_loss",
        "val_loss",
        "evaluations",
        "split_steps",
        "step_peak_allocated",
        "step_peak_reserved",
        "step_peak_requested",
        "categories_at_peak",
        "top_holders",
    ];
    let mut kept: serde_json::Map<String, Value> = keep
        .iter()
        .map(|k| ((*k).to_owned(), all.get(*k).cloned().unwrap_or(Value::Null)))
        .collect();
    // The batches the loader's workers hold at the measured step's peak depend on timing,
    // in any run: the other categories do not.
    if let Some(Value::Object(categories)) = kept.get_mut("categories_at_peak") {
        categories.remove("input");
    }
    kept.into()
}

/// Trains `args` without interruption: the final weights' bytes and the figures.
fn uninterrupted(dir: &Path, args: &[&str]) -> (Vec<u8>, Value) {
    let (weights, report) = (dir.join("ref.safetensors"), dir.join("ref.json"));
    let mut all = args.to_vec();
    all.extend([
        "--save",
        weights.to_str().unwrap(),
        "--report-json",
        report.to_str().unwrap(),
    ]);
    ok(&strata(&all, None), "the uninterrupted run");
    (std::fs::read(&weights).unwrap(), figures(&report))
}

/// `args` with checkpoints in `ckpt`, resuming from them when there are any, saving the
/// weights and the report in `dir`.
fn durable<'a>(
    args: &[&'a str],
    every: &'a str,
    ckpt: &'a str,
    out: &'a [String; 2],
) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend([
        "--checkpoint-every",
        every,
        "--resume",
        ckpt,
        "--resume-or-start",
        "--save",
        &out[0],
        "--report-json",
        &out[1],
    ]);
    all
}

fn outputs(dir: &Path) -> [String; 2] {
    [
        dir.join("out.safetensors").display().to_string(),
        dir.join("out.json").display().to_string(),
    ]
}

fn assert_same(dir: &Path, want: &(Vec<u8>, Value), what: &str) {
    let out = outputs(dir);
    let weights = std::fs::read(&out[0]).expect("the resumed run saved its weights");
    assert!(
        weights == want.0,
        "{what}: the final weights differ from the uninterrupted run's"
    );
    assert_eq!(
        figures(Path::new(&out[1])),
        want.1,
        "{what}: the figures differ"
    );
}

fn crash_at_every_point(config: Config) {
    let dir = scratch(config.name);
    let want = uninterrupted(&dir, &config.args);
    for (point, pass) in &config.crashes {
        let what = format!("{} crashed at {point}:{pass}", config.name);
        let ckpt = dir.join(format!("ckpt-{point}"));
        let ckpt = ckpt.to_str().unwrap();
        let out = outputs(&dir);
        let _ = std::fs::remove_file(&out[0]);
        let args = durable(&config.args, config.every, ckpt, &out);
        let crashed = strata(&args, Some(format!("{point}:{pass}")));
        let stderr = String::from_utf8_lossy(&crashed.stderr);
        assert!(
            !crashed.status.success() && stderr.contains("aborting at pass"),
            "{what}: the run did not crash there\n{stderr}"
        );
        assert!(
            !Path::new(&out[0]).exists(),
            "{what}: the crashed run finished"
        );
        let resumed = strata(&args, None);
        ok(&resumed, &what);
        let stdout = String::from_utf8_lossy(&resumed.stdout);
        assert!(
            stdout.contains("resumed from"),
            "{what}: it did not resume\n{stdout}"
        );
        assert_same(&dir, &want, &what);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_mlp_resumes_bit_for_bit_after_a_crash_at_every_point() {
    crash_at_every_point(mlp("mlp", &["--workers", "0"]));
}

#[test]
fn the_mlp_with_loader_workers_resumes_bit_for_bit() {
    crash_at_every_point(mlp("mlp-workers", &["--workers", "2"]));
}

#[test]
fn the_mlp_in_f16_with_its_loss_scaler_resumes_bit_for_bit() {
    crash_at_every_point(mlp("mlp-f16", &["--workers", "2", "--amp", "f16"]));
}

#[test]
fn the_lstm_resumes_bit_for_bit_after_a_crash_at_every_point() {
    // 2 epochs of 20 steps, a checkpoint every 7 steps and at each epoch's end: 7, 14,
    // 20, 27, 34, 40.
    crash_at_every_point(Config {
        name: "lstm",
        args: vec![
            "--data-dir",
            FASHION_MNIST,
            "--model",
            "lstm",
            "--epochs",
            "2",
            "--batch-size",
            "32",
            "--train-samples",
            "640",
            "--test-samples",
            "128",
            "--workers",
            "0",
        ],
        every: "7",
        crashes: vec![
            ("after-backward", 10),
            ("after-step", 27),
            ("checkpoint-write", 3),
            ("checkpoint-rename", 4),
            ("epoch-end", 1),
        ],
    });
}

#[test]
fn the_gpt_resumes_bit_for_bit_within_its_one_epoch() {
    // 30 steps of one epoch, evaluated every 10 (the learning-rate warm-up, the clipping,
    // AdamW's two groups, random windows); a checkpoint every 4 steps and after each
    // evaluation: 4, 8, 10, 12, 16, 20, 24, 28, 30. Resuming at 20 starts the loader in
    // the middle of its epoch, at a round's start.
    let text = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/text");
    crash_at_every_point(Config {
        name: "gpt",
        args: vec![
            "--data-dir",
            text,
            "--model",
            "gpt",
            "--steps",
            "30",
            "--eval-every",
            "10",
            "--batch-size",
            "12",
            "--workers",
            "0",
        ],
        every: "4",
        crashes: vec![
            ("after-backward", 7),
            ("after-step", 13),
            ("checkpoint-write", 5),
            ("checkpoint-rename", 3),
            ("epoch-end", 2),
        ],
    });
}

/// A small random-number generator for the kill times (the seed is printed).
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn a_run_killed_from_outside_at_random_moments_resumes_bit_for_bit() {
    let config = mlp("killed", &["--workers", "2"]);
    let dir = scratch(config.name);
    let want = uninterrupted(&dir, &config.args);
    let mut seed = match std::env::var("STRATA_KILL_SEED") {
        Ok(s) => s.parse().expect("STRATA_KILL_SEED is a number"),
        Err(_) => {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        }
    };
    println!("kill seed {seed} (set STRATA_KILL_SEED={seed} to repeat it)");
    let ckpt = dir.join("ckpt");
    let ckpt = ckpt.to_str().unwrap();
    let out = outputs(&dir);
    let args = durable(&config.args, config.every, ckpt, &out);
    let mut kills = 0;
    for _ in 0..3 {
        // A moment between the start and about the end of an uninterrupted run.
        let after = Duration::from_millis(50 + next(&mut seed) % 1500);
        let mut child = Command::new(STRATA)
            .arg("train")
            .args(&args)
            .env_remove("STRATA_CRASH_AT")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("strata starts");
        let start = Instant::now();
        while start.elapsed() < after && child.try_wait().expect("wait").is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
        if child.try_wait().expect("wait").is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        }
        let _ = child.wait();
    }
    println!("killed {kills} of 3 runs");
    ok(&strata(&args, None), "the run after the kills");
    assert_same(&dir, &want, &format!("killed with seed {seed}"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn damaged_or_mismatched_checkpoints_are_named_and_the_previous_one_is_used() {
    let config = mlp("damaged", &["--workers", "0"]);
    let dir = scratch(config.name);
    let want = uninterrupted(&dir, &config.args);
    let ckpt_dir = dir.join("ckpt");
    let ckpt = ckpt_dir.to_str().unwrap();
    let out = outputs(&dir);
    let args = durable(&config.args, config.every, ckpt, &out);
    // Crash at step 85 with --keep 2: steps 70 and 80 are kept.
    let mut kept = args.clone();
    kept.extend(["--keep", "2"]);
    let crashed = strata(&kept, Some("after-step:85".into()));
    assert!(!crashed.status.success());
    let names: Vec<String> = std::fs::read_dir(&ckpt_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["step-00000070.ckpt", "step-00000080.ckpt"],
        "{names:?}"
    );

    // Another run's options are refused, naming each difference.
    let mut other = args.clone();
    other.extend(["--lr", "0.002"]);
    let refused = strata(&other, None);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("--lr: the checkpoint's run had 0.001, this run has 0.002"),
        "{stderr}"
    );
    // So is other data.
    let mut fewer = args.clone();
    let at = fewer.iter().position(|a| *a == "1280").unwrap();
    fewer[at] = "1248";
    let refused = strata(&fewer, None);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--train-samples") && stderr.contains("training data"),
        "{stderr}"
    );

    // The newest is cut short: it is reported and step 70 is used.
    let newest = ckpt_dir.join("step-00000080.ckpt");
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 3]).unwrap();
    let resumed = strata(&args, None);
    ok(&resumed, "resuming past a truncated checkpoint");
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(
        stdout.contains("step-00000080.ckpt: truncated") && stdout.contains("step-00000070.ckpt"),
        "{stdout}"
    );
    assert_same(
        &dir,
        &want,
        "resumed from the checkpoint before a truncated one",
    );

    // A flipped byte fails the checksum.
    let last = ckpt_dir.join("step-00000120.ckpt");
    let mut bytes = std::fs::read(&last).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&last, &bytes).unwrap();
    let resumed = strata(&args, None);
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(stdout.contains("checksum does not match"), "{stdout}");

    // No checkpoint at all: an error, unless --resume-or-start.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let mut strict = config.args.clone();
    strict.extend(["--resume", empty.to_str().unwrap()]);
    let refused = strata(&strict, None);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("--resume-or-start"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
