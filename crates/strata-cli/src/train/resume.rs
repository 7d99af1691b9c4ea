//! What lets a run survive being killed: checkpoints written as it goes, and a run resumed
//! from the newest intact one with everything its future depends on put back, so that it
//! ends bit for bit as the uninterrupted run would have.

use std::collections::BTreeMap;
use std::path::PathBuf;

use strata::core::random::global_generator;
use strata::core::Device;
use strata::data::Dataset;
use strata::nn::amp::GradScalerState;
use strata::nn::state::{LoadOptions, StateDict, StateDictExt};

use super::checkpoint::{self, data_key, differences, run_key, Checkpoint, Manifest};
use super::data::Data;
use super::figures::Figures;
use super::models::Model;
use super::step::Stepper;
use super::{Result, TrainError, TrainOptions};

/// Where and how often a run writes checkpoints: every `every` steps (when given) and at
/// the end of each epoch (of each round between evaluations for a model trained by steps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoints {
    /// The folder (made if missing).
    pub dir: PathBuf,
    /// Steps between two checkpoints within an epoch.
    pub every: Option<usize>,
    /// How many of the newest checkpoints to keep (at least 1).
    pub keep: usize,
}

/// Resuming a run from the newest intact checkpoint in a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The folder.
    pub dir: PathBuf,
    /// Start from the beginning when the folder holds no intact checkpoint (or does not
    /// exist) instead of failing.
    pub or_start: bool,
}

/// Where a resumed run picks up.
pub(crate) struct Resumed {
    /// Optimizer steps already taken.
    pub step: usize,
    /// The report's figures so far.
    pub figures: Figures,
    /// The checkpoint it came from.
    pub from: PathBuf,
}

/// A run's checkpointing: the keys a checkpoint must match, and where new ones go.
pub(crate) struct Durability {
    checkpoints: Option<Checkpoints>,
    run: BTreeMap<String, String>,
    data: BTreeMap<String, String>,
}

impl Durability {
    /// `None` when `o` neither writes checkpoints nor resumes.
    pub(crate) fn new(o: &TrainOptions, train: &Data, test: &Data) -> Result<Option<Durability>> {
        if o.checkpoints.is_none() && o.resume.is_none() {
            return Ok(None);
        }
        check_options(o)?;
        let (Some(train), Some(test)) = (train.dataset(), test.dataset()) else {
            return Err(TrainError::Options(
                "checkpoints need the run's datasets".into(),
            ));
        };
        Self::keyed(o, train.as_ref(), test.as_ref()).map(Some)
    }

    /// [`Durability::new`] for the run's training and test datasets themselves.
    pub(crate) fn for_datasets(
        o: &TrainOptions,
        train: &dyn Dataset,
        test: &dyn Dataset,
    ) -> Result<Option<Durability>> {
        if o.checkpoints.is_none() && o.resume.is_none() {
            return Ok(None);
        }
        check_options(o)?;
        Self::keyed(o, train, test).map(Some)
    }

    /// The checkpointing `o` asks for, keyed by its options and its datasets.
    fn keyed(o: &TrainOptions, train: &dyn Dataset, test: &dyn Dataset) -> Result<Durability> {
        Ok(Durability {
            checkpoints: o.checkpoints.clone(),
            run: run_key(o),
            data: data_key(train, test)?,
        })
    }

    /// Steps between checkpoints within an epoch, when checkpoints are written.
    pub(crate) fn every(&self) -> Option<usize> {
        self.checkpoints.as_ref().and_then(|c| c.every)
    }

    /// Puts back the newest intact checkpoint of `o.resume`'s folder: the model's weights
    /// and buffers, the optimizer and the loss scaler, the random generator. What was
    /// wrong with newer ones goes to `notes`. `None`: nothing to resume from, and
    /// `--resume-or-start` says to start afresh.
    pub(crate) fn resume(
        &self,
        o: &TrainOptions,
        model: &Model,
        stepper: &mut Stepper,
        notes: &mut Vec<String>,
    ) -> Result<Option<Resumed>> {
        let Some((resumed, c)) = self.resume_model(o, model, notes)? else {
            return Ok(None);
        };
        let scaler = c.manifest.scaler.map(Into::into);
        stepper.restore(&c.optimizer, scaler.as_ref(), c.manifest.step)?;
        Ok(Some(resumed))
    }

    /// [`Durability::resume`] up to the optimizer: finds the newest intact checkpoint this
    /// run can resume from, puts back the model and the random generator, and returns the
    /// checkpoint for the caller to restore its optimizer from.
    pub(crate) fn resume_model(
        &self,
        o: &TrainOptions,
        model: &Model,
        notes: &mut Vec<String>,
    ) -> Result<Option<(Resumed, Checkpoint)>> {
        let Some(r) = &o.resume else {
            return Ok(None);
        };
        let folder = r.dir.display();
        let checkpoint::Newest { found, problems } = if r.dir.is_dir() {
            checkpoint::newest(&r.dir)?
        } else {
            checkpoint::Newest {
                found: None,
                problems: Vec::new(),
            }
        };
        notes.extend(
            problems
                .iter()
                .map(|p| format!("skipped a checkpoint: {p}")),
        );
        let Some((path, c)) = found else {
            let why = match (r.dir.is_dir(), problems.is_empty()) {
                (false, _) => format!("{folder} does not exist"),
                (true, true) => format!("{folder} holds none"),
                (true, false) => problems.join("; "),
            };
            if r.or_start {
                notes.push(format!(
                    "no intact checkpoint ({why}): started from the beginning"
                ));
                return Ok(None);
            }
            return Err(TrainError::Options(format!(
                "--resume {folder}: no intact checkpoint ({why}). Add --resume-or-start to \
                 start from the beginning when there is none"
            )));
        };
        let mut diffs = differences(&c.manifest.run, &self.run);
        diffs.extend(differences(&c.manifest.data, &self.data));
        if !diffs.is_empty() {
            return Err(TrainError::Options(format!(
                "cannot resume from {}: {}. Resume with the options and data it was written \
                 with, or write this run's checkpoints to another folder",
                path.display(),
                diffs.join("; ")
            )));
        }
        model
            .module()
            .load_state_dict(&c.model, LoadOptions::default())?;
        let state = from_hex(&c.manifest.generator).ok_or_else(|| {
            TrainError::Options(format!(
                "{}: the generator state is not hex",
                path.display()
            ))
        })?;
        global_generator().set_state(&state)?;
        let resumed = Resumed {
            step: c.manifest.step,
            figures: c.manifest.figures.clone(),
            from: path,
        };
        Ok(Some((resumed, c)))
    }

    /// Writes the checkpoint after `step` steps, when the run writes checkpoints.
    pub(crate) fn save(
        &self,
        model: &Model,
        stepper: &Stepper,
        step: usize,
        figures: &Figures,
    ) -> Result<()> {
        let (optimizer, scaler, _) = stepper.state();
        self.save_state(model, optimizer, scaler, step, figures)
    }

    /// [`Durability::save`] with the optimizer's state given (a sharded optimizer gathers
    /// it first).
    pub(crate) fn save_state(
        &self,
        model: &Model,
        optimizer: StateDict,
        scaler: Option<GradScalerState>,
        step: usize,
        figures: &Figures,
    ) -> Result<()> {
        let Some(c) = &self.checkpoints else {
            return Ok(());
        };
        let manifest = Manifest {
            run: self.run.clone(),
            data: self.data.clone(),
            step,
            generator: to_hex(&global_generator().get_state()),
            scaler: scaler.as_ref().map(Into::into),
            figures: figures.clone(),
        };
        let checkpoint = Checkpoint {
            manifest,
            model: model.module().state_dict(),
            optimizer,
        };
        checkpoint::save(&c.dir, c.keep, &checkpoint)?;
        Ok(())
    }

    /// Adds `flag` = `value` to what a checkpoint must match to be resumed from (a
    /// distributed run's world size and sharding).
    pub(crate) fn require(mut self, flag: &str, value: String) -> Self {
        self.run.insert(flag.to_owned(), value);
        self
    }
}

/// What no run that writes or resumes checkpoints can ask for.
fn check_options(o: &TrainOptions) -> Result<()> {
    if o.device != Device::Cpu {
        return Err(TrainError::Options(format!(
            "checkpoints hold the run's values and --device {} has none to save: \
             checkpoint or resume runs on --device cpu",
            o.device
        )));
    }
    if let Some(c) = &o.checkpoints {
        if c.every == Some(0) || c.keep == 0 {
            return Err(TrainError::Options(
                "--checkpoint-every and --keep must be at least 1".into(),
            ));
        }
    }
    Ok(())
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::models::{Model, ModelKind};
    use strata::data::Split;

    /// Dropout draws from the global generator; none of the built-in models has dropout, so
    /// the end-to-end crash tests cannot see whether its state comes back. This does.
    #[test]
    fn resuming_puts_the_random_generator_back_where_the_checkpoint_left_it() {
        let dir = tempfile::tempdir().unwrap();
        let o = TrainOptions {
            data_dir: PathBuf::from(strata::data::FashionMnist::DEFAULT_DIR),
            train_samples: Some(64),
            test_samples: Some(64),
            workers: 0,
            prefetch: None,
            checkpoints: Some(Checkpoints {
                dir: dir.path().to_owned(),
                every: None,
                keep: 1,
            }),
            resume: Some(Resume {
                dir: dir.path().to_owned(),
                or_start: false,
            }),
            ..TrainOptions::default()
        };
        let train = Data::new(&o, Split::Train, None).unwrap();
        let test = Data::new(&o, Split::Test, None).unwrap();
        let model = Model::build(ModelKind::Mlp, None).unwrap();
        let mut stepper = Stepper::new(&model, &o).unwrap();
        let d = Durability::new(&o, &train, &test).unwrap().unwrap();
        let draws = || {
            (0..5)
                .map(|_| global_generator().next_u32())
                .collect::<Vec<_>>()
        };
        strata::core::manual_seed(11);
        draws();
        d.save(&model, &stepper, 3, &Figures::default()).unwrap();
        let after_the_checkpoint = draws();
        strata::core::manual_seed(12);
        let mut notes = Vec::new();
        let r = d
            .resume(&o, &model, &mut stepper, &mut notes)
            .unwrap()
            .unwrap();
        assert_eq!(r.step, 3);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(draws(), after_the_checkpoint);
    }

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(from_hex(&to_hex(&bytes)), Some(bytes.to_vec()));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
    }
}
