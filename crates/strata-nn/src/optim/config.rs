//! The optimizers' hyper-parameters, with PyTorch's defaults, and their checks.

use strata_core::{Error, Result};

/// SGD's hyper-parameters (`torch.optim.SGD`): `lr` and `weight_decay` are the defaults of
/// groups that do not set their own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    /// Learning rate (1e-3).
    pub lr: f64,
    /// Momentum factor (0: no momentum buffer).
    pub momentum: f64,
    /// Dampening of the gradient's share of the momentum buffer (0).
    pub dampening: f64,
    /// Nesterov momentum (needs momentum > 0 and dampening 0).
    pub nesterov: bool,
    /// L2 penalty added to the gradient (0).
    pub weight_decay: f64,
    /// Ascend the objective instead of descending it.
    pub maximize: bool,
}

impl Default for Sgd {
    fn default() -> Self {
        Sgd {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            maximize: false,
        }
    }
}

/// Adam's hyper-parameters (`torch.optim.Adam`; [`Adam::adamw`] gives `torch.optim.AdamW`'s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adam {
    /// Learning rate (1e-3).
    pub lr: f64,
    /// Decay rates of the first and second moments ((0.9, 0.999)).
    pub betas: (f64, f64),
    /// Added to the denominator (1e-8).
    pub eps: f64,
    /// Weight decay (0 for Adam, 0.01 for AdamW).
    pub weight_decay: f64,
    /// Keep the running maximum of the second moment (AMSGrad).
    pub amsgrad: bool,
    /// Ascend the objective instead of descending it.
    pub maximize: bool,
    /// Decay the parameter itself (`p *= 1 − lr·wd`, AdamW) instead of adding `wd·p` to the
    /// gradient.
    pub decoupled_weight_decay: bool,
}

impl Default for Adam {
    fn default() -> Self {
        Adam {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            maximize: false,
            decoupled_weight_decay: false,
        }
    }
}

impl Adam {
    /// AdamW's defaults: Adam's, with decoupled weight decay 0.01.
    pub fn adamw() -> Adam {
        Adam {
            weight_decay: 0.01,
            decoupled_weight_decay: true,
            ..Adam::default()
        }
    }
}

/// Which update an optimizer makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// Stochastic gradient descent.
    Sgd(Sgd),
    /// Adam or AdamW.
    Adam(Adam),
}

impl Rule {
    /// PyTorch's class name: `SGD`, `Adam` or `AdamW`.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::Sgd(_) => "SGD",
            Rule::Adam(a) if a.decoupled_weight_decay => "AdamW",
            Rule::Adam(_) => "Adam",
        }
    }

    /// The default learning rate and weight decay of groups.
    pub(crate) fn defaults(&self) -> (f64, f64) {
        match self {
            Rule::Sgd(s) => (s.lr, s.weight_decay),
            Rule::Adam(a) => (a.lr, a.weight_decay),
        }
    }

    /// The names of the per-parameter state tensors, in the kernel's order.
    pub fn state_names(&self) -> &'static [&'static str] {
        match self {
            Rule::Sgd(s) if s.momentum != 0.0 => &["momentum_buffer"],
            Rule::Sgd(_) => &[],
            Rule::Adam(a) if a.amsgrad => &["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
            Rule::Adam(_) => &["exp_avg", "exp_avg_sq"],
        }
    }

    /// Checks the hyper-parameters as PyTorch's constructors do.
    pub(crate) fn check(&self) -> Result<()> {
        let op = "optimizer";
        let bad = |what: String| Err(Error::argument(op, what, None));
        let (lr, wd) = self.defaults();
        check_lr(lr)?;
        check_weight_decay(wd)?;
        match self {
            Rule::Sgd(s) => {
                if !(0.0..).contains(&s.momentum) {
                    return bad(format!("invalid momentum {}: it must be >= 0", s.momentum));
                }
                if s.nesterov && (s.momentum <= 0.0 || s.dampening != 0.0) {
                    return Err(Error::argument(
                        op,
                        format!(
                            "nesterov momentum needs momentum > 0 and dampening 0, got \
                             momentum {} and dampening {}",
                            s.momentum, s.dampening
                        ),
                        Some("set nesterov to false, or a positive momentum and no dampening"),
                    ));
                }
            }
            Rule::Adam(a) => {
                if !(0.0..).contains(&a.eps) {
                    return bad(format!("invalid epsilon {}: it must be >= 0", a.eps));
                }
                for (i, b) in [a.betas.0, a.betas.1].into_iter().enumerate() {
                    if !(0.0..1.0).contains(&b) {
                        return bad(format!(
                            "invalid beta parameter at index {i}: {b} is not in [0, 1)"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A learning rate must be a number >= 0.
pub(crate) fn check_lr(lr: f64) -> Result<()> {
    if lr >= 0.0 {
        Ok(())
    } else {
        Err(Error::argument(
            "optimizer",
            format!("invalid learning rate {lr}: it must be >= 0"),
            None,
        ))
    }
}

/// A weight decay must be a number >= 0.
pub(crate) fn check_weight_decay(wd: f64) -> Result<()> {
    if wd >= 0.0 {
        Ok(())
    } else {
        Err(Error::argument(
            "optimizer",
            format!("invalid weight_decay value {wd}: it must be >= 0"),
            None,
        ))
    }
}
