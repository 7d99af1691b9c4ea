//! `strata train --nproc 2` (two ranks on this machine through mpirun): the report carries
//! every rank's figures, the gradients live in the buckets (each rank's run peak stays
//! within one process's at the same per-rank batch plus the buckets), ZeRO shards Adam's
//! state as PyTorch's partition says, `strata plan --nproc 2` predicts each rank's figures
//! to the byte, and a rank that dies ends the whole job quickly, its last checkpoint intact
//! and resumable.
#![cfg(feature = "mpi")]

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use strata_dist::launch::run_bounded;

const DATA: &str = "/usr/share/datasets/fashion-mnist";

/// The slice of Fashion-MNIST, model and batch every run here uses.
const RUN: [&str; 10] = [
    "--model",
    "mlp",
    "--batch-size",
    "64",
    "--train-samples",
    "1024",
    "--test-samples",
    "256",
    "--data-dir",
    DATA,
];

/// `strata train` for one epoch of [`RUN`], with `args`.
fn strata(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.args(["train", "--epochs", "1"])
        .args(RUN)
        .args(args)
        .env_remove("STRATA_CRASH_AT")
        .env_remove("STRATA_CRASH_RANK");
    cmd
}

/// Runs `cmd` (bounded) and returns its report JSON.
fn report(cmd: &mut Command, json: &std::path::Path) -> Value {
    cmd.arg("--report-json").arg(json);
    let out = run_bounded(cmd, Duration::from_secs(180)).unwrap();
    assert!(
        out.status.is_some_and(|s| s.success()),
        "{:?}\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

fn size(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn two_ranks_train_report_every_rank_and_shard_adam_with_zero() {
    let dir = std::env::temp_dir().join(format!("strata-distributed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let one = report(&mut strata(&[]), &dir.join("one.json"));
    let ddp = report(&mut strata(&["--nproc", "2"]), &dir.join("ddp.json"));
    let zero = report(
        &mut strata(&["--nproc", "2", "--zero"]),
        &dir.join("zero.json"),
    );

    // The mlp: 784·1024 + 1024 + 1024·1024 + 1024 + 1024·10 + 10 parameters, 4 bytes each.
    let params: u64 = 4 * (784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
    assert!(ddp["test_accuracy"].as_f64().unwrap() > 0.5, "{ddp}");
    assert_eq!(ddp["world_size"], 2);
    let ranks = ddp["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for (r, rank) in ranks.iter().enumerate() {
        assert_eq!(size(rank, "rank"), r as u64);
        assert!(size(rank, "threads") >= 1);
        // Parameters, the buckets (every gradient, as a view), Adam's two moments.
        assert_eq!(size(rank, "persistent_bytes"), params + params + 2 * params);
        // Gradients live in the buckets, not beside them.
        assert!(
            size(rank, "run_peak_allocated") <= size(&one, "run_peak_allocated") + params,
            "rank {r}: {rank} against one process's {}",
            size(&one, "run_peak_allocated")
        );
        assert!(rank["allreduce_seconds_per_step"].as_f64().unwrap() > 0.0);
    }

    // ZeRO: rank 0 owns the 1024×1024 weight alone, rank 1 everything else.
    let shard0: u64 = 4 * 1024 * 1024;
    let shards = [2 * shard0, 2 * (params - shard0)];
    for (r, rank) in zero["ranks"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            size(rank, "persistent_bytes"),
            2 * params + shards[r],
            "rank {r}"
        );
    }
    let share = shard0 as f64 / params as f64;
    assert!((share - 0.5626).abs() < 1e-3, "{share}");

    // `strata plan --nproc 2` predicts every rank's figures to the byte.
    for (measured, zero) in [(&ddp, false), (&zero, true)] {
        let mut plan = Command::new(env!("CARGO_BIN_EXE_strata"));
        plan.args(["plan", "--nproc", "2"]).args(RUN);
        if zero {
            plan.arg("--zero");
        }
        let planned = report(&mut plan, &dir.join("plan.json"));
        let (planned, measured) = (
            planned["ranks"].as_array().unwrap(),
            measured["ranks"].as_array().unwrap(),
        );
        for (p, m) in planned.iter().zip(measured) {
            for key in [
                "step_peak_allocated",
                "step_peak_reserved",
                "run_peak_allocated",
                "persistent_bytes",
            ] {
                assert_eq!(p[key], m[key], "zero {zero}, rank {}: {key}", m["rank"]);
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_rank_killed_mid_run_ends_the_job_and_its_last_checkpoint_resumes_it() {
    let dir = std::env::temp_dir().join(format!("strata-distributed-kill-{}", std::process::id()));
    let ckpt = dir.join("ckpt");
    let ckpt_arg = ckpt.to_str().unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let saving = [
        "--nproc",
        "2",
        "--checkpoint-every",
        "3",
        "--checkpoint-dir",
        ckpt_arg,
    ];

    // 1024 images, 64 per rank and step: 8 steps, checkpoints after steps 3 and 6. Rank 1
    // dies in step 5.
    let mut cmd = strata(&saving);
    cmd.env("STRATA_CRASH_AT", "after-backward:5")
        .env("STRATA_CRASH_RANK", "1");
    let out = run_bounded(&mut cmd, Duration::from_secs(60)).unwrap();
    let status = out.status.expect("the job must end by itself, not hang");
    assert!(!status.success());
    assert!(
        out.stderr.contains("rank 1") && out.stderr.contains("the job of 2 ranks failed"),
        "{}",
        out.stderr
    );
    let written: Vec<String> = std::fs::read_dir(&ckpt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ckpt"))
        .collect();
    assert_eq!(written, vec!["step-00000003.ckpt".to_string()]);
    let summary = strata_cli::train::checkpoint_summary(&ckpt.join(&written[0])).unwrap();
    assert_eq!(summary.step, 3, "the last checkpoint is intact");

    // Resumed on two ranks, the run ends as the uninterrupted one does.
    let mut resume = strata(&saving);
    resume.args(["--resume", ckpt_arg]);
    let resumed = report(&mut resume, &dir.join("resumed.json"));
    let whole = report(&mut strata(&["--nproc", "2"]), &dir.join("whole.json"));
    assert!(resumed["resumed_from"]
        .as_str()
        .unwrap()
        .ends_with("step-00000003.ckpt"));
    for key in ["test_accuracy", "test_loss", "train_loss"] {
        assert_eq!(resumed[key], whole[key], "{key}");
    }
    // A checkpoint of two ranks does not resume on one.
    let mut one = Command::new(env!("CARGO_BIN_EXE_strata"));
    one.args(["train", "--epochs", "1"])
        .args(RUN)
        .args(["--nproc", "1", "--resume", ckpt_arg]);
    let out = run_bounded(&mut one, Duration::from_secs(60)).unwrap();
    assert!(!out.status.is_some_and(|s| s.success()));
    assert!(out.stderr.contains("--nproc"), "{}", out.stderr);
    std::fs::remove_dir_all(&dir).ok();
}
