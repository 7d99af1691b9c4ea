//! Gradient clipping in place: by total norm (`clip_grad_norm_`) and by value
//! (`clip_grad_value_`). Clipping by norm allocates scalars only (each gradient's norm, and
//! the total it returns); clipping by value allocates nothing.

use strata_core::{DType, Device, Error, Result, Scalar, Tensor};

use super::in_backward::refuse_if_stepped_in_backward;

/// Scales the gradients of `params` in place so that their total `norm_type`-norm (the norm
/// of the gradients' norms; `f64::INFINITY` for the largest magnitude) is at most
/// `max_norm`: each is multiplied by `min(1, max_norm / (total + 1e-6))`, as PyTorch's
/// `clip_grad_norm_`. Returns the total norm before clipping, a 0-d tensor (0 when no
/// parameter has a gradient). With `error_if_nonfinite`, a total that is NaN or infinite is
/// an error and no gradient is touched.
///
/// ```
/// use strata_core::{DType, Tensor};
/// use strata_nn::optim::clip_grad_norm_;
/// let w = Tensor::ones(&[4], DType::F32)?.requires_grad_(true)?;
/// w.mul(3.0)?.sum(None, false)?.backward()?; // every gradient is 3: the norm is 6
/// let total = clip_grad_norm_(&[w.clone()], 1.0, 2.0, false)?;
/// assert_eq!(total.item::<f32>()?, 6.0);
/// let g = w.grad().unwrap().to_vec::<f32>()?;
/// assert!(g.iter().all(|x| (x - 0.5).abs() < 1e-6)); // norm 1 now
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn clip_grad_norm_(
    params: &[Tensor],
    max_norm: f64,
    norm_type: f64,
    error_if_nonfinite: bool,
) -> Result<Tensor> {
    const OP: &str = "clip_grad_norm_";
    refuse_if_stepped_in_backward(OP, params, "clip_grad_norm_")?;
    if norm_type.is_nan() || norm_type <= 0.0 {
        return Err(Error::argument(
            OP,
            format!("norm_type must be a positive number or infinity, got {norm_type}"),
            None,
        ));
    }
    let grads: Vec<Tensor> = params.iter().filter_map(Tensor::grad).collect();
    let Some(first) = grads.first() else {
        let device = params.first().map_or(Device::Cpu, Tensor::device);
        return Tensor::on(device).zeros(&(), DType::F32);
    };
    let device = first.device();
    let mut scratch = NormScratch::default();
    let mut norms = Vec::with_capacity(grads.len());
    for g in &grads {
        // The meta device has no values: its totals are unknown and it scales by one.
        norms.push(scratch.norm(g, norm_type)?.unwrap_or(0.0));
    }
    let total = if norm_type.is_infinite() {
        norms
            .iter()
            .fold(0.0f64, |m, &n| if n.is_nan() { n } else { m.max(n) })
    } else {
        norms
            .iter()
            .map(|n| n.powf(norm_type))
            .sum::<f64>()
            .powf(1.0 / norm_type)
    };
    // PyTorch computes the total and the coefficient in f32.
    let total = total as f32;
    if error_if_nonfinite && !total.is_finite() {
        return Err(Error::argument(
            OP,
            format!(
                "the total norm of order {norm_type} of the gradients is {total}, so they \
                 cannot be clipped"
            ),
            Some("pass error_if_nonfinite = false to clip anyway, or find the step that made a gradient non-finite"),
        ));
    }
    let coef = ((max_norm as f32) / (total + 1e-6)).min(1.0);
    let coef = if device == Device::Meta { 1.0 } else { coef };
    for g in &grads {
        g.mul_(Scalar::from(coef as f64))?;
    }
    // The total in the gradients' dtype (f32 when they differ), as PyTorch's stacked norms.
    let dtype = scratch.only_dtype().unwrap_or(DType::F32);
    drop(scratch);
    Tensor::on(device).full(&(), total as f64, dtype)
}

/// One 0-d tensor per gradient dtype that gradients' norms are written into and read back
/// from, so that norming many gradients allocates no result per gradient.
#[derive(Default)]
pub(crate) struct NormScratch(Vec<Tensor>);

impl NormScratch {
    /// `g`'s `p`-norm (`f64::INFINITY`: its largest magnitude), or `None` on a device whose
    /// values cannot be read (meta).
    pub(crate) fn norm(&mut self, g: &Tensor, p: f64) -> Result<Option<f64>> {
        let s = match self.0.iter().find(|s| s.dtype() == g.dtype()) {
            Some(s) => s.clone(),
            None => {
                let s = Tensor::on(g.device()).empty(&(), g.dtype())?;
                self.0.push(s.clone());
                s
            }
        };
        g.norm_out(p, None, false, &s)?;
        if g.device() == Device::Meta {
            return Ok(None);
        }
        s.item::<f64>().map(Some)
    }

    /// The gradients' dtype, when they all had one.
    fn only_dtype(&self) -> Option<DType> {
        match self.0.as_slice() {
            [s] => Some(s.dtype()),
            _ => None,
        }
    }
}

/// Clamps every gradient of `params` in place to `[-clip_value, clip_value]` (PyTorch's
/// `clip_grad_value_`); allocates nothing.
pub fn clip_grad_value_(params: &[Tensor], clip_value: f64) -> Result<()> {
    const OP: &str = "clip_grad_value_";
    refuse_if_stepped_in_backward(OP, params, "clip_grad_value_")?;
    if clip_value.is_nan() {
        return Err(Error::argument(OP, "clip_value is NaN", None));
    }
    let v = clip_value.abs();
    for g in params.iter().filter_map(Tensor::grad) {
        g.clamp_(Some(Scalar::from(-v)), Some(Scalar::from(v)))?;
    }
    Ok(())
}
