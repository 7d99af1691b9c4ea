//! `multinomial`: category indices drawn in proportion to the weights in each row, with or
//! without replacement, as `torch.multinomial` (the sampling step of text generation).

use super::create::from_fn;
use crate::op::OpContext;
use crate::random::{global_generator, Generator};
use crate::{DType, Device, Error, Result, Tensor};

/// The index of the category that `u` (in `0..total`) falls in, given the running sums
/// `cumulative` of the weights: the first whose sum exceeds `u`, so a zero weight is never
/// drawn; rounding that puts `u` at the end falls back to the last non-zero weight.
fn category(cumulative: &[f64], weights: &[f64], u: f64) -> usize {
    let k = cumulative.partition_point(|&c| c <= u);
    if k < weights.len() {
        return k;
    }
    weights.iter().rposition(|&w| w > 0.0).unwrap_or(0)
}

/// `num_samples` draws from one row of `weights` (each checked: finite, non-negative,
/// summing to more than zero).
fn draw_row(
    op: &'static str,
    weights: &mut [f64],
    num_samples: usize,
    replacement: bool,
    g: &mut Generator,
    out: &mut Vec<i64>,
) -> Result<()> {
    if weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
        return Err(Error::argument(
            op,
            "probability tensor contains either `inf`, `nan` or element < 0",
            Some("pass non-negative finite weights (they need not sum to 1)"),
        ));
    }
    let positive = weights.iter().filter(|w| **w > 0.0).count();
    if positive == 0 {
        return Err(Error::argument(
            op,
            "invalid multinomial distribution (sum of probabilities <= 0)",
            Some("every row needs at least one positive weight"),
        ));
    }
    if !replacement && positive < num_samples {
        return Err(Error::argument(
            op,
            format!(
                "invalid multinomial distribution (with replacement=False, not enough \
                 non-negative category to sample): {num_samples} samples from {positive} \
                 categories of positive weight"
            ),
            Some("draw with replacement, or at most as many samples as positive weights"),
        ));
    }
    let mut cumulative = vec![0.0; weights.len()];
    let refresh = |weights: &[f64], cumulative: &mut [f64]| {
        let mut sum = 0.0;
        for (c, w) in cumulative.iter_mut().zip(weights) {
            sum += w;
            *c = sum;
        }
        sum
    };
    let mut total = refresh(weights, &mut cumulative);
    for _ in 0..num_samples {
        let k = category(&cumulative, weights, g.next_f64() * total);
        out.push(k as i64);
        if !replacement {
            weights[k] = 0.0;
            total = refresh(weights, &mut cumulative);
        }
    }
    Ok(())
}

impl Tensor {
    /// `num_samples` category indices per row of weights `self` (1-d: one row; 2-d: one
    /// draw per row), drawn by `generator` in proportion to the weights, as
    /// `torch.multinomial`: with `replacement` a category can come again; without, each
    /// comes at most once. The weights need not sum to 1. The result is `DType::I64`, of
    /// shape `[num_samples]` or `[rows, num_samples]`. The stream is strata's own, not
    /// PyTorch's.
    #[track_caller]
    pub fn multinomial_with(
        &self,
        num_samples: usize,
        replacement: bool,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("multinomial");
        let op = ctx.op();
        let shape = self.shape().to_vec();
        if !matches!(shape.len(), 1 | 2) {
            return Err(Error::argument(
                op,
                format!("prob_dist must be 1 or 2 dim, got {} dims", shape.len()),
                Some("pass one row of weights, or a [rows, categories] matrix"),
            ));
        }
        if !self.dtype().is_floating() {
            return Err(Error::dtype(
                op,
                format!(
                    "multinomial only supports floating-point dtypes for input, got {}",
                    self.dtype()
                ),
                Some("convert the weights first with .to(DType::F32)"),
            ));
        }
        let categories = shape[shape.len() - 1];
        if num_samples == 0 {
            return Err(Error::argument(
                op,
                "cannot sample n_sample <= 0 samples",
                Some("ask for at least one sample"),
            ));
        }
        if !replacement && num_samples > categories {
            return Err(Error::argument(
                op,
                format!(
                    "cannot sample n_sample > prob_dist.size(-1) samples without replacement \
                     ({num_samples} > {categories})"
                ),
                Some("draw with replacement, or fewer samples"),
            ));
        }
        let rows = if shape.len() == 2 { shape[0] } else { 1 };
        let out_shape: Vec<usize> = if shape.len() == 2 {
            vec![rows, num_samples]
        } else {
            vec![num_samples]
        };
        // A meta tensor has no weights to read: the result has its shape and no values.
        let mut samples = Vec::new();
        if self.device() != Device::Meta && categories > 0 {
            let mut weights = self.detach()?.to(DType::F64)?.to_vec::<f64>()?;
            for row in weights.chunks_mut(categories) {
                draw_row(op, row, num_samples, replacement, generator, &mut samples)?;
            }
        } else if self.device() != Device::Meta && rows > 0 {
            return Err(Error::argument(
                op,
                "invalid multinomial distribution (sum of probabilities <= 0)",
                Some("every row needs at least one positive weight"),
            ));
        }
        from_fn(&ctx, self.device(), &out_shape, |i| samples[i])
    }

    /// [`Tensor::multinomial_with`] from the global generator (see [`crate::manual_seed`]).
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// strata_core::manual_seed(0);
    /// let weights = Tensor::from_vec(vec![0.0f32, 1.0, 3.0], &[3])?;
    /// let drawn = weights.multinomial(2, false)?.to_vec::<i64>()?;
    /// // Category 0 has no weight: without replacement the two draws are 1 and 2.
    /// assert_eq!({ let mut d = drawn.clone(); d.sort(); d }, vec![1, 2]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn multinomial(&self, num_samples: usize, replacement: bool) -> Result<Tensor> {
        let mut g = global_generator();
        self.multinomial_with(num_samples, replacement, &mut g)
    }
}
