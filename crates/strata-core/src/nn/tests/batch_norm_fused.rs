//! batch_norm's fused passes against the same normalisation written with elementary ops
//! (whose gradients autograd derives): values, running statistics and every gradient, in
//! training and eval mode, f64 and f32, and a strided input (which takes the composed path).

use super::close;
use crate::nn::functional::batch_norm;
use crate::{DType, Generator, Result, Tensor};

/// `(x, weight, bias)` leaves in `dtype`, `x` of `shape`.
fn operands(shape: &[usize], dtype: DType) -> Result<[Tensor; 3]> {
    let mut g = Generator::new(5);
    let c = shape[1];
    let x = Tensor::randn_with(shape, DType::F64, &mut g)?
        .mul(3.0)?
        .add(1.5)?;
    let w = Tensor::randn_with(&[c], DType::F64, &mut g)?;
    let b = Tensor::randn_with(&[c], DType::F64, &mut g)?;
    let leaf = |t: Tensor| t.to(dtype)?.requires_grad_(true);
    Ok([leaf(x)?, leaf(w)?, leaf(b)?])
}

/// Batch norm written out: `(x - mean)·invstd·w + b` with the batch's statistics in
/// training mode, else the given ones.
fn written_out(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    stats: Option<(&Tensor, &Tensor)>,
) -> Result<Tensor> {
    let c = x.shape()[1];
    let per_channel: Vec<usize> = (0..x.dim()).map(|d| if d == 1 { c } else { 1 }).collect();
    let dims: Vec<usize> = (0..x.dim()).filter(|&d| d != 1).collect();
    let (mean, var) = match stats {
        Some((m, v)) => (m.reshape_to(&per_channel)?, v.reshape_to(&per_channel)?),
        None => (x.mean_over(&dims, true)?, x.var_over(&dims, 0.0, true)?),
    };
    let invstd = var.add(1e-5)?.rsqrt()?;
    x.sub(&mean)?
        .mul(&invstd)?
        .mul(&w.reshape_to(&per_channel)?)?
        .add(&b.reshape_to(&per_channel)?)
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// Runs both in `dtype` and compares outputs, running statistics and gradients to `tol`.
fn agree(shape: &[usize], dtype: DType, training: bool, tol: f64) -> Result<()> {
    let c = shape[1];
    let [x, w, b] = operands(shape, dtype)?;
    let probe = Tensor::randn_with(shape, DType::F64, &mut Generator::new(9))?.to(dtype)?;
    let stats = || -> Result<(Tensor, Tensor)> {
        Ok((
            Tensor::full(&[c], 0.25, dtype)?,
            Tensor::full(&[c], 2.0, dtype)?,
        ))
    };
    let (rm, rv) = stats()?;
    let y = batch_norm(
        &x,
        Some(&rm),
        Some(&rv),
        Some(&w),
        Some(&b),
        training,
        0.1,
        1e-5,
    )?;
    y.mul(&probe)?.sum(None, false)?.backward()?;
    let fused_grads: Vec<Vec<f64>> = [&x, &w, &b]
        .iter()
        .map(|t| values(&t.grad().unwrap()))
        .collect();
    for t in [&x, &w, &b] {
        t.zero_grad(true)?;
    }
    let (rm2, rv2) = stats()?;
    let want = written_out(&x, &w, &b, (!training).then_some((&rm2, &rv2)))?;
    want.mul(&probe)?.sum(None, false)?.backward()?;
    close(&values(&y), &values(&want), tol);
    for (got, t) in fused_grads.iter().zip([&x, &w, &b]) {
        let want = values(&t.grad().unwrap());
        let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        close(got, &want, tol * scale);
    }
    if training {
        // r = 0.9·r + 0.1·s, the variance unbiased.
        let dims: Vec<usize> = (0..x.dim()).filter(|&d| d != 1).collect();
        let xd = x.detach()?.to(DType::F64)?;
        let n = (x.numel() / c) as f64;
        let mean = values(&xd.mean_over(&dims, false)?);
        let var = values(&xd.var_over(&dims, 0.0, false)?);
        let want_m: Vec<f64> = mean.iter().map(|m| 0.9 * 0.25 + 0.1 * m).collect();
        let want_v: Vec<f64> = var
            .iter()
            .map(|v| 0.9 * 2.0 + 0.1 * v * n / (n - 1.0))
            .collect();
        close(&values(&rm), &want_m, tol * 10.0);
        close(&values(&rv), &want_v, tol * 10.0);
    }
    Ok(())
}

#[test]
fn the_fused_passes_equal_batch_norm_written_out() -> Result<()> {
    for training in [true, false] {
        agree(&[4, 3, 5, 7], DType::F64, training, 1e-12)?;
        agree(&[6, 2, 33], DType::F64, training, 1e-12)?;
        agree(&[16, 3], DType::F64, training, 1e-12)?;
        agree(&[8, 4, 9, 9], DType::F32, training, 2e-5)?;
    }
    Ok(())
}

/// A strided input takes the composed path; its values and gradients are the contiguous
/// input's.
#[test]
fn a_strided_input_gives_what_a_contiguous_one_gives() -> Result<()> {
    let [x, w, b] = operands(&[4, 3, 6, 5], DType::F64)?;
    let strided = x
        .detach()?
        .transpose(2, 3)?
        .contiguous()?
        .transpose(2, 3)?
        .requires_grad_(true)?;
    assert!(!strided.is_contiguous());
    let run = |x: &Tensor| -> Result<(Vec<f64>, Vec<f64>)> {
        let y = batch_norm(x, None, None, Some(&w), Some(&b), true, 0.1, 1e-5)?;
        y.mul(&y)?.sum(None, false)?.backward()?;
        Ok((values(&y), values(&x.grad().unwrap())))
    };
    let (y1, g1) = run(&x)?;
    let (y2, g2) = run(&strided)?;
    close(&y1, &y2, 1e-12);
    close(&g1, &g2, 1e-10);
    Ok(())
}
