//! `Sequential`: modules run one after another.

use std::sync::Arc;

use strata_core::{Result, Tensor};

use crate::module::{Module, ModuleCore};

/// Runs its children in order, each on the previous one's output (`nn.Sequential`). They are
/// registered as `"0"`, `"1"`, ..., so parameter names count parameter-free children too
/// (`0.weight`, `2.weight` around a `ReLU`).
///
/// Each intermediate result is dropped as soon as the next child has returned, so under
/// `no_grad` a deep stack needs no more memory than a shallow one of the same widths.
///
/// ```
/// use strata_core::{DType, Tensor};
/// use strata_nn::{Linear, Module, ReLU, Sequential};
/// let net = Sequential::new()
///     .append(Linear::new(4, 8, true)?)?
///     .append(ReLU::new())?
///     .append(Linear::new(8, 2, true)?)?;
/// let names: Vec<String> = net.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// let y = net.call(&Tensor::ones(&[5, 4], DType::F32)?)?;
/// assert_eq!(y.shape().as_slice(), [5, 2]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Sequential {
    core: ModuleCore,
}

indexed_container!(Sequential);

/// Runs `modules` in order on `x`, dropping each intermediate as soon as the next module
/// has returned.
pub(crate) fn run_chain(modules: &[Arc<dyn Module>], x: &Tensor) -> Result<Tensor> {
    let Some((first, rest)) = modules.split_first() else {
        return Ok(x.clone());
    };
    let mut h = first.call(x)?;
    for m in rest {
        // The assignment drops the previous intermediate as soon as `m` has returned.
        h = m.call(&h)?;
    }
    Ok(h)
}

impl Module for Sequential {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        run_chain(&self.modules(), x)
    }
}
