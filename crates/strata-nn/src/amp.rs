//! Loss scaling for f16 training: [`GradScaler`], PyTorch's `torch.amp.GradScaler` rules.
//!
//! f16 has a narrow exponent range, so small gradients flush to zero; the scaler multiplies
//! the loss by a large factor before backward, divides the gradients by it before the
//! optimizer steps, skips steps whose gradients overflowed, and adapts the factor. bf16 has
//! f32's exponent range and needs no scaler: with `autocast(DType::BF16)` (the CPU default)
//! train as usual.
//!
//! ```
//! use strata_core::{DType, Tensor};
//! use strata_nn::amp::GradScaler;
//! use strata_nn::optim::{Optimizer, Sgd};
//! let w = Tensor::ones(&[2], DType::F32)?.requires_grad_(true)?;
//! let mut opt = Optimizer::sgd([w.clone()], Sgd { lr: 0.1, ..Sgd::default() })?;
//! let mut scaler = GradScaler::new();
//! let loss = w.mul(&w)?.sum(None, false)?;
//! scaler.scale(&loss)?.backward()?;   // gradients are 65536 times too large
//! assert!(scaler.step(&mut opt)?);     // unscaled, finite: stepped
//! scaler.update()?;
//! assert!(w.to_vec::<f32>()?.iter().all(|x| (x - 0.8).abs() < 1e-6));
//! # Ok::<(), strata_core::Error>(())
//! ```

use std::sync::Arc;

use strata_core::{DType, Error, Result, Scalar, Tensor};

use crate::optim::clip::NormScratch;
use crate::optim::in_backward::{combination_error, scaled_loss_closed, scaled_loss_opened};
use crate::optim::Optimizer;

/// A [`GradScaler`]'s settings, PyTorch's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradScalerConfig {
    /// The first scale (65536).
    pub init_scale: f64,
    /// The factor of a growth (2).
    pub growth_factor: f64,
    /// The factor of a backoff after a skipped step (0.5).
    pub backoff_factor: f64,
    /// Steps in a row without inf or NaN before the scale grows (2000).
    pub growth_interval: u32,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        }
    }
}

/// A scaler's state, as PyTorch's `GradScaler.state_dict()`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradScalerState {
    /// The current scale.
    pub scale: f32,
    /// The growth factor.
    pub growth_factor: f64,
    /// The backoff factor.
    pub backoff_factor: f64,
    /// The growth interval.
    pub growth_interval: u32,
    /// Steps in a row without inf or NaN since the last growth or backoff.
    pub growth_tracker: u32,
}

/// Where an optimizer is in the current iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    Unscaled,
    Stepped,
}

/// One optimizer's record since the last update: its stage, and whether its gradients
/// held inf or NaN (`None`: no gradient was checked).
#[derive(Debug)]
struct Record {
    optimizer: usize,
    stage: Stage,
    found_inf: Option<bool>,
}

/// Dynamic loss scaling (see the module docs).
#[derive(Debug)]
pub struct GradScaler {
    config: GradScalerConfig,
    /// The scale, held in f32 as PyTorch does; `None` until the first [`GradScaler::scale`].
    scale: Option<f32>,
    growth_tracker: u32,
    records: Vec<Record>,
    /// Whether this scaler counts as having scaled a loss it has not updated after.
    counted: bool,
}

impl Default for GradScaler {
    fn default() -> Self {
        Self::new()
    }
}

impl GradScaler {
    /// A scaler with PyTorch's defaults.
    pub fn new() -> Self {
        GradScaler {
            config: GradScalerConfig::default(),
            scale: None,
            growth_tracker: 0,
            records: Vec::new(),
            counted: false,
        }
    }

    /// A scaler with `config`; factors must be positive (growth above 1, backoff below 1).
    pub fn with_config(config: GradScalerConfig) -> Result<Self> {
        let grows = config.growth_factor > 1.0;
        let backs_off = config.backoff_factor > 0.0 && config.backoff_factor < 1.0;
        if !grows || !backs_off {
            return Err(Error::argument(
                "GradScaler",
                format!(
                    "growth_factor must be above 1 and backoff_factor in (0, 1), got {} and {}",
                    config.growth_factor, config.backoff_factor
                ),
                None,
            ));
        }
        if config.init_scale.is_nan() || config.init_scale <= 0.0 || config.growth_interval == 0 {
            return Err(Error::argument(
                "GradScaler",
                "init_scale must be positive and growth_interval at least 1",
                None,
            ));
        }
        let mut scaler = GradScaler::new();
        scaler.config = config;
        Ok(scaler)
    }

    /// `t · scale` (the loss to call backward on).
    pub fn scale(&mut self, t: &Tensor) -> Result<Tensor> {
        let s = *self.scale.get_or_insert(self.config.init_scale as f32);
        if !self.counted {
            scaled_loss_opened();
            self.counted = true;
        }
        t.mul(Scalar::from(s as f64))
    }

    /// The current scale (the initial one before the first [`GradScaler::scale`]).
    pub fn get_scale(&self) -> f64 {
        self.scale.unwrap_or(self.config.init_scale as f32) as f64
    }

    fn current(&self, op: &'static str) -> Result<f32> {
        self.scale.ok_or_else(|| {
            Error::argument(
                op,
                "no loss was scaled yet",
                Some("call scale(loss) and backward on its result before unscaling, stepping or updating"),
            )
        })
    }

    fn record(&mut self, opt: &Optimizer) -> Option<&mut Record> {
        let id = Arc::as_ptr(&opt.inner) as usize;
        self.records.iter_mut().find(|r| r.optimizer == id)
    }

    /// Divides `opt`'s gradients in place by the scale (multiplied by its reciprocal,
    /// computed in f64 and rounded to f32) and records whether any holds inf or NaN. At most
    /// once per optimizer between updates, and not after [`GradScaler::step`]. f16
    /// gradients are refused, as in PyTorch (keep f32 master weights).
    pub fn unscale_(&mut self, opt: &mut Optimizer) -> Result<()> {
        const OP: &str = "GradScaler.unscale_";
        let scale = self.current(OP)?;
        if opt.is_stepping_in_backward() {
            return Err(combination_error(OP, "a GradScaler"));
        }
        match self.record(opt).map(|r| r.stage) {
            Some(Stage::Unscaled) => {
                return Err(Error::argument(
                    OP,
                    "unscale_() has already been called on this optimizer since the last update()",
                    Some("call it once per iteration, between backward and step"),
                ))
            }
            Some(Stage::Stepped) => {
                return Err(Error::argument(
                    OP,
                    "unscale_() is being called after step() and before update()",
                    Some("unscale before step, or update first"),
                ))
            }
            None => {}
        }
        let grads = opt.grads();
        if let Some(g) = grads.iter().find(|g| g.dtype() == DType::F16) {
            return Err(Error::dtype(
                OP,
                format!(
                    "attempting to unscale f16 gradients (shape {:?}): their parameters are f16",
                    g.shape()
                ),
                Some("keep the parameters in f32 and let autocast compute in f16"),
            ));
        }
        let inv = (1.0 / scale as f64) as f32;
        let mut found_inf = None;
        let mut scratch = NormScratch::default();
        for g in &grads {
            // The largest magnitude is finite exactly when every element is; the meta device
            // has no values and takes its gradients as finite.
            let bad = scratch
                .norm(g, f64::INFINITY)?
                .is_some_and(|m| !m.is_finite());
            found_inf = Some(found_inf.unwrap_or(false) | bad);
            g.mul_(Scalar::from(inv as f64))?;
        }
        let id = Arc::as_ptr(&opt.inner) as usize;
        self.records.push(Record {
            optimizer: id,
            stage: Stage::Unscaled,
            found_inf,
        });
        Ok(())
    }

    /// Unscales `opt`'s gradients unless that was done, then runs `opt.step()` unless a
    /// gradient held inf or NaN; returns whether it stepped. Once per optimizer between
    /// updates; an optimizer with no gradient is an error.
    pub fn step(&mut self, opt: &mut Optimizer) -> Result<bool> {
        const OP: &str = "GradScaler.step";
        self.current(OP)?;
        if opt.is_stepping_in_backward() {
            return Err(combination_error(OP, "a GradScaler"));
        }
        match self.record(opt).map(|r| r.stage) {
            Some(Stage::Stepped) => {
                return Err(Error::argument(
                    OP,
                    "step() has already been called since the last update()",
                    Some("call update() after each step()"),
                ))
            }
            Some(Stage::Unscaled) => {}
            None => self.unscale_(opt)?,
        }
        let Some(record) = self.record(opt) else {
            return Err(Error::argument(OP, "no record of this optimizer", None));
        };
        let Some(found_inf) = record.found_inf else {
            return Err(Error::argument(
                OP,
                "no inf checks were recorded for this optimizer: none of its parameters has \
                 a gradient",
                Some("call backward on the scaled loss before step()"),
            ));
        };
        record.stage = Stage::Stepped;
        if found_inf {
            return Ok(false);
        }
        opt.step()?;
        Ok(true)
    }

    /// Adapts the scale after an iteration: backs off after a skipped step, grows after
    /// `growth_interval` good steps in a row (when the grown scale is finite); both reset
    /// the count of good steps.
    pub fn update(&mut self) -> Result<()> {
        const OP: &str = "GradScaler.update";
        let scale = self.current(OP)?;
        let checks: Vec<bool> = self.records.iter().filter_map(|r| r.found_inf).collect();
        if checks.is_empty() {
            return Err(Error::argument(
                OP,
                "no inf checks were recorded before update()",
                Some("call unscale_() or step() with gradients first"),
            ));
        }
        let c = self.config;
        if checks.contains(&true) {
            self.scale = Some((scale as f64 * c.backoff_factor) as f32);
            self.growth_tracker = 0;
        } else {
            let good = self.growth_tracker + 1;
            if good >= c.growth_interval {
                let grown = (scale as f64 * c.growth_factor) as f32;
                if grown.is_finite() {
                    self.scale = Some(grown);
                }
                self.growth_tracker = 0;
            } else {
                self.growth_tracker = good;
            }
        }
        self.records.clear();
        self.uncount();
        Ok(())
    }

    /// The scaler's state.
    pub fn state_dict(&self) -> GradScalerState {
        GradScalerState {
            scale: self.get_scale() as f32,
            growth_factor: self.config.growth_factor,
            backoff_factor: self.config.backoff_factor,
            growth_interval: self.config.growth_interval,
            growth_tracker: self.growth_tracker,
        }
    }

    /// Restores a state from [`GradScaler::state_dict`].
    pub fn load_state_dict(&mut self, state: &GradScalerState) -> Result<()> {
        let config = GradScalerConfig {
            init_scale: state.scale as f64,
            growth_factor: state.growth_factor,
            backoff_factor: state.backoff_factor,
            growth_interval: state.growth_interval,
        };
        let fresh = GradScaler::with_config(config)?;
        self.config = fresh.config;
        self.scale = Some(state.scale);
        self.growth_tracker = state.growth_tracker;
        Ok(())
    }

    fn uncount(&mut self) {
        if self.counted {
            scaled_loss_closed();
            self.counted = false;
        }
    }
}

impl Drop for GradScaler {
    fn drop(&mut self) {
        self.uncount();
    }
}
