//! The optimizer: parameter groups, per-parameter state, the step, and post-step hooks.

use std::sync::{Arc, Mutex, MutexGuard};

use strata_core::autograd::HookHandle;
use strata_core::{AdamStep, SgdStep};
use strata_core::{Category, Error, Result, Tensor};

use super::config::{check_lr, check_weight_decay, Adam, Rule, Sgd};

/// A set of parameters with its own learning rate and weight decay (PyTorch's param
/// groups); unset values take the optimizer's.
#[derive(Debug, Clone)]
pub struct ParamGroup {
    params: Vec<Tensor>,
    lr: Option<f64>,
    weight_decay: Option<f64>,
}

impl ParamGroup {
    /// A group of `params` with the optimizer's learning rate and weight decay.
    pub fn new(params: impl IntoIterator<Item = Tensor>) -> Self {
        ParamGroup {
            params: params.into_iter().collect(),
            lr: None,
            weight_decay: None,
        }
    }

    /// This group's learning rate.
    pub fn lr(mut self, lr: f64) -> Self {
        self.lr = Some(lr);
        self
    }

    /// This group's weight decay.
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = Some(weight_decay);
        self
    }
}

/// A group as the optimizer holds it.
pub(crate) struct Group {
    pub params: Vec<Tensor>,
    pub lr: f64,
    pub weight_decay: f64,
    /// The learning rate a scheduler started from (PyTorch's `initial_lr`), once one did.
    pub initial_lr: Option<f64>,
}

/// One parameter's state: its step count (a host counter) and its tensors, in the order of
/// [`Rule::state_names`].
pub(crate) struct ParamState {
    pub step: u64,
    pub tensors: Vec<Tensor>,
}

/// A hook run after every step.
type PostStepHook = Box<dyn FnMut() -> Result<()> + Send>;

/// Names a post-step hook, to remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostStepHandle(u64);

/// What the optimizer shares with the hooks that step it inside backward.
pub(crate) struct Inner {
    pub rule: Rule,
    pub groups: Vec<Group>,
    /// By flat parameter index (groups in order).
    pub state: Vec<Option<ParamState>>,
    hooks: Vec<(u64, PostStepHook)>,
    next_hook: u64,
}

/// An optimizer: SGD, Adam or AdamW over parameter groups, PyTorch's formulas exactly.
///
/// Every step is one fused pass per parameter over the parameter, its gradient and its
/// state ([`Tensor::sgd_`], [`Tensor::adam_`]); after the first step (which creates the state) a
/// step allocates nothing. The state is exactly as large as the rule needs: one tensor like
/// each parameter for SGD with momentum, two for Adam, three with amsgrad, counted under the
/// optimizer-state memory category. Adam's step count is a host counter.
///
/// ```
/// use strata_core::{DType, Tensor};
/// use strata_nn::optim::{Adam, Optimizer};
/// let w = Tensor::ones(&[3], DType::F32)?.requires_grad_(true)?;
/// let mut opt = Optimizer::adam([w.clone()], Adam { lr: 0.1, ..Adam::default() })?;
/// w.mul(&w)?.sum(None, false)?.backward()?;
/// opt.step()?;
/// opt.zero_grad(true)?;
/// assert!(w.to_vec::<f32>()?.iter().all(|x| (x - 0.9).abs() < 1e-6));
/// assert_eq!(opt.state_bytes(), 2 * 3 * 4); // exp_avg and exp_avg_sq
/// # Ok::<(), strata_core::Error>(())
/// ```
pub struct Optimizer {
    pub(crate) inner: Arc<Mutex<Inner>>,
    /// The hooks that step each parameter inside backward, while that mode is on.
    pub(crate) in_backward: Option<Vec<HookHandle>>,
}

impl std::fmt::Debug for Optimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct(inner.rule.name())
            .field("rule", &inner.rule)
            .field("groups", &inner.groups.len())
            .field("step_in_backward", &self.in_backward.is_some())
            .finish()
    }
}

impl Optimizer {
    /// SGD over `params`.
    pub fn sgd(params: impl IntoIterator<Item = Tensor>, config: Sgd) -> Result<Self> {
        Self::with_groups(vec![ParamGroup::new(params)], Rule::Sgd(config))
    }

    /// Adam (or AdamW, with [`Adam::adamw`]'s settings) over `params`.
    pub fn adam(params: impl IntoIterator<Item = Tensor>, config: Adam) -> Result<Self> {
        Self::with_groups(vec![ParamGroup::new(params)], Rule::Adam(config))
    }

    /// AdamW over `params`: `config` with decoupled weight decay.
    pub fn adamw(params: impl IntoIterator<Item = Tensor>, config: Adam) -> Result<Self> {
        let config = Adam {
            decoupled_weight_decay: true,
            ..config
        };
        Self::with_groups(vec![ParamGroup::new(params)], Rule::Adam(config))
    }

    /// An optimizer over parameter groups. Every parameter must be a floating leaf, and
    /// appear once over all groups.
    pub fn with_groups(groups: Vec<ParamGroup>, rule: Rule) -> Result<Self> {
        rule.check()?;
        let (lr, wd) = rule.defaults();
        let mut seen: Vec<&Tensor> = Vec::new();
        for g in &groups {
            check_lr(g.lr.unwrap_or(lr))?;
            check_weight_decay(g.weight_decay.unwrap_or(wd))?;
            for p in &g.params {
                if !p.is_leaf() {
                    return Err(Error::argument(
                        "optimizer",
                        "can't optimize a non-leaf tensor",
                        Some("pass the parameters themselves (leaves), not results computed from them"),
                    ));
                }
                if !p.dtype().is_floating() {
                    return Err(Error::dtype(
                        "optimizer",
                        format!("parameters must be floating, got {}", p.dtype()),
                        None,
                    ));
                }
                if seen.iter().any(|q| q.is_same(p)) {
                    return Err(Error::argument(
                        "optimizer",
                        "a parameter appears more than once",
                        Some("give each parameter to one group only"),
                    ));
                }
                seen.push(p);
            }
        }
        let n = seen.len();
        let groups = groups
            .into_iter()
            .map(|g| Group {
                params: g.params,
                lr: g.lr.unwrap_or(lr),
                weight_decay: g.weight_decay.unwrap_or(wd),
                initial_lr: None,
            })
            .collect();
        Ok(Optimizer {
            inner: Arc::new(Mutex::new(Inner {
                rule,
                groups,
                state: (0..n).map(|_| None).collect(),
                hooks: Vec::new(),
                next_hook: 0,
            })),
            in_backward: None,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Updates every parameter that has a gradient (the others, and their state, are left
    /// alone), then runs the post-step hooks. When the optimizer steps in backward
    /// ([`Optimizer::set_step_in_backward`]) the parameters were already updated and this
    /// runs the hooks only.
    pub fn step(&mut self) -> Result<()> {
        if self.in_backward.is_none() {
            self.lock().step_all()?;
        }
        self.run_post_step_hooks()
    }

    /// Runs the post-step hooks, with the optimizer unlocked (a hook may use it).
    fn run_post_step_hooks(&mut self) -> Result<()> {
        let mut hooks = std::mem::take(&mut self.lock().hooks);
        let result = hooks.iter_mut().try_for_each(|(_, h)| h());
        let mut inner = self.lock();
        hooks.append(&mut inner.hooks);
        inner.hooks = hooks;
        result
    }

    /// Clears every parameter's gradient: drops it (`set_to_none`, PyTorch's default) or
    /// zeroes it in place.
    pub fn zero_grad(&mut self, set_to_none: bool) -> Result<()> {
        for p in self.parameters() {
            p.zero_grad(set_to_none)?;
        }
        Ok(())
    }

    /// The update this optimizer makes.
    pub fn rule(&self) -> Rule {
        self.lock().rule
    }

    /// How many parameter groups there are.
    pub fn group_count(&self) -> usize {
        self.lock().groups.len()
    }

    /// Group `group`'s learning rate.
    pub fn lr(&self, group: usize) -> Result<f64> {
        self.lock().group(group).map(|g| g.lr)
    }

    /// Sets group `group`'s learning rate.
    pub fn set_lr(&mut self, group: usize, lr: f64) -> Result<()> {
        check_lr(lr)?;
        self.lock().group_mut(group)?.lr = lr;
        Ok(())
    }

    /// Group `group`'s weight decay.
    pub fn weight_decay(&self, group: usize) -> Result<f64> {
        self.lock().group(group).map(|g| g.weight_decay)
    }

    /// Sets group `group`'s weight decay.
    pub fn set_weight_decay(&mut self, group: usize, weight_decay: f64) -> Result<()> {
        check_weight_decay(weight_decay)?;
        self.lock().group_mut(group)?.weight_decay = weight_decay;
        Ok(())
    }

    /// The learning rates schedulers start from: each group's `initial_lr`, set to its
    /// current learning rate the first time one asks.
    pub(crate) fn initial_lrs(&mut self) -> Vec<f64> {
        let mut inner = self.lock();
        inner
            .groups
            .iter_mut()
            .map(|g| *g.initial_lr.get_or_insert(g.lr))
            .collect()
    }

    /// Group `group`'s parameters.
    pub fn group_params(&self, group: usize) -> Result<Vec<Tensor>> {
        self.lock().group(group).map(|g| g.params.clone())
    }

    /// Every parameter, groups in order.
    pub fn parameters(&self) -> Vec<Tensor> {
        self.lock().params().cloned().collect()
    }

    /// Every parameter's gradient that is set.
    pub fn grads(&self) -> Vec<Tensor> {
        self.lock().params().filter_map(Tensor::grad).collect()
    }

    /// Parameter `index`'s step count (groups in order), once it has state.
    pub fn step_count(&self, index: usize) -> Option<u64> {
        self.lock()
            .state
            .get(index)
            .and_then(|s| s.as_ref().map(|s| s.step))
    }

    /// Bytes of all state tensors.
    pub fn state_bytes(&self) -> usize {
        self.lock()
            .state
            .iter()
            .flatten()
            .flat_map(|s| &s.tensors)
            .map(Tensor::nbytes)
            .sum()
    }

    /// Runs `hook` after every step (pruning's [`crate::prune::reapply_after_steps`] uses
    /// one to keep pruned weights at zero).
    pub fn register_post_step_hook(
        &mut self,
        hook: impl FnMut() -> Result<()> + Send + 'static,
    ) -> PostStepHandle {
        let mut inner = self.lock();
        let id = inner.next_hook;
        inner.next_hook += 1;
        inner.hooks.push((id, Box::new(hook)));
        PostStepHandle(id)
    }

    /// Removes a post-step hook; false when it was not registered.
    pub fn remove_post_step_hook(&mut self, handle: PostStepHandle) -> bool {
        let mut inner = self.lock();
        let before = inner.hooks.len();
        inner.hooks.retain(|(id, _)| *id != handle.0);
        inner.hooks.len() != before
    }
}

/// Locks the shared part, recovering it from a poisoned lock (a panicking hook leaves the
/// state as the last completed parameter update left it).
pub(crate) fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    fn group(&self, i: usize) -> Result<&Group> {
        let n = self.groups.len();
        self.groups.get(i).ok_or_else(|| no_group(i, n))
    }

    fn group_mut(&mut self, i: usize) -> Result<&mut Group> {
        let n = self.groups.len();
        self.groups.get_mut(i).ok_or_else(|| no_group(i, n))
    }

    pub(crate) fn params(&self) -> impl Iterator<Item = &Tensor> {
        self.groups.iter().flat_map(|g| &g.params)
    }

    /// The group and flat index of every parameter, groups in order.
    fn indexed(&self) -> Vec<(usize, usize, Tensor)> {
        let mut out = Vec::new();
        for (gi, g) in self.groups.iter().enumerate() {
            for p in &g.params {
                out.push((out.len(), gi, p.clone()));
            }
        }
        out
    }

    /// One step over every parameter that has a gradient; the gradients are checked
    /// against their parameters before any is updated.
    fn step_all(&mut self) -> Result<()> {
        let todo: Vec<_> = self
            .indexed()
            .into_iter()
            .filter_map(|(i, gi, p)| p.grad().map(|g| (i, gi, p, g)))
            .collect();
        for (_, _, p, g) in &todo {
            check_grad(p, g)?;
        }
        for (i, gi, p, g) in todo {
            self.step_one(i, gi, &p, &g)?;
        }
        Ok(())
    }

    /// Steps parameter `index` (of group `group`) with gradient `grad`, creating its state
    /// on its first step.
    pub(crate) fn step_one(
        &mut self,
        index: usize,
        group: usize,
        p: &Tensor,
        grad: &Tensor,
    ) -> Result<()> {
        let (lr, weight_decay) = {
            let g = self.group(group)?;
            (g.lr, g.weight_decay)
        };
        let rule = self.rule;
        if self.state[index].is_none() {
            let tensors = rule
                .state_names()
                .iter()
                .map(|_| state_like(p))
                .collect::<Result<Vec<_>>>()?;
            self.state[index] = Some(ParamState { step: 0, tensors });
        }
        let Some(state) = self.state[index].as_mut() else {
            return Ok(());
        };
        let step = state.step + 1;
        let refs: Vec<&Tensor> = state.tensors.iter().collect();
        match rule {
            Rule::Sgd(s) => p.sgd_(
                grad,
                refs.first().copied(),
                &SgdStep {
                    lr,
                    momentum: s.momentum,
                    dampening: s.dampening,
                    nesterov: s.nesterov,
                    weight_decay,
                    maximize: s.maximize,
                    first_step: step == 1,
                },
            )?,
            Rule::Adam(a) => p.adam_(
                grad,
                &refs,
                &AdamStep {
                    lr,
                    beta1: a.betas.0,
                    beta2: a.betas.1,
                    eps: a.eps,
                    weight_decay,
                    decoupled_weight_decay: a.decoupled_weight_decay,
                    amsgrad: a.amsgrad,
                    maximize: a.maximize,
                    step,
                },
            )?,
        }
        state.step = step;
        Ok(())
    }
}

fn no_group(i: usize, n: usize) -> Error {
    Error::argument(
        "optimizer",
        format!("no parameter group {i}: the optimizer has {n}"),
        None,
    )
}

/// A gradient must have its parameter's shape, dtype and device.
pub(crate) fn check_grad(p: &Tensor, g: &Tensor) -> Result<()> {
    if g.shape() != p.shape() || g.dtype() != p.dtype() || g.device() != p.device() {
        return Err(Error::argument(
            "optimizer.step",
            format!(
                "a gradient ({} {:?} on {}) does not match its parameter ({} {:?} on {})",
                g.dtype(),
                g.shape(),
                g.device(),
                p.dtype(),
                p.shape(),
                p.device()
            ),
            Some("a gradient set by hand must have its parameter's shape, dtype and device"),
        ));
    }
    Ok(())
}

/// A zeroed state tensor laid out like `p` (same dtype, device and strides), counted as
/// optimizer state.
pub(crate) fn state_like(p: &Tensor) -> Result<Tensor> {
    let factory = Tensor::on(p.device());
    let t = if p.is_contiguous() {
        factory.zeros(&p.shape(), p.dtype())?
    } else {
        factory
            .zeros(&[p.numel()], p.dtype())?
            .as_strided(&p.shape(), &p.stride(), None)?
    };
    t.mark_category(Category::OptimizerState);
    Ok(t)
}
