//! `strata conform`: runs conformance programs (the protocol in the project's conformance
//! suite) with strata and reports what it observed, for comparison with PyTorch.
//!
//! The runner never crashes on a program: unknown ops, unbound names, bad arguments, absurd
//! sizes and anything strata refuses become that program's error, and the next program runs.

mod allocations;
mod args;
mod mixed_precision;
mod nn;
mod observe;
mod ops;
mod train;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use strata::core::device::DefaultDevice;
use strata::core::with_device_allocator;
use strata::nn::optim::Scheduler;
use strata::prelude::*;
use strata_alloc::{DeviceAllocator, HostAllocator};

use allocations::Recorder;
use args::Args;
use observe::{observe, observe_values, StorageNumbers};
use train::{Made, Object};

/// Most bytes one program may hold at once; beyond it allocations fail as out-of-memory.
pub const PROGRAM_MEMORY_LIMIT: usize = 2 << 30;

/// What a step produced.
pub enum Produced {
    /// Nothing (`backward`, `grad_mode`, ...).
    Nothing,
    /// One tensor.
    One(Tensor),
    /// Several tensors (`split`, `max` with a dim, ...).
    Many(Vec<Tensor>),
}

/// Why a programs file cannot be run at all.
#[derive(Debug)]
pub enum LoadError {
    /// The file is not valid JSON.
    Json(serde_json::Error),
    /// The JSON does not have the protocol's shape.
    Shape(String),
}

impl std::error::Error for LoadError {}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Json(e) => write!(f, "the programs file is not valid JSON: {e}"),
            LoadError::Shape(m) => write!(f, "the programs file does not follow the protocol: {m}"),
        }
    }
}

/// How programs run: on which device, and whether their allocator events are reported.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// The device every tensor a program creates is made on (`--device`).
    pub device: Device,
    /// Each program on a fresh caching allocator with its events in the result
    /// (`--allocations`).
    pub allocations: bool,
}

/// Runs every program in a programs document on the CPU and returns the results document.
pub fn run_document(text: &str) -> Result<Value, LoadError> {
    run_document_with(text, RunOptions::default())
}

/// Runs every program in a programs document as `options` say.
pub fn run_document_with(text: &str, options: RunOptions) -> Result<Value, LoadError> {
    let doc: Value = serde_json::from_str(text).map_err(LoadError::Json)?;
    let programs = doc
        .get("programs")
        .and_then(Value::as_array)
        .ok_or_else(|| LoadError::Shape("expected an object with a \"programs\" list".into()))?;
    let mut results = Vec::with_capacity(programs.len());
    for (i, p) in programs.iter().enumerate() {
        let id = p
            .get("id")
            .cloned()
            .ok_or_else(|| LoadError::Shape(format!("program {i} has no \"id\"")))?;
        let steps = p
            .get("steps")
            .and_then(Value::as_array)
            .ok_or_else(|| LoadError::Shape(format!("program {id} has no \"steps\" list")))?;
        results.push(run_program_with(id, steps, options));
    }
    Ok(json!({ "results": results }))
}

/// Runs one program on the CPU on its own allocator (so its memory is bounded and
/// returned) with the generator seeded with 0.
pub fn run_program(id: Value, steps: &[Value]) -> Value {
    run_program_with(id, steps, RunOptions::default())
}

/// Runs one program as `options` say, with the generator seeded with 0.
pub fn run_program_with(id: Value, steps: &[Value], options: RunOptions) -> Value {
    let recorder = options.allocations.then(|| Recorder::new(options.device));
    let allocator: Arc<dyn DeviceAllocator> = match (&recorder, options.device) {
        (Some(r), _) => r.allocator(),
        // Meta tensors get a fresh allocator of their own, bounded like a host program's.
        (None, Device::Meta) => Recorder::new(Device::Meta).allocator(),
        (None, _) => Arc::new(HostAllocator::with_limit(PROGRAM_MEMORY_LIMIT)),
    };
    let mut observations = Vec::new();
    let mut step_ends = Vec::with_capacity(steps.len());
    let (error, skipped) = with_device_allocator(options.device, &allocator, || {
        manual_seed(0);
        let mut state = ProgramState::on(options.device);
        let mut error = None;
        for (i, step) in steps.iter().enumerate() {
            let outcome = catch_unwind(AssertUnwindSafe(|| state.step(step, &mut observations)));
            let message = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(m)) => Some(m),
                Err(panic) => Some(format!(
                    "internal error in strata: {}",
                    panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("panic")
                )),
            };
            step_ends.push(recorder.as_ref().map_or(0, Recorder::len));
            if let Some(message) = message {
                error = Some(json!({ "step": i, "message": message }));
                break;
            }
        }
        // Events of the final drops count as step `steps.len()`, however far the program got.
        let end = recorder.as_ref().map_or(0, Recorder::len);
        step_ends.resize(steps.len(), end);
        state.release();
        (error, state.skipped_scaler_steps)
    });
    let mut result = json!({ "id": id, "observations": observations, "error": error });
    // The meta device has no values to find an inf in, so it never skips: the protocol
    // excepts such programs from meta's allocation prediction, and this says which they are.
    if skipped > 0 {
        result["skipped_scaler_steps"] = json!(skipped);
    }
    if let Some(r) = recorder {
        result["allocations"] = r.report(&step_ends);
    }
    result
}

/// Variables and open modes of one running program.
#[derive(Default)]
pub struct ProgramState {
    env: HashMap<String, Tensor>,
    /// Optimizers, schedulers and grad scalers, by name.
    objects: HashMap<String, Object>,
    /// Bound names, oldest binding first (a rebound name moves to the end).
    order: Vec<String>,
    storages: StorageNumbers,
    modes: Vec<GradModeGuard>,
    /// Open autocast regions, innermost last (they nest apart from grad modes).
    regions: Vec<strata::core::autocast::AutocastGuard>,
    /// The device creation steps make tensors on.
    device: Device,
    /// Grad-scaler steps that skipped the optimizer (an inf or NaN gradient).
    skipped_scaler_steps: usize,
}

impl Drop for ProgramState {
    fn drop(&mut self) {
        // Modes and regions still open close innermost first, restoring the state
        // outside each.
        while self.modes.pop().is_some() {}
        while self.regions.pop().is_some() {}
    }
}

impl ProgramState {
    /// A program with no variables whose creation steps make tensors on `device`.
    fn on(device: Device) -> ProgramState {
        let mut state = ProgramState::default();
        state.device = device;
        state
    }

    /// Drops the variables still bound, newest binding first, then closes open modes.
    fn release(&mut self) {
        while let Some(name) = self.order.pop() {
            drop(self.env.remove(&name));
            drop(self.objects.remove(&name));
        }
        while self.modes.pop().is_some() {}
        while self.regions.pop().is_some() {}
    }

    fn insert(&mut self, name: String, t: Tensor) {
        self.order.retain(|n| *n != name);
        self.order.push(name.clone());
        // The old value (if any) is dropped here, when the name is rebound.
        drop(self.objects.remove(&name));
        self.env.insert(name, t);
    }

    fn insert_object(&mut self, name: String, o: Object) {
        self.order.retain(|n| *n != name);
        self.order.push(name.clone());
        drop(self.env.remove(&name));
        self.objects.insert(name, o);
    }

    fn step(&mut self, step: &Value, observations: &mut Vec<Value>) -> Result<(), String> {
        let op = step
            .get("op")
            .and_then(Value::as_str)
            .ok_or("a step needs an \"op\" string")?;
        let names: Vec<&str> = match step.get("in") {
            None | Some(Value::Null) => vec![],
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().ok_or("\"in\" must be a list of names"))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("\"in\" must be a list of names".into()),
        };
        if train::OPS.contains(&op) {
            return self.train_step(op, &names, step);
        }
        let inputs: Vec<Tensor> = names
            .iter()
            .map(|n| match (self.env.get(*n), self.objects.get(*n)) {
                (Some(t), _) => Ok(t.clone()),
                (None, Some(o)) => Err(format!(
                    "cannot {} {n}: it is {}, not a tensor",
                    if op == "observe" { "observe" } else { "pass" },
                    o.kind()
                )),
                (None, None) => Err(format!("unknown variable: {n}")),
            })
            .collect::<Result<_, _>>()?;
        if op == "observe" {
            let values_only = step
                .get("args")
                .and_then(|a| a.get("values_only"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            for (n, t) in names.iter().zip(&inputs) {
                observations.push(if values_only {
                    observe_values(n, t)?
                } else {
                    observe(n, t, &mut self.storages)?
                });
            }
            return Ok(());
        }
        let empty = Map::new();
        let args = match step.get("args") {
            None | Some(Value::Null) => Args(&empty),
            Some(Value::Object(m)) => Args(m),
            Some(_) => return Err("\"args\" must be an object".into()),
        };
        if op == "grad_mode" {
            return self.grad_mode(&args);
        }
        if let Some(done) = self.autocast_step(op, &args) {
            return done;
        }
        // Only steps without tensor inputs (creation ops) are told the device: every other
        // op must follow its inputs there by itself.
        let _device = inputs.is_empty().then(|| DefaultDevice::set(self.device));
        let produced = if op == "clip_grad_norm_" {
            Produced::One(train::clip_grad_norm(&inputs, &args)?)
        } else {
            ops::run(op, &inputs, &args)?
        };
        self.bind(op, step.get("let"), produced)
    }

    /// A step on training objects (see [`train`]).
    fn train_step(&mut self, op: &str, names: &[&str], step: &Value) -> Result<(), String> {
        let empty = Map::new();
        let args = match step.get("args") {
            Some(Value::Object(m)) => Args(m),
            _ => Args(&empty),
        };
        let target = step.get("let").and_then(Value::as_str).map(str::to_owned);
        // `get_scale` makes a tensor from no tensor input: on the program's device.
        let _device = DefaultDevice::set(self.device);
        let tensor = |n: &str| self.env.get(n).cloned();
        let made = match op {
            "optimizer" => {
                let params = names
                    .iter()
                    .map(|n| tensor(n).ok_or_else(|| format!("unknown tensor: {n}")))
                    .collect::<Result<Vec<_>, _>>()?;
                Made::Object(train::optimizer(params, &args)?)
            }
            "grad_scaler" => Made::Object(train::grad_scaler(&args)?),
            "lr_scheduler" => {
                let name = *names.first().ok_or("lr_scheduler needs an optimizer")?;
                let Some(Object::Optimizer(opt)) = self.objects.get_mut(name) else {
                    return Err(format!("lr_scheduler: {name} is not an optimizer"));
                };
                let s = Scheduler::new(opt, train::schedule(&args)?).map_err(|e| e.to_string())?;
                Made::Object(Object::Scheduler(s, name.to_owned()))
            }
            "sched_step" => {
                let name = *names.first().ok_or("sched_step needs a scheduler")?;
                if !matches!(self.objects.get(name), Some(Object::Scheduler(..))) {
                    return Err(format!("sched_step: {name} is not a scheduler"));
                }
                let Some(Object::Scheduler(mut s, opt_name)) = self.objects.remove(name) else {
                    return Err(format!("sched_step: {name} is not a scheduler"));
                };
                let stepped = match self.objects.get_mut(&opt_name) {
                    Some(Object::Optimizer(opt)) => s.step(opt).map_err(|e| e.to_string()),
                    _ => Err(format!("sched_step: the optimizer {opt_name} is gone")),
                };
                self.objects
                    .insert(name.to_owned(), Object::Scheduler(s, opt_name));
                stepped?;
                Made::Nothing
            }
            _ => {
                let first = *names
                    .first()
                    .ok_or_else(|| format!("{op} needs an input"))?;
                let mut obj = self
                    .objects
                    .remove(first)
                    .ok_or_else(|| format!("unknown object: {first}"))?;
                let second = names.get(1).copied();
                let t = second.and_then(tensor);
                let other = second.and_then(|n| self.objects.get_mut(n));
                let made = train::on_object(op, &mut obj, other, t.as_ref(), &args);
                self.objects.insert(first.to_owned(), obj);
                made?
            }
        };
        match (made, target) {
            (Made::Tensor(t), Some(n)) => self.insert(n, t),
            (Made::Object(o), Some(n)) => self.insert_object(n, o),
            (Made::SkippedStep, _) => self.skipped_scaler_steps += 1,
            _ => {}
        }
        Ok(())
    }

    fn grad_mode(&mut self, args: &Args<'_>) -> Result<(), String> {
        match args.str("mode")? {
            "no_grad" => self.modes.push(GradModeGuard::no_grad()),
            "enable_grad" => self.modes.push(GradModeGuard::enable_grad()),
            "inference_mode" => self.modes.push(GradModeGuard::inference_mode()),
            "exit" => {
                let closed = self
                    .modes
                    .pop()
                    .ok_or("grad_mode exit: no grad mode is open")?;
                drop(closed);
            }
            other => return Err(format!("grad_mode: unknown mode {other:?}")),
        }
        Ok(())
    }

    fn bind(&mut self, op: &str, target: Option<&Value>, produced: Produced) -> Result<(), String> {
        match (target, produced) {
            (None | Some(Value::Null), _) => Ok(()),
            (Some(Value::String(n)), Produced::One(t)) => {
                self.insert(n.clone(), t);
                Ok(())
            }
            (Some(Value::Array(names)), Produced::Many(ts)) if names.len() == ts.len() => {
                for (n, t) in names.iter().zip(ts) {
                    let n = n.as_str().ok_or("\"let\" names must be strings")?;
                    self.insert(n.to_owned(), t);
                }
                Ok(())
            }
            (Some(Value::Array(names)), _) => {
                Err(format!("{op} does not return {} tensors", names.len()))
            }
            (Some(_), _) => Err(format!("{op} does not return one tensor")),
        }
    }
}
