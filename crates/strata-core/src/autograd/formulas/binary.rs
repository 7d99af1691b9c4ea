//! Backward of the binary element-wise ops: arithmetic, `pow`, `maximum`/`minimum`.

use super::{record, take, Grads};
use crate::autograd::record::InplaceRecorder;
use crate::op::OpContext;
use crate::ops::binary::{BinaryOp, Other};
use crate::{Result, Scalar, Tensor};

fn binary_name(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add(_) => "AddBackward0",
        BinaryOp::Sub(_) => "SubBackward0",
        BinaryOp::Mul => "MulBackward0",
        BinaryOp::Div => "DivBackward0",
        BinaryOp::Pow => "PowBackward0",
        BinaryOp::Maximum => "MaximumBackward0",
        BinaryOp::Minimum => "MinimumBackward0",
        _ => "ComparisonBackward0",
    }
}

fn scaled(g: &Tensor, alpha: Scalar) -> Result<Tensor> {
    if alpha.to_f64() == 1.0 {
        Ok(g.clone())
    } else {
        g.mul(alpha)
    }
}

/// Records `out = a op other`.
pub(crate) fn binary(
    ctx: &OpContext,
    a: &Tensor,
    other: &Other<'_>,
    op: BinaryOp,
    out: &Tensor,
) -> Result<()> {
    if matches!(
        op,
        BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
    ) {
        return Ok(());
    }
    let name = binary_name(op);
    match *other {
        Other::Scalar(s) => record(ctx, name, &[a], out, |rec| {
            if matches!(op, BinaryOp::Mul | BinaryOp::Div) {
                // PyTorch saves the number as a wrapped 0-d tensor: a second backward fails.
                rec.mark_saves();
            }
            let sa = rec.save_if(
                matches!(op, BinaryOp::Pow | BinaryOp::Maximum | BinaryOp::Minimum),
                a,
            )?;
            Ok(move |g: Tensor| -> Grads {
                let ga = match op {
                    BinaryOp::Add(_) | BinaryOp::Sub(_) => g,
                    BinaryOp::Mul => g.mul(s)?,
                    BinaryOp::Div => g.div(s)?,
                    BinaryOp::Pow => pow_scalar_grad(&g, &take(&sa)?, s)?,
                    _ => {
                        let x = take(&sa)?;
                        let st = Tensor::on(x.device()).scalar(s, x.dtype())?;
                        extremum_grad(&g, &x, &st, op == BinaryOp::Maximum)?
                    }
                };
                Ok(vec![Some(ga)])
            })
        }),
        Other::Tensor(b) => record(ctx, name, &[a, b], out, |rec| {
            let (na, nb) = (rec.needs(0), rec.needs(1));
            let (sa, sb, so) = match op {
                BinaryOp::Mul => (rec.save_if(nb, a)?, rec.save_if(na, b)?, None),
                BinaryOp::Div => (rec.save_if(nb, a)?, rec.save_if(na || nb, b)?, None),
                BinaryOp::Pow => (
                    Some(rec.save(a)?),
                    Some(rec.save(b)?),
                    rec.save_if(nb, out)?,
                ),
                BinaryOp::Maximum | BinaryOp::Minimum => {
                    (Some(rec.save(a)?), Some(rec.save(b)?), None)
                }
                _ => (None, None, None),
            };
            Ok(move |g: Tensor| -> Grads {
                Ok(match op {
                    BinaryOp::Add(alpha) => vec![Some(g.clone()), Some(scaled(&g, alpha)?)],
                    BinaryOp::Sub(alpha) => vec![Some(g.clone()), Some(scaled(&g, alpha)?.neg()?)],
                    BinaryOp::Mul => vec![
                        if na { Some(g.mul(&take(&sb)?)?) } else { None },
                        if nb { Some(g.mul(&take(&sa)?)?) } else { None },
                    ],
                    BinaryOp::Div => {
                        let bv = take(&sb)?;
                        vec![
                            if na { Some(g.div(&bv)?) } else { None },
                            if nb {
                                Some(g.neg()?.mul(&take(&sa)?)?.div(&bv.mul(&bv)?)?)
                            } else {
                                None
                            },
                        ]
                    }
                    BinaryOp::Pow => {
                        let (x, e) = (take(&sa)?, take(&sb)?);
                        let ga = if na {
                            Some(g.mul(&e)?.mul(&x.pow(&e.sub(1i64)?)?)?)
                        } else {
                            None
                        };
                        let gb = if nb {
                            // d/db a^b = a^b ln a, taken as 0 where a == 0 and b >= 0.
                            let y = take(&so)?;
                            let d = g.mul(&y)?.mul(&x.log()?)?;
                            let mask = x.eq(0i64)?.mul(&e.ge(0i64)?)?;
                            Some(d.masked_fill(&mask, 0i64)?)
                        } else {
                            None
                        };
                        vec![ga, gb]
                    }
                    BinaryOp::Maximum | BinaryOp::Minimum => {
                        let (x, y) = (take(&sa)?, take(&sb)?);
                        let max = op == BinaryOp::Maximum;
                        vec![
                            if na {
                                Some(extremum_grad(&g, &x, &y, max)?)
                            } else {
                                None
                            },
                            if nb {
                                Some(extremum_grad(&g, &y, &x, max)?)
                            } else {
                                None
                            },
                        ]
                    }
                    _ => vec![None, None],
                })
            })
        }),
    }
}

/// Gradient of `maximum(x, y)` (or minimum) for `x`: all of it where `x` wins, half on ties.
fn extremum_grad(g: &Tensor, x: &Tensor, y: &Tensor, max: bool) -> Result<Tensor> {
    let half = Tensor::where_cond(&x.eq(y)?, &g.div(2i64)?, g)?;
    let loses = if max { x.lt(y)? } else { x.gt(y)? };
    half.masked_fill(&loses, 0i64)
}

fn pow_scalar_grad(g: &Tensor, x: &Tensor, s: Scalar) -> Result<Tensor> {
    let e = s.to_f64();
    if e == 0.0 {
        return g.mul(0i64);
    }
    g.mul(e)?.mul(&x.pow(e - 1.0)?)
}

/// Records the in-place `a op= other`. Call [`binary_inplace_begin`] before writing.
pub(crate) struct BinaryInplace {
    rec: InplaceRecorder,
    op: BinaryOp,
    scalar: Option<Scalar>,
    self_before: Option<crate::autograd::saved::SavedTensor>,
}

/// Validates and prepares the in-place `a op= other` (nothing written yet).
pub(crate) fn binary_inplace_begin(
    ctx: &OpContext,
    a: &Tensor,
    other: &Other<'_>,
    op: BinaryOp,
) -> Result<Option<BinaryInplace>> {
    let (others, scalar): (Vec<&Tensor>, _) = match other {
        Other::Tensor(b) => (vec![*b], None),
        Other::Scalar(s) => (vec![], Some(*s)),
    };
    let name = binary_name(op);
    let Some(mut rec) = InplaceRecorder::begin(ctx, name, a, &others)? else {
        return Ok(None);
    };
    if scalar.is_some() && matches!(op, BinaryOp::Mul | BinaryOp::Div) {
        // The number is saved (wrapped), as out of place.
        rec.mark_saves();
    }
    // The old value of `a` is overwritten: keep a copy when the backward needs it.
    let needs_old = match op {
        BinaryOp::Mul => scalar.is_none() && rec.needs(1),
        BinaryOp::Pow | BinaryOp::Maximum | BinaryOp::Minimum => true,
        _ => false,
    };
    let self_before = if needs_old {
        let copy = crate::mode::no_grad(|| a.deep_clone())?;
        Some(rec.save(&copy)?)
    } else {
        None
    };
    Ok(Some(BinaryInplace {
        rec,
        op,
        scalar,
        self_before,
    }))
}

impl BinaryInplace {
    /// Records the write that just happened; `a` now holds the result.
    pub fn finish(mut self, a: &Tensor, other: &Other<'_>) -> Result<()> {
        let (op, scalar, before) = (self.op, self.scalar, self.self_before);
        let (n0, n1) = (self.rec.needs(0), self.rec.needs(1));
        let sb = match other {
            Other::Tensor(b) => self.rec.save_if(
                matches!(
                    op,
                    BinaryOp::Mul
                        | BinaryOp::Div
                        | BinaryOp::Pow
                        | BinaryOp::Maximum
                        | BinaryOp::Minimum
                ),
                b,
            )?,
            Other::Scalar(_) => None,
        };
        let so = self.rec.save_if(op == BinaryOp::Div && n1, a)?;
        self.rec.finish(move |g: Tensor| -> Grads {
            let other_t = match scalar {
                Some(_) => None,
                None => Some(take(&sb)),
            };
            Ok(match (op, scalar) {
                (BinaryOp::Add(_), Some(_)) | (BinaryOp::Sub(_), Some(_)) => vec![Some(g)],
                (BinaryOp::Add(alpha), None) => vec![Some(g.clone()), Some(scaled(&g, alpha)?)],
                (BinaryOp::Sub(alpha), None) => {
                    vec![Some(g.clone()), Some(scaled(&g, alpha)?.neg()?)]
                }
                (BinaryOp::Mul, Some(s)) => vec![Some(g.mul(s)?)],
                (BinaryOp::Div, Some(s)) => vec![Some(g.div(s)?)],
                (BinaryOp::Mul, None) => {
                    let b = other_t.unwrap_or_else(|| take(&None))?;
                    vec![
                        if n0 { Some(g.mul(&b)?) } else { None },
                        if n1 {
                            Some(g.mul(&take(&before)?)?)
                        } else {
                            None
                        },
                    ]
                }
                (BinaryOp::Div, None) => {
                    let b = other_t.unwrap_or_else(|| take(&None))?;
                    vec![
                        if n0 { Some(g.div(&b)?) } else { None },
                        if n1 {
                            Some(g.neg()?.mul(&take(&so)?)?.div(&b)?)
                        } else {
                            None
                        },
                    ]
                }
                (BinaryOp::Pow, Some(s)) => vec![Some(pow_scalar_grad(&g, &take(&before)?, s)?)],
                (BinaryOp::Maximum | BinaryOp::Minimum, Some(s)) => {
                    let x = take(&before)?;
                    let st = Tensor::on(x.device()).scalar(s, x.dtype())?;
                    vec![Some(extremum_grad(&g, &x, &st, op == BinaryOp::Maximum)?)]
                }
                (_, None) => {
                    let (x, e) = (take(&before)?, other_t.unwrap_or_else(|| take(&None))?);
                    match op {
                        BinaryOp::Pow => vec![
                            Some(g.mul(&e)?.mul(&x.pow(&e.sub(1i64)?)?)?),
                            Some(g.mul(&x.pow(&e)?)?.mul(&x.log()?)?),
                        ],
                        _ => {
                            let max = op == BinaryOp::Maximum;
                            vec![
                                Some(extremum_grad(&g, &x, &e, max)?),
                                Some(extremum_grad(&g, &e, &x, max)?),
                            ]
                        }
                    }
                }
                _ => vec![None, None],
            })
        });
        Ok(())
    }
}
