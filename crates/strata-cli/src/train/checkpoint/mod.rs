//! Training checkpoints: everything a run's future depends on, written atomically with a
//! checksum every N steps and at the end of each epoch, and the newest intact one found
//! again to resume from.
//!
//! A checkpoint is one file, `step-00001234.ckpt` (the optimizer steps taken), framed as
//! [`file`] describes around a safetensors payload: the model's state dict under `model/`,
//! the optimizer's under `optimizer/` (its metadata too), and in the metadata key
//! `strata.manifest` the [`Manifest`] as JSON.

mod file;
mod key;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata::nn::amp::GradScalerState;
use strata::nn::state::StateDict;

pub use file::FileError;
pub(crate) use key::{data_key, differences, run_key};

use super::figures::Figures;

/// The manifest's metadata key in the payload.
const MANIFEST: &str = "strata.manifest";
const MODEL: &str = "model/";
const OPTIMIZER: &str = "optimizer/";

/// What a checkpoint says besides its tensors.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Manifest {
    /// The options that shape the run's values, by flag (see [`run_key`]).
    pub run: BTreeMap<String, String>,
    /// The training and test data's sizes and digests (see [`data_key`]).
    pub data: BTreeMap<String, String>,
    /// Optimizer steps taken.
    pub step: usize,
    /// The global random generator's state (weights, dropout), in hex.
    pub generator: String,
    /// The f16 loss scaler's state.
    pub scaler: Option<ScalerBits>,
    /// The report's running figures.
    pub figures: Figures,
}

/// A [`GradScalerState`] with its floats as bits.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct ScalerBits {
    scale: u32,
    growth_factor: u64,
    backoff_factor: u64,
    growth_interval: u32,
    growth_tracker: u32,
}

impl From<&GradScalerState> for ScalerBits {
    fn from(s: &GradScalerState) -> Self {
        ScalerBits {
            scale: s.scale.to_bits(),
            growth_factor: s.growth_factor.to_bits(),
            backoff_factor: s.backoff_factor.to_bits(),
            growth_interval: s.growth_interval,
            growth_tracker: s.growth_tracker,
        }
    }
}

impl From<ScalerBits> for GradScalerState {
    fn from(s: ScalerBits) -> Self {
        GradScalerState {
            scale: f32::from_bits(s.scale),
            growth_factor: f64::from_bits(s.growth_factor),
            backoff_factor: f64::from_bits(s.backoff_factor),
            growth_interval: s.growth_interval,
            growth_tracker: s.growth_tracker,
        }
    }
}

/// A checkpoint's contents.
pub(crate) struct Checkpoint {
    pub manifest: Manifest,
    /// The model's state dict (parameters and buffers).
    pub model: StateDict,
    /// The optimizer's state dict.
    pub optimizer: StateDict,
}

impl Checkpoint {
    /// The payload: one safetensors file of both state dicts and the manifest.
    fn payload(&self) -> Result<Vec<u8>, FileError> {
        let mut all = StateDict::new();
        for (prefix, dict) in [(MODEL, &self.model), (OPTIMIZER, &self.optimizer)] {
            for (k, t) in dict.iter() {
                all.insert(format!("{prefix}{k}"), t.clone());
            }
        }
        for (k, v) in self.optimizer.metadata_entries() {
            all.set_metadata(format!("{OPTIMIZER}{k}"), v);
        }
        let manifest = serde_json::to_string(&self.manifest).map_err(|e| FileError::Invalid {
            path: PathBuf::from("<manifest>"),
            message: e.to_string(),
        })?;
        all.set_metadata(MANIFEST, manifest);
        all.to_bytes().map_err(|e| FileError::Invalid {
            path: PathBuf::from("<payload>"),
            message: e.to_string(),
        })
    }

    /// Reads a payload that came from `path`.
    fn from_payload(bytes: &[u8], path: &Path) -> Result<Checkpoint, FileError> {
        let bad = |message: String| FileError::Invalid {
            path: path.to_owned(),
            message,
        };
        let all = StateDict::from_bytes(bytes, path).map_err(|e| bad(e.to_string()))?;
        let text = all
            .metadata(MANIFEST)
            .ok_or_else(|| bad(format!("no {MANIFEST} in its metadata")))?;
        let manifest: Manifest =
            serde_json::from_str(text).map_err(|e| bad(format!("its manifest: {e}")))?;
        let (mut model, mut optimizer) = (StateDict::new(), StateDict::new());
        for (k, t) in all.iter() {
            if let Some(k) = k.strip_prefix(MODEL) {
                model.insert(k, t.clone());
            } else if let Some(k) = k.strip_prefix(OPTIMIZER) {
                optimizer.insert(k, t.clone());
            } else {
                return Err(bad(format!("the tensor {k:?} belongs to neither part")));
            }
        }
        for (k, v) in all.metadata_entries() {
            if let Some(k) = k.strip_prefix(OPTIMIZER) {
                optimizer.set_metadata(k, v);
            }
        }
        Ok(Checkpoint {
            manifest,
            model,
            optimizer,
        })
    }
}

/// The file name of the checkpoint after `step` steps.
pub(crate) fn file_name(step: usize) -> String {
    format!("step-{step:08}.ckpt")
}

/// The step a checkpoint's file name says, `None` for any other name.
fn step_of(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("step-")?.strip_suffix(".ckpt")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The checkpoints in `dir` by step, oldest first ("newest" is the highest step, never
/// the latest modification time).
pub(crate) fn list(dir: &Path) -> Result<Vec<(usize, PathBuf)>, FileError> {
    let io = |source| FileError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if let Some(step) = entry.file_name().to_str().and_then(step_of) {
            found.push((step, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// Writes `checkpoint` into `dir` (made if missing) and keeps the newest `keep` there,
/// removing older ones and the temporary files of interrupted writes. Returns its path.
pub(crate) fn save(dir: &Path, keep: usize, checkpoint: &Checkpoint) -> Result<PathBuf, FileError> {
    std::fs::create_dir_all(dir).map_err(|source| FileError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let name = file_name(checkpoint.manifest.step);
    file::write_atomic(dir, &name, &file::frame(checkpoint.payload()?))?;
    let all = list(dir)?;
    let old = all.len().saturating_sub(keep.max(1));
    let remove = |path: &Path| {
        std::fs::remove_file(path).map_err(|source| FileError::Io {
            path: path.to_owned(),
            source,
        })
    };
    for (_, path) in &all[..old] {
        remove(path)?;
    }
    // A write that was interrupted left its temporary file; the rename never happened.
    for entry in std::fs::read_dir(dir).map_err(|source| FileError::Io {
        path: dir.to_owned(),
        source,
    })? {
        let Ok(entry) = entry else { continue };
        let leftover = entry.file_name().to_str().is_some_and(|n| {
            n.strip_prefix('.')
                .and_then(|n| n.strip_suffix(".tmp"))
                .is_some_and(|n| step_of(n).is_some())
        });
        if leftover {
            remove(&entry.path())?;
        }
    }
    Ok(dir.join(name))
}

/// Reads and checks the checkpoint at `path`.
pub(crate) fn read(path: &Path) -> Result<Checkpoint, FileError> {
    Checkpoint::from_payload(&file::read(path)?, path)
}

/// What a checkpoint file holds, as [`summary`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Optimizer steps taken before it was written.
    pub step: usize,
    /// Tensors of the model's state dict.
    pub model_tensors: usize,
    /// Tensors of the optimizer's state dict.
    pub optimizer_tensors: usize,
    /// The run's options that a resumed run must repeat, by flag.
    pub run: BTreeMap<String, String>,
}

/// Reads the checkpoint at `path` with every check a resumed run makes (framing, length,
/// checksum, payload, manifest) and sums it up; a damaged file is an error naming what is
/// wrong.
pub fn summary(path: &Path) -> Result<Summary, FileError> {
    let c = read(path)?;
    Ok(Summary {
        step: c.manifest.step,
        model_tensors: c.model.len(),
        optimizer_tensors: c.optimizer.len(),
        run: c.manifest.run,
    })
}

/// What a folder offers to resume from.
pub(crate) struct Newest {
    /// The newest intact checkpoint and its path.
    pub found: Option<(PathBuf, Checkpoint)>,
    /// What was wrong with each newer one.
    pub problems: Vec<String>,
}

/// The newest intact checkpoint in `dir`, with what was wrong with each newer one.
pub(crate) fn newest(dir: &Path) -> Result<Newest, FileError> {
    let mut problems = Vec::new();
    for (_, path) in list(dir)?.into_iter().rev() {
        match read(&path) {
            Ok(c) => {
                return Ok(Newest {
                    found: Some((path, c)),
                    problems,
                })
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    Ok(Newest {
        found: None,
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_step_names_are_checkpoints() {
        assert_eq!(step_of("step-00001234.ckpt"), Some(1234));
        assert_eq!(step_of("step-123456789.ckpt"), Some(123_456_789));
        for other in [
            ".step-00000001.ckpt.tmp",
            "step-.ckpt",
            "step-12a.ckpt",
            "x.ckpt",
        ] {
            assert_eq!(step_of(other), None, "{other}");
        }
    }
}
