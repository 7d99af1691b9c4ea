//! Batch normalisation over the channel dimension (`nn.BatchNorm1d`, `nn.BatchNorm2d`).

use strata_core::autograd::GradModeGuard;
use strata_core::nn::functional::batch_norm;
use strata_core::{DType, Error, Result, Tensor};

use crate::module::{Module, ModuleCore, TensorSlot};

/// Batch normalisation of `[N, C]`/`[N, C, L]` (`D = 1`) or `[N, C, H, W]` (`D = 2`)
/// inputs: in training each channel is normalised by the batch's mean and (biased)
/// variance, and the running statistics move towards the batch's (unbiased variance) by
/// `momentum`; in evaluation the running statistics are used. Parameters `weight` (ones) and
/// `bias` (zeros); buffers `running_mean` (zeros), `running_var` (ones) and
/// `num_batches_tracked` (i64, counted up by each training forward), PyTorch's names and
/// defaults (momentum 0.1, eps 1e-5).
#[derive(Debug, Clone)]
pub struct BatchNorm<const D: usize> {
    core: ModuleCore,
    weight: TensorSlot,
    bias: TensorSlot,
    running_mean: TensorSlot,
    running_var: TensorSlot,
    num_batches_tracked: TensorSlot,
    num_features: usize,
    momentum: Option<f64>,
    eps: f64,
}

/// Batch normalisation of `[N, C]` or `[N, C, L]` inputs.
pub type BatchNorm1d = BatchNorm<1>;
/// Batch normalisation of `[N, C, H, W]` inputs.
pub type BatchNorm2d = BatchNorm<2>;

impl<const D: usize> BatchNorm<D> {
    fn kind() -> &'static str {
        if D == 1 {
            "BatchNorm1d"
        } else {
            "BatchNorm2d"
        }
    }

    /// A layer over `num_features` channels with PyTorch's defaults.
    pub fn new(num_features: usize) -> Result<Self> {
        Self::with_options(num_features, 1e-5, Some(0.1))
    }

    /// A layer with `eps` and `momentum` (`None`: a cumulative average of all batches).
    pub fn with_options(num_features: usize, eps: f64, momentum: Option<f64>) -> Result<Self> {
        let core = ModuleCore::library(Self::kind());
        let c = [num_features];
        let weight = core.register_parameter("weight", Tensor::ones(&c, DType::F32)?)?;
        let bias = core.register_parameter("bias", Tensor::zeros(&c, DType::F32)?)?;
        let running_mean =
            core.register_buffer("running_mean", Tensor::zeros(&c, DType::F32)?, true)?;
        let running_var =
            core.register_buffer("running_var", Tensor::ones(&c, DType::F32)?, true)?;
        let num_batches_tracked =
            core.register_buffer("num_batches_tracked", Tensor::zeros(&(), DType::I64)?, true)?;
        Ok(BatchNorm {
            core,
            weight,
            bias,
            running_mean,
            running_var,
            num_batches_tracked,
            num_features,
            momentum,
            eps,
        })
    }

    /// The running mean.
    pub fn running_mean(&self) -> Tensor {
        self.running_mean.get()
    }

    /// The running variance.
    pub fn running_var(&self) -> Tensor {
        self.running_var.get()
    }

    /// The number of training batches seen.
    pub fn num_batches_tracked(&self) -> Tensor {
        self.num_batches_tracked.get()
    }

    fn check(&self, x: &Tensor) -> Result<()> {
        let shape = x.shape();
        let dims_ok = if D == 1 {
            matches!(shape.len(), 2 | 3)
        } else {
            shape.len() == 4
        };
        if !dims_ok || shape[1] != self.num_features {
            let want = if D == 1 {
                "[N, C] or [N, C, L]"
            } else {
                "[N, C, H, W]"
            };
            return Err(Error::shape(
                Self::kind(),
                format!(
                    "expected {want} with C = {}, got {:?}",
                    self.num_features,
                    shape.as_slice()
                ),
                vec![shape.to_vec()],
            ));
        }
        Ok(())
    }
}

impl<const D: usize> Module for BatchNorm<D> {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.check(x)?;
        let training = self.is_training();
        let momentum = if training {
            if x.numel() / self.num_features.max(1) <= 1 {
                return Err(Error::argument(
                    Self::kind(),
                    format!(
                        "training needs more than one value per channel, got input {:?}",
                        x.shape().as_slice()
                    ),
                    Some("use a larger batch or call eval()"),
                ));
            }
            let tracked = self.num_batches_tracked.get();
            {
                let _no_grad = GradModeGuard::no_grad();
                tracked.add_(1i64)?;
            }
            match self.momentum {
                Some(m) => m,
                // A cumulative average: the newest batch weighs 1 / batches seen.
                None => 1.0 / tracked.item::<i64>()?.max(1) as f64,
            }
        } else {
            0.0
        };
        let (rm, rv) = (self.running_mean.get(), self.running_var.get());
        let (w, b) = (self.weight.get(), self.bias.get());
        batch_norm(
            x,
            Some(&rm),
            Some(&rv),
            Some(&w),
            Some(&b),
            training,
            momentum,
            self.eps,
        )
    }
}
