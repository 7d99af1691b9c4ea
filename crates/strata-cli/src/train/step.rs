//! One training step: forward, loss, backward, the optimizer step and the scaler's update.
//! With `--on-oom split`, a step that runs out of memory in forward or backward is put back
//! as it was (gradients, BatchNorm buffers, the random generator) and run again in parts
//! whose losses are weighted by their share of the batch, so their gradients add up to the
//! full batch's.

use strata::core::autocast::autocast;
use strata::core::autograd::GradModeGuard;
use strata::core::nn::functional::{cross_entropy, Reduction};
use strata::core::random::global_generator;
use strata::core::{DType, Device, Error, Tensor};
use strata::nn::amp::{GradScaler, GradScalerState};
use strata::nn::optim::{clip_grad_norm_, Adam, Optimizer, ParamGroup, Rule, Sgd};
use strata::nn::state::StateDict;

use crate::crash;

use super::models::Model;
use super::recipe;
use super::{OptimizerKind, Result, TrainError, TrainOptions};

/// What to do when a step runs out of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnOom {
    /// Stop the run with the allocator's report.
    #[default]
    Fail,
    /// Run the step again as two halves (four quarters if a half does not fit, and so on),
    /// accumulating their gradients.
    Split,
}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepOutcome {
    /// The batch's mean loss (`None` on the meta device, which has no values).
    pub loss: Option<f32>,
    /// Parts the batch ran in: 1 unless the step was split.
    pub parts: usize,
}

/// Runs steps: the optimizer, the loss scaler with f16, and the out-of-memory policy; for
/// the gpt also its learning-rate schedule and gradient clipping.
pub struct Stepper {
    opt: Optimizer,
    scaler: Option<GradScaler>,
    amp: Option<DType>,
    on_oom: OnOom,
    /// The peak of the gpt's learning-rate schedule.
    scheduled: Option<f64>,
    /// The total gradient norm is clipped to this before each step.
    clip: Option<f64>,
    /// Optimizer steps taken.
    steps: usize,
}

/// The logits and targets as rows for the cross-entropy: `[N, classes]` and `[N]` (a
/// language model's `[B, T, vocab]` and `[B, T]` become `B·T` rows; views, no copy).
pub(crate) fn loss_rows(logits: &Tensor, y: &Tensor) -> Result<(Tensor, Tensor)> {
    let classes = logits.shape().last().copied().unwrap_or(1) as i64;
    Ok((logits.reshape(&[-1, classes])?, y.reshape(&[-1])?))
}

/// Samples in the batch `y` holds targets for (its first dimension).
fn batch_len(y: &Tensor) -> usize {
    y.shape().first().copied().unwrap_or(1)
}

/// The state a split step restores before running in parts.
struct StepStart {
    grads: Vec<(Tensor, Option<Tensor>)>,
    buffers: Vec<(Tensor, Tensor)>,
    rng: Vec<u8>,
}

impl StepStart {
    fn save(model: &Model) -> Result<StepStart> {
        let _no_grad = GradModeGuard::no_grad();
        let module = model.module();
        let grads = module
            .parameters()
            .into_iter()
            .map(|p| {
                let g = p.grad().map(|g| g.deep_clone()).transpose()?;
                Ok((p, g))
            })
            .collect::<Result<Vec<_>>>()?;
        let buffers = module
            .named_buffers()
            .into_iter()
            .map(|(_, b)| Ok((b.deep_clone()?, b)))
            .collect::<Result<Vec<_>>>()?;
        Ok(StepStart {
            grads,
            buffers,
            rng: global_generator().get_state(),
        })
    }

    fn restore(&self) -> Result<()> {
        let _no_grad = GradModeGuard::no_grad();
        for (p, g) in &self.grads {
            p.set_grad(g.as_ref().map(Tensor::deep_clone).transpose()?)?;
        }
        for (saved, live) in &self.buffers {
            live.copy_(saved)?;
        }
        global_generator().set_state(&self.rng)?;
        Ok(())
    }
}

fn is_out_of_memory(e: &TrainError) -> bool {
    matches!(e, TrainError::Core(Error::OutOfMemory { .. }))
}

/// The update `o` names (with the gpt recipe's betas when `recipe`).
pub(crate) fn optimizer_rule(o: &TrainOptions, recipe: bool) -> Rule {
    match o.optimizer {
        OptimizerKind::Sgd => Rule::Sgd(Sgd {
            lr: o.lr,
            momentum: o.momentum,
            weight_decay: o.weight_decay,
            ..Sgd::default()
        }),
        OptimizerKind::Adam | OptimizerKind::Adamw => Rule::Adam(Adam {
            lr: o.lr,
            weight_decay: o.weight_decay,
            betas: if recipe {
                recipe::BETAS
            } else {
                Adam::default().betas
            },
            decoupled_weight_decay: o.optimizer == OptimizerKind::Adamw,
            ..Adam::default()
        }),
    }
}

impl Stepper {
    /// The optimizer `o` names over `model`'s parameters, stepping inside backward when
    /// asked, with a loss scaler for f16.
    pub fn new(model: &Model, o: &TrainOptions) -> Result<Stepper> {
        if o.amp == Some(DType::F16) && o.optimizer_in_backward {
            return Err(TrainError::Options(
                "--amp f16 needs a loss scaler, which steps after backward: it cannot be used \
                 with --optimizer-in-backward (use --amp bf16)"
                    .into(),
            ));
        }
        if o.on_oom == OnOom::Split && o.optimizer_in_backward {
            return Err(TrainError::Options(
                "--on-oom split accumulates the parts' gradients before stepping, and \
                 --optimizer-in-backward steps inside each backward: use one or the other"
                    .into(),
            ));
        }
        let recipe = model.gpt().is_some();
        if recipe && o.optimizer_in_backward {
            return Err(TrainError::Options(
                "the gpt's recipe clips the total gradient norm, which needs every gradient \
                 before any parameter steps: it cannot be used with --optimizer-in-backward"
                    .into(),
            ));
        }
        let params = model.module().parameters();
        let rule = optimizer_rule(o, recipe);
        let groups = if recipe {
            recipe::decay_groups(params, o.weight_decay)
        } else {
            vec![ParamGroup::new(params)]
        };
        let mut opt = Optimizer::with_groups(groups, rule)?;
        if o.optimizer_in_backward {
            opt.set_step_in_backward(true)?;
        }
        Ok(Stepper {
            opt,
            scaler: (o.amp == Some(DType::F16)).then(GradScaler::new),
            amp: o.amp,
            on_oom: o.on_oom,
            scheduled: recipe.then_some(o.lr),
            clip: recipe.then_some(recipe::CLIP_NORM),
            steps: 0,
        })
    }

    /// What a checkpoint keeps of the stepper: the optimizer's state dict (step counts and
    /// learning rates included), the loss scaler's state, and the steps taken (where the
    /// gpt's learning-rate schedule is).
    pub(crate) fn state(&self) -> (StateDict, Option<GradScalerState>, usize) {
        (
            self.opt.state_dict(),
            self.scaler.as_ref().map(GradScaler::state_dict),
            self.steps,
        )
    }

    /// Puts back what [`Stepper::state`] gave.
    pub(crate) fn restore(
        &mut self,
        optimizer: &StateDict,
        scaler: Option<&GradScalerState>,
        steps: usize,
    ) -> Result<()> {
        self.opt.load_state_dict(optimizer)?;
        match (&mut self.scaler, scaler) {
            (Some(ours), Some(saved)) => ours.load_state_dict(saved)?,
            (None, None) => {}
            _ => {
                return Err(TrainError::Options(
                    "the checkpoint's loss scaler does not match this run's --amp".into(),
                ))
            }
        }
        self.steps = steps;
        Ok(())
    }

    /// One step on the batch `(x, y)`; `after_forward` runs once, when the first forward
    /// has returned (the measured step lists the holders of memory there).
    pub fn step(
        &mut self,
        model: &Model,
        x: &Tensor,
        y: &Tensor,
        after_forward: &mut dyn FnMut(),
    ) -> Result<StepOutcome> {
        if self.on_oom == OnOom::Fail {
            return self.step_in_parts(model, x, y, 1, after_forward);
        }
        let start = StepStart::save(model)?;
        let b = batch_len(y);
        let mut parts = 1;
        loop {
            match self.backward_in_parts(model, x, y, parts, after_forward) {
                Ok(loss) => return self.finish(loss, parts),
                Err(e) if is_out_of_memory(&e) && parts < b => {
                    // Whatever the failed attempt made is dropped by now; put the step back.
                    start.restore()?;
                    parts = (parts * 2).min(b);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One step with the batch run in `parts` parts, gradients accumulated, whatever the
    /// memory: what a split step does, callable directly.
    pub fn step_in_parts(
        &mut self,
        model: &Model,
        x: &Tensor,
        y: &Tensor,
        parts: usize,
        after_forward: &mut dyn FnMut(),
    ) -> Result<StepOutcome> {
        let loss = self.backward_in_parts(model, x, y, parts, after_forward)?;
        self.finish(loss, parts)
    }

    /// Forward and backward of each part, each loss weighted by its share of the batch.
    /// Returns the weighted losses' sum (a tensor per part, read at the end).
    fn backward_in_parts(
        &mut self,
        model: &Model,
        x: &Tensor,
        y: &Tensor,
        parts: usize,
        after_forward: &mut dyn FnMut(),
    ) -> Result<Vec<Tensor>> {
        let b = batch_len(y);
        if parts == 0 || parts > b {
            return Err(TrainError::Options(format!(
                "a batch of {b} cannot run in {parts} parts"
            )));
        }
        let mut losses = Vec::with_capacity(parts);
        let mut first = true;
        for k in 0..parts {
            let (start, end) = (k * b / parts, (k + 1) * b / parts);
            let len = end - start;
            let (xk, yk) = if parts == 1 {
                (x.clone(), y.clone())
            } else {
                (
                    x.narrow(0, start as i64, len)?,
                    y.narrow(0, start as i64, len)?,
                )
            };
            let loss = {
                let _region = self.amp.map(autocast).transpose()?;
                let logits = model.forward(&xk)?;
                if first {
                    after_forward();
                    first = false;
                }
                let (logits, yk) = loss_rows(&logits, &yk)?;
                let loss = cross_entropy(&logits, &yk, Reduction::Mean)?;
                if parts == 1 {
                    loss
                } else {
                    loss.mul(len as f64 / b as f64)?
                }
            };
            match &mut self.scaler {
                Some(scaler) => scaler.scale(&loss)?.backward()?,
                None => loss.backward()?,
            }
            losses.push(loss.detach()?);
        }
        crash::point("after-backward");
        Ok(losses)
    }

    /// The schedule's learning rate for this step and the gradients clipped, when the
    /// recipe has them (unscaled first with f16, as PyTorch's recipe does).
    fn prepare_step(&mut self) -> std::result::Result<(), Error> {
        if let Some(peak) = self.scheduled {
            let lr = recipe::learning_rate(self.steps, peak);
            for g in 0..self.opt.group_count() {
                self.opt.set_lr(g, lr)?;
            }
        }
        if let Some(max_norm) = self.clip {
            if let Some(scaler) = &mut self.scaler {
                scaler.unscale_(&mut self.opt)?;
            }
            clip_grad_norm_(&self.opt.parameters(), max_norm, 2.0, false)?;
        }
        Ok(())
    }

    /// The optimizer step (through the scaler with f16), gradients cleared, the loss read.
    /// Running out of memory here ends the run: the step cannot be split.
    fn finish(&mut self, losses: Vec<Tensor>, parts: usize) -> Result<StepOutcome> {
        let prepared = self.prepare_step();
        let stepped = prepared.and_then(|()| match &mut self.scaler {
            Some(scaler) => scaler
                .step(&mut self.opt)
                .map(|_| ())
                .and_then(|_| scaler.update()),
            None => self.opt.step(),
        });
        stepped.map_err(|e| match e {
            Error::OutOfMemory { .. } if self.on_oom == OnOom::Split => {
                TrainError::Options(format!(
                    "out of memory in the optimizer step, which cannot be split: {e}. Raise \
                     --memory-limit or use an optimizer with less state (sgd)"
                ))
            }
            e => e.into(),
        })?;
        crash::point("after-step");
        self.opt.zero_grad(true)?;
        self.steps += 1;
        let loss = match losses.first().map(Tensor::device) {
            Some(Device::Meta) | None => None,
            Some(_) => {
                let mut sum = 0f32;
                for l in &losses {
                    sum += l.to(DType::F32)?.item::<f32>()?;
                }
                Some(sum)
            }
        };
        Ok(StepOutcome { loss, parts })
    }
}
