//! What several subcommands' drivers share: the training options built from the flags,
//! `--batch-size auto`, the JSON report and loading a snapshot.

use std::path::{Path, PathBuf};

use strata_cli::train::{default_data_dir, recipe, Fit, OptimizerKind, TrainOptions};

use crate::cli::args::{CommonArgs, StepArgs, WindowArgs};

/// The options `common` sets (one epoch; the model's batch size where none is given or it
/// is `auto`; the model's data directory unless `--data-dir` names one).
pub(crate) fn options(common: &CommonArgs) -> TrainOptions {
    let model = common.model;
    TrainOptions {
        model,
        epochs: 1,
        batch_size: common
            .batch_size
            .and_then(|b| b.0)
            .unwrap_or(model.default_batch_size()),
        workers: common.workers,
        prefetch: Some(common.prefetch),
        data_dir: common
            .data_dir
            .clone()
            .unwrap_or_else(|| default_data_dir(model)),
        test_samples: common.test_samples,
        ..Default::default()
    }
}

/// True when `common` asks for `--batch-size auto`.
pub(crate) fn batch_size_auto(common: &CommonArgs) -> bool {
    matches!(common.batch_size, Some(b) if b.0.is_none())
}

/// The options `step` sets on top of `common`'s; the optimizer and weight decay default to
/// the model's recipe (Adam without decay, or the gpt's AdamW with 0.1).
pub(crate) fn step_options(common: &CommonArgs, step: StepArgs) -> TrainOptions {
    let language = common.model.is_language_model();
    TrainOptions {
        lr: step.lr,
        optimizer: step.optimizer.unwrap_or(if language {
            OptimizerKind::Adamw
        } else {
            OptimizerKind::Adam
        }),
        momentum: step.momentum,
        weight_decay: step.weight_decay.unwrap_or(if language {
            recipe::WEIGHT_DECAY
        } else {
            0.0
        }),
        seed: step.seed,
        memory_limit: step.memory_limit,
        train_samples: step.train_samples,
        amp: match step.amp.as_deref() {
            Some("bf16") => Some(strata::core::DType::BF16),
            Some(_) => Some(strata::core::DType::F16),
            None => None,
        },
        optimizer_in_backward: step.optimizer_in_backward,
        checkpoint_activations: step.checkpoint_activations,
        on_oom: step.on_oom,
        ..options(common)
    }
}

/// `--batch-size auto`: the largest batch size `plan --fit` finds under the memory limit.
pub(crate) fn auto_batch_size(o: &TrainOptions) -> Result<Fit, String> {
    let Some(limit) = o.memory_limit else {
        return Err("--batch-size auto needs --memory-limit, the memory to fit in".into());
    };
    strata_cli::train::fit(o, limit).map_err(|e| e.to_string())
}

/// Writes `value` as pretty JSON to `path`, when there is one (`--report-json`).
pub(crate) fn write_json(
    path: &Option<PathBuf>,
    value: &impl serde::Serialize,
) -> Result<(), String> {
    if let Some(path) = path {
        let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Checks, before any long work, that a file can be written at `path` (when there is one):
/// its folder exists and it is not a folder itself.
pub(crate) fn check_output(path: Option<&Path>) -> Result<(), String> {
    let Some(path) = path else {
        return Ok(());
    };
    if path.is_dir() {
        return Err(format!("{} is a folder; name a file", path.display()));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(dir) = parent {
        if !dir.is_dir() {
            return Err(format!(
                "cannot write {}: the folder {} does not exist",
                path.display(),
                dir.display()
            ));
        }
    }
    Ok(())
}

/// Loads the snapshot at `path` and keeps `window` of its traces, telling on stderr (as
/// `strata <command>`) what it skipped or why it cannot be read.
pub(crate) fn load(
    path: &Path,
    command: &str,
    window: WindowArgs,
) -> Option<strata::alloc::Snapshot> {
    let mut snap = match strata::alloc::Snapshot::load_with_notes(path) {
        Ok((snap, notes)) => {
            if notes.skipped_trace_entries() > 0 {
                eprintln!(
                    "strata {command}: skipped {} trace entries of actions strata does not replay",
                    notes.skipped_trace_entries()
                );
            }
            snap
        }
        Err(e) => {
            eprintln!("strata {command}: {}: {e}", path.display());
            return None;
        }
    };
    if window.from.is_some() || window.to.is_some() {
        if let Err(e) = snap.restrict(window.from, window.to) {
            eprintln!("strata {command}: {e}");
            return None;
        }
    }
    Some(snap)
}
