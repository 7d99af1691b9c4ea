//! `dropout`: zeroes elements at random and scales the rest, saving a one-byte mask.

use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::op::OpContext;
use crate::random::{global_generator, Generator};
use crate::{Error, Result, Tensor};

/// In training, zeroes each element of `x` with probability `p` and scales the others by
/// `1 / (1 - p)` (PyTorch's `F.dropout`); the mask is drawn from the process-wide generator,
/// so restoring its state (as a checkpoint's recomputation does) redraws the same mask.
/// With `training` false, `p` = 0 or an empty `x` it returns `x` itself, as PyTorch does on
/// the CPU. The backward node saves the mask as bool (one byte per element).
///
/// ```
/// use strata_core::nn::functional::dropout;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::ones(&[1000], DType::F32)?;
/// let y = dropout(&x, 0.5, true)?;
/// let v = y.to_vec::<f32>()?;
/// assert!(v.iter().all(|&e| e == 0.0 || e == 2.0));
/// assert!(dropout(&x, 0.5, false)?.is_same(&x));
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn dropout(x: &Tensor, p: f64, training: bool) -> Result<Tensor> {
    run(x, p, training, |n| draw_mask(n, p, &mut global_generator()))
}

/// [`dropout`] drawing its mask from `generator` instead of the process-wide one.
#[track_caller]
pub fn dropout_with(
    x: &Tensor,
    p: f64,
    training: bool,
    generator: &mut Generator,
) -> Result<Tensor> {
    run(x, p, training, |n| draw_mask(n, p, generator))
}

/// `dropout` with its mask drawn by `draw` (given the number of elements).
#[track_caller]
fn run(
    x: &Tensor,
    p: f64,
    training: bool,
    draw: impl FnOnce(usize) -> Vec<bool>,
) -> Result<Tensor> {
    Entry::new("dropout", &[x])?
        .run(
            |ctx, x| {
                let x = x[0];
                check(ctx.op(), x, p)?;
                if !training || p == 0.0 || x.numel() == 0 {
                    return Ok((x.clone(), None));
                }
                apply(x, p, draw(x.numel()))
            },
            |ctx, x, (out, mask)| match mask {
                Some((mask, scale)) => backward(ctx, x[0], out, mask, *scale),
                // Nothing dropped: the result is the input itself, already recorded.
                None => Ok(()),
            },
        )
        .map(|(out, _)| out)
}

fn check(op: &'static str, x: &Tensor, p: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::argument(
            op,
            format!("the dropout probability must be between 0 and 1, got {p}"),
            Some("p is the probability of zeroing an element, e.g. 0.1"),
        ));
    }
    super::check::floating(op, "the input", x)
}

/// One keep/drop decision per element, in row-major order (`p` = 1 draws nothing).
fn draw_mask(n: usize, p: f64, generator: &mut Generator) -> Vec<bool> {
    if p >= 1.0 {
        return vec![false; n];
    }
    let keep = 1.0 - p;
    (0..n).map(|_| generator.next_f64() < keep).collect()
}

/// `x` with the elements `mask` drops zeroed and the others scaled; also the mask as a
/// tensor and the scale, for the backward.
fn apply(x: &Tensor, p: f64, mask: Vec<bool>) -> Result<(Tensor, Option<(Tensor, f64)>)> {
    // p = 1 multiplies by zero (as PyTorch does), keeping NaN and infinities visible.
    let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
    let mask = Tensor::on(x.device()).from_vec(mask, &x.shape())?;
    let out = x.mul(&mask)?.mul(scale)?;
    Ok((out, Some((mask, scale))))
}

/// Records `out = dropout(x)` with the kept elements `mask`, scaled by `scale`.
fn backward(ctx: &OpContext, x: &Tensor, out: &Tensor, mask: &Tensor, scale: f64) -> Result<()> {
    record(ctx, "NativeDropoutBackward0", &[x], out, |rec| {
        let saved = rec.save(mask)?;
        Ok(move |g: Tensor| -> Grads { Ok(vec![Some(g.mul(&saved.get()?)?.mul(scale)?)]) })
    })
}
