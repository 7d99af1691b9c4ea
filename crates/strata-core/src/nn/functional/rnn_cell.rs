//! `lstm_cell` and `gru_cell`: the two gate products are ordinary recorded `linear`s (which
//! save only the tensors they were given), and the element-wise rest of each cell is a node
//! of its own that saves the pre-activation gates and the states, not the dozen
//! intermediates a composition of generic ops would keep. With bf16 or f16 gates (under
//! autocast, or with half-precision inputs) the rest is PyTorch's composition of generic
//! recorded ops instead, so that every step rounds as PyTorch's CPU cells do.

use super::check::{floating, shape};
use super::linear;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, take, Grads};
use crate::{DType, Result, Tensor};

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

/// PyTorch's `gru_cell`: for `x` (`[B, I]` or `[I]`) and `h` (`[B, H]` or `[H]`), with
/// `ir, iz, in` the chunks of `linear(x, w_ih, b_ih)` and `hr, hz, hn` those of
/// `linear(h, w_hh, b_hh)` (`w_ih` is `[3H, I]`, `w_hh` `[3H, H]`): `r = σ(hr + ir)`,
/// `z = σ(hz + iz)`, `n = tanh(in + hn·r)`, and `h1 = (h - n)·z + n`.
///
/// Memory: besides the products' own saves, the backward keeps `r`, `z`, `n`, `hn` and `h`.
///
/// ```
/// use strata_core::nn::functional::gru_cell;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::ones(&[1, 2], DType::F32)?;
/// let h = Tensor::ones(&[1, 3], DType::F32)?;
/// let (w_ih, w_hh) = (Tensor::zeros(&[9, 2], DType::F32)?, Tensor::zeros(&[9, 3], DType::F32)?);
/// // Zero gates: z = 0.5, n = 0, so h1 = 0.5·h.
/// assert_eq!(gru_cell(&x, &h, &w_ih, &w_hh, None, None)?.to_vec::<f32>()?, vec![0.5; 3]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn gru_cell(
    x: &Tensor,
    h: &Tensor,
    w_ih: &Tensor,
    w_hh: &Tensor,
    b_ih: Option<&Tensor>,
    b_hh: Option<&Tensor>,
) -> Result<Tensor> {
    let mut inputs = vec![x, h, w_ih, w_hh];
    inputs.extend(b_ih);
    inputs.extend(b_hh);
    let (has_bi, has_bh) = (b_ih.is_some(), b_hh.is_some());
    Entry::new("gru_cell", &inputs)?.run_composite(|ctx, t| {
        let b_ih = has_bi.then(|| t[4]);
        let b_hh = has_bh.then(|| t[4 + has_bi as usize]);
        check(ctx.op(), t[0], t[1], None, t[2], t[3], 3)?;
        let gi = linear(t[0], t[2], b_ih)?;
        let gh = linear(t[1], t[3], b_hh)?;
        if composed(&gi, t[1]) {
            return gru_composed(&gi, &gh, t[1]);
        }
        gru_update(&gi, &gh, t[1])
    })
}

/// Checks a cell's shapes: `x` `[B, I]` or `[I]`, states `[B, H]` or `[H]`, `w_ih`
/// `[k·H, I]`, `w_hh` `[k·H, H]`.
fn check(
    op: &'static str,
    x: &Tensor,
    h: &Tensor,
    c: Option<&Tensor>,
    w_ih: &Tensor,
    w_hh: &Tensor,
    k: usize,
) -> Result<()> {
    floating(op, "the input", x)?;
    let bad = |what: String| {
        Err(shape(
            op,
            what,
            vec![
                x.shape().to_vec(),
                h.shape().to_vec(),
                w_ih.shape().to_vec(),
                w_hh.shape().to_vec(),
            ],
            "x is [B, input_size], the states [B, hidden_size], w_ih [gates·hidden_size, \
             input_size] and w_hh [gates·hidden_size, hidden_size]",
        ))
    };
    if !matches!(x.dim(), 1 | 2) || h.dim() != x.dim() {
        return bad(format!(
            "x {:?} and h {:?} must both be 2-d (or both 1-d)",
            x.shape(),
            h.shape()
        ));
    }
    let hidden = h.shape()[h.dim() - 1];
    let input = x.shape()[x.dim() - 1];
    if x.dim() == 2 && x.shape()[0] != h.shape()[0] {
        return bad(format!(
            "x {:?} and h {:?} have different batch sizes",
            x.shape(),
            h.shape()
        ));
    }
    if let Some(c) = c {
        if c.shape() != h.shape() {
            return bad(format!(
                "c {:?} must have h's shape {:?}",
                c.shape(),
                h.shape()
            ));
        }
    }
    if w_ih.shape().as_slice() != [k * hidden, input]
        || w_hh.shape().as_slice() != [k * hidden, hidden]
    {
        return bad(format!(
            "w_ih {:?} and w_hh {:?} must be [{}, {input}] and [{}, {hidden}]",
            w_ih.shape(),
            w_hh.shape(),
            k * hidden,
            k * hidden
        ));
    }
    Ok(())
}

/// Whether a cell runs as PyTorch's composition of recorded ops rather than as one node:
/// when its gates are bf16 or f16 (under autocast, or with half-precision inputs), or of
/// another dtype than the state. There every op rounds to its own dtype, as PyTorch's
/// composition does, which a fused node computing in the widest dtype would not mirror.
fn composed(gates: &Tensor, state: &Tensor) -> bool {
    matches!(gates.dtype(), DType::BF16 | DType::F16) || gates.dtype() != state.dtype()
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

/// PyTorch's CPU `gru_cell` after the products, op by op: `r = σ(hr + ir)`,
/// `z = σ(hz + iz)`, `n = tanh(in + hn·r)` in the gates' dtype, and `h1 = (h - n)·z + n`
/// in the promoted dtype of `h` and the gates.
fn gru_composed(gi: &Tensor, gh: &Tensor, h: &Tensor) -> Result<Tensor> {
    let (i, hh) = (chunks(gi, 3)?, chunks(gh, 3)?);
    let r = hh[0].add(&i[0])?.sigmoid()?;
    let z = hh[1].add(&i[1])?.sigmoid()?;
    let n = i[2].add(&hh[2].mul(&r)?)?.tanh()?;
    h.sub(&n)?.mul(&z)?.add(&n)
}

/// The gates' `k` chunks along the last dimension.
fn chunks(gates: &Tensor, k: usize) -> Result<Vec<Tensor>> {
    gates.chunk(k, gates.dim() as i64 - 1)
}

/// `1 - t²`, the derivative of tanh at the point whose tanh is `t`.
fn tanh_slope(t: &Tensor) -> Result<Tensor> {
    t.mul(t)?.neg()?.add(1.0)
}

/// `s·(1 - s)`, the derivative of the sigmoid at the point whose sigmoid is `s`.
fn sigmoid_slope(s: &Tensor) -> Result<Tensor> {
    s.neg()?.add(1.0)?.mul(s)
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

/// The GRU's update from the two products' gates and `h`, one node saving `r`, `z`, `n`,
/// `hn` and `h`.
#[track_caller]
fn gru_update(gi: &Tensor, gh: &Tensor, h: &Tensor) -> Result<Tensor> {
    Entry::new("gru_cell", &[gi, gh, h])?
        .run(
            |_, t| {
                let (i, hh) = (chunks(t[0], 3)?, chunks(t[1], 3)?);
                let r = hh[0].add(&i[0])?.sigmoid()?;
                let z = hh[1].add(&i[1])?.sigmoid()?;
                let n = i[2].add(&hh[2].mul(&r)?)?.tanh()?;
                let h1 = t[2].sub(&n)?.mul(&z)?.add(&n)?;
                Ok((h1, [r, z, n, hh[2].clone()]))
            },
            |ctx, t, (out, parts)| {
                record(ctx, "GruCellBackward", t, out, |rec| {
                    let need = [rec.needs(0), rec.needs(1), rec.needs(2)];
                    let saved = parts
                        .iter()
                        .map(|p| rec.save(p))
                        .collect::<Result<Vec<_>>>()?;
                    let sh = rec.save(t[2])?;
                    Ok(move |g: Tensor| -> Grads {
                        let [r, z, n, hn] = [0, 1, 2, 3].map(|k| saved[k].get());
                        let (r, z, n, hn) = (r?, z?, n?, hn?);
                        let h = sh.get()?;
                        let dz = g.mul(&h.sub(&n)?)?;
                        let dn = g.mul(&z.neg()?.add(1.0)?)?;
                        let da_n = dn.mul(&tanh_slope(&n)?)?;
                        let da_z = dz.mul(&sigmoid_slope(&z)?)?;
                        let da_r = da_n.mul(&hn)?.mul(&sigmoid_slope(&r)?)?;
                        let last = g.dim() as i64 - 1;
                        let gi = if need[0] {
                            Some(Tensor::cat(&[&da_r, &da_z, &da_n], last)?)
                        } else {
                            None
                        };
                        let gh = if need[1] {
                            Some(Tensor::cat(&[&da_r, &da_z, &da_n.mul(&r)?], last)?)
                        } else {
                            None
                        };
                        let gx = if need[2] { Some(g.mul(&z)?) } else { None };
                        Ok(vec![gi, gh, gx])
                    })
                })
            },
        )
        .map(|(out, _)| out)
}
