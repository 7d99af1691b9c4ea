//! `lstm_cell`: the gate products, then the state and the output as one node each (or
//! PyTorch's composition of recorded ops for half-precision gates).

use super::{check, chunks, composed, sigmoid_slope, tanh_slope};
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, take, Grads};
use crate::nn::functional::linear;
use crate::{Result, Tensor};

/// PyTorch's `lstm_cell`: for `x` (`[B, I]` or `[I]`), `h` and `c` (`[B, H]` or `[H]`),
/// `gates = linear(h, w_hh, b_hh) + linear(x, w_ih, b_ih)` (`w_ih` is `[4H, I]`, `w_hh`
/// `[4H, H]`) split into `i, f, g, o`; returns `(h1, c1)` with
/// `c1 = σ(f)·c + σ(i)·tanh(g)` and `h1 = σ(o)·tanh(c1)`.
///
/// Memory: besides the products' own saves (`x`, `h` and the weights, no copies), the
/// backward keeps the `[B, 4H]` gates, `c` and `c1`.
///
/// ```
/// use strata_core::nn::functional::lstm_cell;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::ones(&[1, 2], DType::F32)?;
/// let (h, c) = (Tensor::zeros(&[1, 3], DType::F32)?, Tensor::zeros(&[1, 3], DType::F32)?);
/// let (w_ih, w_hh) = (Tensor::zeros(&[12, 2], DType::F32)?, Tensor::zeros(&[12, 3], DType::F32)?);
/// let (h1, c1) = lstm_cell(&x, &h, &c, &w_ih, &w_hh, None, None)?;
/// // Zero gates: c1 = 0.5·0 + 0.5·tanh(0) = 0, h1 = 0.5·tanh(0) = 0.
/// assert_eq!(c1.to_vec::<f32>()?, vec![0.0; 3]);
/// assert_eq!(h1.shape().as_slice(), [1, 3]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn lstm_cell(
    x: &Tensor,
    h: &Tensor,
    c: &Tensor,
    w_ih: &Tensor,
    w_hh: &Tensor,
    b_ih: Option<&Tensor>,
    b_hh: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    let mut inputs = vec![x, h, c, w_ih, w_hh];
    inputs.extend(b_ih);
    inputs.extend(b_hh);
    let (has_bi, has_bh) = (b_ih.is_some(), b_hh.is_some());
    Entry::new("lstm_cell", &inputs)?.run_composite(|ctx, t| {
        let b_ih = has_bi.then(|| t[5]);
        let b_hh = has_bh.then(|| t[5 + has_bi as usize]);
        check(ctx.op(), t[0], t[1], Some(t[2]), t[3], t[4], 4)?;
        let gates = linear(t[1], t[4], b_hh)?.add(&linear(t[0], t[3], b_ih)?)?;
        if composed(&gates, t[2]) {
            return lstm_composed(&gates, t[2]);
        }
        let c1 = lstm_state(&gates, t[2])?;
        let h1 = lstm_output(&gates, &c1)?;
        Ok((h1, c1))
    })
}

/// PyTorch's CPU `lstm_cell` after the products, op by op: `i, f, g, o` are the sigmoid,
/// sigmoid, tanh and sigmoid of the gates' chunks (in the gates' dtype),
/// `c1 = f·c + i·g` and `h1 = o·tanh(c1)`, each product and sum in its operands' promoted
/// dtype.
fn lstm_composed(gates: &Tensor, c: &Tensor) -> Result<(Tensor, Tensor)> {
    let q = chunks(gates, 4)?;
    let (i, f, g, o) = (
        q[0].sigmoid()?,
        q[1].sigmoid()?,
        q[2].tanh()?,
        q[3].sigmoid()?,
    );
    let c1 = f.mul(c)?.add(&i.mul(&g)?)?;
    let h1 = o.mul(&c1.tanh()?)?;
    Ok((h1, c1))
}

/// `c1 = σ(f)·c + σ(i)·tanh(g)`, one node saving the gates and `c`.
#[track_caller]
fn lstm_state(gates: &Tensor, c: &Tensor) -> Result<Tensor> {
    Entry::new("lstm_cell", &[gates, c])?.run(
        |_, t| {
            let q = chunks(t[0], 4)?;
            q[1].sigmoid()?
                .mul(t[1])?
                .add(&q[0].sigmoid()?.mul(&q[2].tanh()?)?)
        },
        |ctx, t, out| {
            record(ctx, "LstmCellStateBackward", t, out, |rec| {
                let (need_g, need_c) = (rec.needs(0), rec.needs(1));
                let sg = rec.save(t[0])?;
                let sc = rec.save_if(need_g, t[1])?;
                Ok(move |g: Tensor| -> Grads {
                    let q = chunks(&sg.get()?, 4)?;
                    let (si, sf, tg) = (q[0].sigmoid()?, q[1].sigmoid()?, q[2].tanh()?);
                    let gg = if need_g {
                        let di = g.mul(&tg)?.mul(&sigmoid_slope(&si)?)?;
                        let df = g.mul(&take(&sc)?)?.mul(&sigmoid_slope(&sf)?)?;
                        let dg = g.mul(&si)?.mul(&tanh_slope(&tg)?)?;
                        let zero = Tensor::on(g.device()).zeros(&di.shape(), di.dtype())?;
                        Some(Tensor::cat(&[&di, &df, &dg, &zero], di.dim() as i64 - 1)?)
                    } else {
                        None
                    };
                    let gc = if need_c { Some(g.mul(&sf)?) } else { None };
                    Ok(vec![gg, gc])
                })
            })
        },
    )
}

/// `h1 = σ(o)·tanh(c1)`, one node saving the gates and `c1`.
#[track_caller]
fn lstm_output(gates: &Tensor, c1: &Tensor) -> Result<Tensor> {
    Entry::new("lstm_cell", &[gates, c1])?.run(
        |_, t| chunks(t[0], 4)?[3].sigmoid()?.mul(&t[1].tanh()?),
        |ctx, t, out| {
            record(ctx, "LstmCellOutputBackward", t, out, |rec| {
                let (need_g, need_c) = (rec.needs(0), rec.needs(1));
                let sg = rec.save(t[0])?;
                let sc = rec.save(t[1])?;
                Ok(move |g: Tensor| -> Grads {
                    let so = chunks(&sg.get()?, 4)?[3].sigmoid()?;
                    let tc = sc.get()?.tanh()?;
                    let gg = if need_g {
                        let d_o = g.mul(&tc)?.mul(&sigmoid_slope(&so)?)?;
                        let mut wide = d_o.shape().to_vec();
                        let last = wide.len() - 1;
                        wide[last] *= 3;
                        let zero = Tensor::on(g.device()).zeros(&wide, d_o.dtype())?;
                        Some(Tensor::cat(&[&zero, &d_o], last as i64)?)
                    } else {
                        None
                    };
                    let gc = if need_c {
                        Some(g.mul(&so)?.mul(&tanh_slope(&tc)?)?)
                    } else {
                        None
                    };
                    Ok(vec![gg, gc])
                })
            })
        },
    )
}
