//! An optimizer's state dict in PyTorch's layout: tensors `state.{index}.{name}`
//! (`momentum_buffer`, `exp_avg`, `exp_avg_sq`, `max_exp_avg_sq`), and in the metadata the
//! step counts (`state`: `{"0": {"step": 3}, ...}`), the groups (`param_groups`, PyTorch's
//! keys with `params` as flat indices) and the class (`optimizer`). Saved with
//! [`StateDict::save`] it is one safetensors file.

use serde_json::{json, Map, Value};
use strata_core::{Error, Result, Tensor};

use super::config::{Adam, Rule, Sgd};
use super::optimizer::{state_like, Optimizer, ParamState};
use crate::state::StateDict;

const OP: &str = "optimizer.load_state_dict";

fn bad(message: impl Into<String>) -> Error {
    Error::argument(
        OP,
        message,
        Some("load a state dict saved by an optimizer of the same kind over the same parameters"),
    )
}

impl Optimizer {
    /// The optimizer's state (tensors shared, not copied) and hyper-parameters.
    pub fn state_dict(&self) -> StateDict {
        let inner = self.lock();
        let mut dict = StateDict::new();
        let mut steps = Map::new();
        let names = inner.rule.state_names();
        for (i, s) in inner.state.iter().enumerate() {
            let Some(s) = s else { continue };
            steps.insert(i.to_string(), json!({ "step": s.step }));
            for (name, t) in names.iter().zip(&s.tensors) {
                dict.insert(format!("state.{i}.{name}"), t.clone());
            }
        }
        let mut index = 0usize;
        let groups: Vec<Value> = inner
            .groups
            .iter()
            .map(|g| {
                let mut v = group_json(&inner.rule, g.lr, g.weight_decay);
                let params: Vec<usize> = (index..index + g.params.len()).collect();
                index += g.params.len();
                v.insert("params".into(), json!(params));
                if let Some(l) = g.initial_lr {
                    v.insert("initial_lr".into(), json!(l));
                }
                Value::Object(v)
            })
            .collect();
        dict.set_metadata("optimizer", inner.rule.name());
        dict.set_metadata("param_groups", Value::Array(groups).to_string());
        dict.set_metadata("state", Value::Object(steps).to_string());
        dict
    }

    /// Restores a state dict from [`Optimizer::state_dict`] (or a file saved from one):
    /// hyper-parameters and learning rates per group, step counts, and state tensors
    /// copied into the optimizer's own memory, laid out like their parameters. Everything is
    /// checked before anything changes.
    pub fn load_state_dict(&mut self, dict: &StateDict) -> Result<()> {
        let mut inner = self.lock();
        let name = dict.metadata("optimizer").unwrap_or("");
        if name != inner.rule.name() {
            return Err(bad(format!(
                "the state dict is of a {name:?} optimizer, this one is {}",
                inner.rule.name()
            )));
        }
        let groups = parse(dict, "param_groups")?;
        let Value::Array(groups) = groups else {
            return Err(bad("param_groups is not a list"));
        };
        if groups.len() != inner.groups.len() {
            return Err(bad(format!(
                "the state dict has {} parameter groups, the optimizer {}",
                groups.len(),
                inner.groups.len()
            )));
        }
        let mut settings = Vec::with_capacity(groups.len());
        for (i, (g, ours)) in groups.iter().zip(&inner.groups).enumerate() {
            let n = g
                .get("params")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            if n != ours.params.len() {
                return Err(bad(format!(
                    "group {i} has {n} parameters in the state dict, {} in the optimizer",
                    ours.params.len()
                )));
            }
            let lr = number(g, "lr")?;
            let wd = number(g, "weight_decay")?;
            let initial = g.get("initial_lr").and_then(Value::as_f64);
            settings.push((lr, wd, initial));
        }
        let rule = rule_from(&inner.rule, &groups[0])?;
        rule.check()?;
        let steps = parse(dict, "state")?;
        let Value::Object(steps) = steps else {
            return Err(bad("state is not a JSON object"));
        };
        let params: Vec<Tensor> = inner.params().cloned().collect();
        let mut state: Vec<Option<ParamState>> = (0..params.len()).map(|_| None).collect();
        for (key, entry) in &steps {
            let i: usize = key
                .parse()
                .ok()
                .filter(|&i| i < params.len())
                .ok_or_else(|| bad(format!("state entry {key:?} names no parameter")))?;
            let step = entry
                .get("step")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(format!("state entry {key} has no step count")))?;
            let p = &params[i];
            let mut tensors = Vec::new();
            for name in rule.state_names() {
                let k = format!("state.{i}.{name}");
                let t = dict
                    .get(&k)
                    .ok_or_else(|| bad(format!("the tensor {k} is missing")))?;
                if t.shape() != p.shape() {
                    return Err(bad(format!(
                        "{k} has shape {:?}, its parameter {:?}",
                        t.shape(),
                        p.shape()
                    )));
                }
                let own = state_like(p)?;
                own.copy_(t)?;
                tensors.push(own);
            }
            state[i] = Some(ParamState { step, tensors });
        }
        inner.rule = rule;
        inner.state = state;
        for (g, (lr, wd, initial)) in inner.groups.iter_mut().zip(settings) {
            g.lr = lr;
            g.weight_decay = wd;
            g.initial_lr = initial;
        }
        Ok(())
    }
}

/// A group's hyper-parameters under PyTorch's keys.
fn group_json(rule: &Rule, lr: f64, weight_decay: f64) -> Map<String, Value> {
    let v = match rule {
        Rule::Sgd(s) => json!({
            "lr": lr, "momentum": s.momentum, "dampening": s.dampening,
            "weight_decay": weight_decay, "nesterov": s.nesterov, "maximize": s.maximize,
        }),
        Rule::Adam(a) => json!({
            "lr": lr, "betas": [a.betas.0, a.betas.1], "eps": a.eps,
            "weight_decay": weight_decay, "amsgrad": a.amsgrad, "maximize": a.maximize,
            "decoupled_weight_decay": a.decoupled_weight_decay,
        }),
    };
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The rule of `ours`'s kind with the hyper-parameters of the saved group `g`.
fn rule_from(ours: &Rule, g: &Value) -> Result<Rule> {
    let flag = |k: &str| g.get(k).and_then(Value::as_bool).unwrap_or(false);
    Ok(match ours {
        Rule::Sgd(_) => Rule::Sgd(Sgd {
            lr: number(g, "lr")?,
            momentum: number(g, "momentum")?,
            dampening: number(g, "dampening")?,
            nesterov: flag("nesterov"),
            weight_decay: number(g, "weight_decay")?,
            maximize: flag("maximize"),
        }),
        Rule::Adam(a) => {
            let betas = g
                .get("betas")
                .and_then(Value::as_array)
                .and_then(|b| Some((b.first()?.as_f64()?, b.get(1)?.as_f64()?)))
                .ok_or_else(|| bad("betas is missing or not two numbers"))?;
            Rule::Adam(Adam {
                lr: number(g, "lr")?,
                betas,
                eps: number(g, "eps")?,
                weight_decay: number(g, "weight_decay")?,
                amsgrad: flag("amsgrad"),
                maximize: flag("maximize"),
                decoupled_weight_decay: a.decoupled_weight_decay,
            })
        }
    })
}

fn number(g: &Value, key: &str) -> Result<f64> {
    g.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(format!("a parameter group has no number {key:?}")))
}

fn parse(dict: &StateDict, key: &str) -> Result<Value> {
    let text = dict
        .metadata(key)
        .ok_or_else(|| bad(format!("the metadata {key:?} is missing")))?;
    serde_json::from_str(text).map_err(|e| bad(format!("the metadata {key:?} is not JSON: {e}")))
}
