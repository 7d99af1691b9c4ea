//! The protocol's training objects: optimizers, learning-rate schedulers and grad scalers,
//! bound to names like tensors, and the steps that use them.

use serde_json::Value;
use strata::nn::amp::{GradScaler, GradScalerConfig};
use strata::nn::optim::{self, Adam, Optimizer, Schedule, Scheduler, Sgd};
use strata::prelude::*;

use super::args::Args;

/// A non-tensor value a program binds.
pub enum Object {
    /// An optimizer over some of the program's tensors.
    Optimizer(Optimizer),
    /// A scheduler and the name of the optimizer it drives.
    Scheduler(Scheduler, String),
    /// A grad scaler.
    Scaler(GradScaler),
}

impl Object {
    /// What it is, for messages ("an optimizer").
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Optimizer(_) => "an optimizer",
            Object::Scheduler(..) => "a learning-rate scheduler",
            Object::Scaler(_) => "a grad scaler",
        }
    }
}

/// What a training step produced.
pub enum Made {
    /// Nothing.
    Nothing,
    /// A tensor.
    Tensor(Tensor),
    /// An object to bind.
    Object(Object),
    /// A grad scaler's step that found an inf or NaN gradient and skipped the optimizer.
    SkippedStep,
}

/// The steps on training objects.
pub const OPS: [&str; 11] = [
    "optimizer",
    "step",
    "opt_zero_grad",
    "lr_scheduler",
    "sched_step",
    "grad_scaler",
    "scale",
    "scaler_unscale_",
    "scaler_step",
    "scaler_update",
    "get_scale",
];

fn err(e: Error) -> String {
    e.to_string()
}

/// Makes an optimizer over `params` from `optimizer {kind, ...}` arguments.
pub fn optimizer(params: Vec<Tensor>, a: &Args<'_>) -> Result<Object, String> {
    let lr = a.float_or("lr", 1e-3)?;
    let opt = match a.str("kind")? {
        "sgd" => Optimizer::sgd(
            params,
            Sgd {
                lr,
                momentum: a.float_or("momentum", 0.0)?,
                dampening: a.float_or("dampening", 0.0)?,
                nesterov: a.bool_or("nesterov", false)?,
                weight_decay: a.float_or("weight_decay", 0.0)?,
                maximize: a.bool_or("maximize", false)?,
            },
        ),
        kind @ ("adam" | "adamw") => {
            let base = if kind == "adamw" {
                Adam::adamw()
            } else {
                Adam::default()
            };
            let betas = if a.has("betas") {
                match a.raw("betas")? {
                    Value::Array(b) if b.len() == 2 => (
                        b[0].as_f64().ok_or("betas must be two numbers")?,
                        b[1].as_f64().ok_or("betas must be two numbers")?,
                    ),
                    _ => return Err("betas must be a list of two numbers".into()),
                }
            } else {
                base.betas
            };
            Optimizer::adam(
                params,
                Adam {
                    lr,
                    betas,
                    eps: a.float_or("eps", base.eps)?,
                    weight_decay: a.float_or("weight_decay", base.weight_decay)?,
                    amsgrad: a.bool_or("amsgrad", false)?,
                    maximize: a.bool_or("maximize", false)?,
                    ..base
                },
            )
        }
        other => return Err(format!("optimizer: unknown kind {other:?}")),
    };
    opt.map(Object::Optimizer).map_err(err)
}

/// Makes a scheduler from `lr_scheduler {kind, ...}` arguments.
pub fn schedule(a: &Args<'_>) -> Result<Schedule, String> {
    let count = |name: &str| -> Result<u64, String> {
        let v = a.int(name)?;
        u64::try_from(v).map_err(|_| format!("argument '{name}' must be >= 0, got {v}"))
    };
    Ok(match a.str("kind")? {
        "step" => Schedule::Step {
            step_size: count("step_size")?,
            gamma: a.float_or("gamma", 0.1)?,
        },
        "multistep" => Schedule::MultiStep {
            milestones: a
                .ints("milestones")?
                .into_iter()
                .map(|m| u64::try_from(m).map_err(|_| "milestones must be >= 0".to_string()))
                .collect::<Result<_, _>>()?,
            gamma: a.float_or("gamma", 0.1)?,
        },
        "cosine" => Schedule::Cosine {
            t_max: count("T_max")?,
            eta_min: a.float_or("eta_min", 0.0)?,
        },
        "linear" => Schedule::Linear {
            start_factor: a.float_or("start_factor", 1.0 / 3.0)?,
            end_factor: a.float_or("end_factor", 1.0)?,
            total_iters: if a.has("total_iters") {
                count("total_iters")?
            } else {
                5
            },
        },
        other => return Err(format!("lr_scheduler: unknown kind {other:?}")),
    })
}

/// Makes a grad scaler from `grad_scaler {...}` arguments.
pub fn grad_scaler(a: &Args<'_>) -> Result<Object, String> {
    let d = GradScalerConfig::default();
    let interval = a.int_or("growth_interval", d.growth_interval as i64)?;
    let config = GradScalerConfig {
        init_scale: a.float_or("init_scale", d.init_scale)?,
        growth_factor: a.float_or("growth_factor", d.growth_factor)?,
        backoff_factor: a.float_or("backoff_factor", d.backoff_factor)?,
        growth_interval: u32::try_from(interval)
            .map_err(|_| format!("growth_interval must be a positive integer, got {interval}"))?,
    };
    GradScaler::with_config(config)
        .map(Object::Scaler)
        .map_err(err)
}

/// `clip_grad_norm_ {max_norm, norm_type=2}` on parameters.
pub fn clip_grad_norm(params: &[Tensor], a: &Args<'_>) -> Result<Tensor, String> {
    let norm_type = match a.0.get("norm_type") {
        None | Some(Value::Null) => 2.0,
        Some(Value::String(s)) if s == "inf" => f64::INFINITY,
        Some(v) => v
            .as_f64()
            .ok_or_else(|| format!("norm_type must be a number or \"inf\", got {v}"))?,
    };
    let max_norm = a.float_or("max_norm", f64::NAN)?;
    if max_norm.is_nan() {
        return Err("missing argument 'max_norm'".into());
    }
    optim::clip_grad_norm_(
        params,
        max_norm,
        norm_type,
        a.bool_or("error_if_nonfinite", false)?,
    )
    .map_err(err)
}

/// Runs a step on one object: `obj` is the first input, `other` the second when the step
/// takes two objects (a scaler and an optimizer), `t` its tensor input.
pub fn on_object(
    op: &str,
    obj: &mut Object,
    other: Option<&mut Object>,
    t: Option<&Tensor>,
    a: &Args<'_>,
) -> Result<Made, String> {
    match (op, obj) {
        ("step", Object::Optimizer(opt)) => opt.step().map_err(err)?,
        ("opt_zero_grad", Object::Optimizer(opt)) => opt
            .zero_grad(a.bool_or("set_to_none", true)?)
            .map_err(err)?,
        ("scale", Object::Scaler(s)) => {
            let t = t.ok_or("scale needs a grad scaler and a tensor")?;
            return s.scale(t).map(Made::Tensor).map_err(err);
        }
        ("scaler_unscale_", Object::Scaler(s)) => {
            s.unscale_(optimizer_of(op, other)?).map_err(err)?
        }
        ("scaler_step", Object::Scaler(s)) => {
            if !s.step(optimizer_of(op, other)?).map_err(err)? {
                return Ok(Made::SkippedStep);
            }
        }
        ("scaler_update", Object::Scaler(s)) => s.update().map_err(err)?,
        ("get_scale", Object::Scaler(s)) => {
            let v = s.get_scale();
            return Tensor::full(&(), v, DType::F32)
                .map(Made::Tensor)
                .map_err(err);
        }
        (op, _) => {
            return Err(format!(
                "{op}: its first input is not the right kind of object"
            ))
        }
    }
    Ok(Made::Nothing)
}

fn optimizer_of<'a>(op: &str, o: Option<&'a mut Object>) -> Result<&'a mut Optimizer, String> {
    match o {
        Some(Object::Optimizer(opt)) => Ok(opt),
        _ => Err(format!("{op} needs a grad scaler and an optimizer")),
    }
}
