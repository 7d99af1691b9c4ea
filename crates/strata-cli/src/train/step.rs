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
use strata::nn::amp::GradScaler;
use strata::nn::optim::{Adam, Optimizer, Sgd};

use super::models::Model;
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

/// Runs steps: the optimizer, the loss scaler with f16, and the out-of-memory policy.
pub struct Stepper {
    opt: Optimizer,
    scaler: Option<GradScaler>,
    amp: Option<DType>,
    on_oom: OnOom,
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
        let params = model.module().parameters();
        let mut opt = match o.optimizer {
            OptimizerKind::Sgd => Optimizer::sgd(
                params,
                Sgd {
                    lr: o.lr,
                    momentum: o.momentum,
                    weight_decay: o.weight_decay,
                    ..Sgd::default()
                },
            )?,
            OptimizerKind::Adam | OptimizerKind::Adamw => {
                let config = Adam {
                    lr: o.lr,
                    weight_decay: o.weight_decay,
                    ..Adam::default()
                };
                if o.optimizer == OptimizerKind::Adam {
                    Optimizer::adam(params, config)?
                } else {
                    Optimizer::adamw(params, config)?
                }
            }
        };
        if o.optimizer_in_backward {
            opt.set_step_in_backward(true)?;
        }
        Ok(Stepper {
            opt,
            scaler: (o.amp == Some(DType::F16)).then(GradScaler::new),
            amp: o.amp,
            on_oom: o.on_oom,
        })
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
        let b = y.numel();
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
        let b = y.numel();
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
        Ok(losses)
    }

    /// The optimizer step (through the scaler with f16), gradients cleared, the loss read.
    /// Running out of memory here ends the run: the step cannot be split.
    fn finish(&mut self, losses: Vec<Tensor>, parts: usize) -> Result<StepOutcome> {
        let stepped = match &mut self.scaler {
            Some(scaler) => scaler
                .step(&mut self.opt)
                .map(|_| ())
                .and_then(|_| scaler.update()),
            None => self.opt.step(),
        };
        stepped.map_err(|e| match e {
            Error::OutOfMemory { .. } if self.on_oom == OnOom::Split => {
                TrainError::Options(format!(
                    "out of memory in the optimizer step, which cannot be split: {e}. Raise \
                     --memory-limit or use an optimizer with less state (sgd)"
                ))
            }
            e => e.into(),
        })?;
        self.opt.zero_grad(true)?;
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
