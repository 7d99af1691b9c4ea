//! `softmax` and `log_softmax` along one dimension, into a new tensor or a given one.
//!
//! The input is viewed as `[outer, len, inner]` (made contiguous first if it is not), and the
//! result is a new contiguous tensor, as PyTorch's is (or a contiguous `out=` tensor). Each slice along `dim` is processed in
//! three streaming passes over memory that stays in cache: the maximum, the sum of
//! `exp(x - max)`, and the write. With `inner > 1` the passes run across the `inner`
//! neighbours at once, so the inner loop is always over contiguous memory. f16 and bf16 are
//! computed in f32 (converted slice-wise); f32 uses a vectorisable `exp` (`exp_f32`).
//! Blocks of `outer` run in parallel on strata's pool.

use crate::backend::args::SoftmaxArgs;
use crate::backend::for_device;
use crate::layout::overlap::{overlap, Overlap};
use crate::layout::{wrap_dim, Layout};
use crate::op::OpContext;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::ops::out::{written, Aliasing, OutDType, OutTarget};
use crate::storage::{lock_storages, Access};
use crate::{Error, Result, Tensor};

/// `softmax`/`log_softmax` of `x` along `dim` into a new contiguous tensor.
pub(crate) fn softmax(ctx: &OpContext, x: &Tensor, dim: i64, log: bool) -> Result<Tensor> {
    softmax_op(ctx, x, dim, log, None)
}

/// `softmax`/`log_softmax` of `x` along `dim` into `out`, which must have `x`'s dtype
/// (checked, resized and written, its version bumped once).
pub(crate) fn softmax_out(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    log: bool,
    out: &Tensor,
) -> Result<Tensor> {
    softmax_op(ctx, x, dim, log, Some(out))
}

/// `softmax`/`log_softmax` of `x` along `dim` into a new contiguous tensor, or into `out`
/// (checked, resized and written, its version bumped once).
fn softmax_op(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    log: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    let op = ctx.op();
    let backend = for_device(x.device())?;
    // As PyTorch, an empty integer tensor is accepted (there is nothing to compute).
    if !x.dtype().is_floating() && x.numel() > 0 {
        return Err(Error::dtype(
            op,
            format!("{op} needs a floating tensor, got {}", x.dtype()),
            Some("convert first with .to(DType::F32)"),
        ));
    }
    let shape = x.shape();
    let ndim = shape.len();
    let d = wrap_dim(dim, ndim).ok_or(Error::Dim { op, dim, ndim })?;
    let dtype = OutDType::Exact(x.dtype());
    let out_target = out
        .map(|o| OutTarget::check(op, o, &shape, dtype, &[x], Aliasing::Exact))
        .transpose()?;
    let (outer, len, inner) = if ndim == 0 {
        (1, 1, 1)
    } else {
        (
            shape[..d].iter().product::<usize>(),
            shape[d],
            shape[d + 1..].iter().product::<usize>(),
        )
    };
    // A contiguous input (size-1 dims aside) is read in place; anything else is copied once.
    let src = x.contiguous()?;
    // The kernel writes a contiguous range that must not overlap its input: an `out` that is
    // not contiguous, or is the input itself, gets the result through a temporary.
    let target = match out_target {
        None => {
            Tensor::uninit_with_layout(ctx, Layout::contiguous(&shape, 0), x.dtype(), x.device())?
        }
        Some(t) => {
            let o = t.resize(ctx)?;
            let l = o.layout();
            let apart = !o.shares_storage(&src) || overlap(&l, &src.layout()) == Overlap::No;
            if l.is_contiguous() && apart {
                o
            } else {
                Tensor::uninit_with_layout(
                    ctx,
                    Layout::contiguous(&shape, 0),
                    x.dtype(),
                    x.device(),
                )?
            }
        }
    };
    if x.numel() > 0 {
        let (sb, ob) = (src.body(), target.body());
        let guards = lock_storages(&[(&*ob.storage, Access::Write), (&*sb.storage, Access::Read)]);
        let esize = x.dtype().size();
        let input = guards
            .read_ptr(&sb.storage)
            .wrapping_add(sb.layout.offset() * esize);
        let output = guards
            .write_ptr(&ob.storage)
            .wrapping_add(ob.layout.offset() * esize);
        // SAFETY: `src` is contiguous from its offset and holds outer·len·inner elements, as
        // does `target` from its own offset; `target` is either fresh or an output that shares
        // no memory with `src` (checked above); both storages are locked (the output's for
        // writing) until `guards` drops.
        unsafe {
            backend.softmax(&SoftmaxArgs {
                dtype: x.dtype(),
                input,
                output,
                outer,
                slab_len: len * inner,
                inner,
                log,
            })
        };
    }
    match out {
        None => Ok(target),
        Some(o) if target.is_same(o) => Ok(written(ctx.op(), o)),
        Some(o) => {
            // SAFETY: `execute` locks the storages and passes a plan valid for them; it counts
            // the copy as the op's one write.
            ElementwiseSpec::new(Output::Existing(o), vec![&target])
                .infer(op)?
                .execute(ctx, |plan| unsafe { backend.copy(plan) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn reference(x: &[f64], outer: usize, len: usize, inner: usize, log: bool) -> Vec<f64> {
        let mut out = vec![0.0; x.len()];
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| o * len * inner + k * inner + i;
                let m = (0..len).map(|k| x[at(k)]).fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = (0..len).map(|k| (x[at(k)] - m).exp()).sum();
                for k in 0..len {
                    out[at(k)] = if log {
                        x[at(k)] - m - s.ln()
                    } else {
                        (x[at(k)] - m).exp() / s
                    };
                }
            }
        }
        out
    }

    #[test]
    fn matches_a_reference_along_every_dim_and_dtype() {
        let shape = [3usize, 37, 5];
        let n: usize = shape.iter().product();
        let data: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 101) as f64 / 7.0 - 6.0)
            .collect();
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let x = Tensor::from_vec(data.clone(), &shape)
                .unwrap()
                .to(dtype)
                .unwrap();
            let exact: Vec<f64> = x.to(DType::F64).unwrap().to_vec().unwrap();
            let tol = match dtype {
                DType::F64 => 1e-12,
                DType::F32 => 1e-6,
                _ => 1e-2,
            };
            for d in 0..3 {
                let outer = shape[..d].iter().product();
                let inner = shape[d + 1..].iter().product();
                for log in [false, true] {
                    let y = if log {
                        x.log_softmax(d as i64)
                    } else {
                        x.softmax(d as i64)
                    };
                    let y = y.unwrap();
                    assert_eq!(y.dtype(), dtype);
                    assert!(y.is_contiguous());
                    let got: Vec<f64> = y.to(DType::F64).unwrap().to_vec().unwrap();
                    let want = reference(&exact, outer, shape[d], inner, log);
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (g - w).abs() <= tol * (1.0 + w.abs()),
                            "{dtype} dim {d} log {log}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn strided_input_large_rows_and_special_values() {
        let x = Tensor::randn(&[64, 1500], DType::F32).unwrap();
        let xt = x.t().unwrap(); // [1500, 64], strides [1, 1500]
        let a: Vec<f32> = xt.softmax(0).unwrap().to_vec().unwrap();
        let b: Vec<f32> = xt
            .contiguous()
            .unwrap()
            .softmax(0)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(a, b);
        let r = Tensor::from_vec(vec![f32::NEG_INFINITY, 0.0, f32::NAN, 1.0], &[2, 2]).unwrap();
        let y: Vec<f32> = r.softmax(1).unwrap().to_vec().unwrap();
        assert_eq!(&y[..2], &[0.0, 1.0]);
        assert!(y[2].is_nan() && y[3].is_nan());
        let e = Tensor::zeros(&[0, 3], DType::F32)
            .unwrap()
            .softmax(1)
            .unwrap();
        assert_eq!(e.shape().as_slice(), vec![0, 3]);
        assert!(Tensor::arange(3, DType::I64).unwrap().softmax(0).is_err());
        assert!(x.softmax(2).is_err());
    }

    #[test]
    fn softmax_out_writes_its_output_and_follows_pytorch_dtypes() {
        use crate::ops::out::testing::{check_dtype_refused, check_out_form};
        let x = Tensor::arange(12, DType::F32)
            .unwrap()
            .mul(0.5)
            .unwrap()
            .view(&[3, 4])
            .unwrap();
        let xt = x.t().unwrap();
        for d in [0, 1] {
            check_out_form(&x.softmax(d).unwrap(), 0.0, |o| x.softmax_out(d, o));
            check_out_form(&x.log_softmax(d).unwrap(), 0.0, |o| x.log_softmax_out(d, o));
            // A strided input is made contiguous first, as for softmax().
            let out = Tensor::zeros(&[4, 3], DType::F32).unwrap();
            xt.log_softmax_out(d, &out).unwrap();
            assert_eq!(
                out.to_vec::<f32>().unwrap(),
                xt.log_softmax(d).unwrap().to_vec::<f32>().unwrap()
            );
        }
        check_dtype_refused(&[3, 4], DType::F64, |o| x.softmax_out(1, o));
        check_dtype_refused(&[3, 4], DType::F64, |o| x.log_softmax_out(1, o));
        // Into its own input (through a temporary), one write.
        let y = x.deep_clone().unwrap();
        y.softmax_out(1, &y).unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            x.softmax(1).unwrap().to_vec::<f32>().unwrap()
        );
        assert_eq!(y.version(), 1);
        // Overlapping the input elsewhere is refused, untouched.
        let z = Tensor::arange(8, DType::F32).unwrap();
        let r = z
            .narrow(0, 0, 6)
            .unwrap()
            .softmax_out(0, &z.narrow(0, 2, 6).unwrap());
        assert!(matches!(r, Err(Error::Overlap { .. })));
        assert_eq!(z.version(), 0);
        // A contiguous output of the right shape with an offset is written in place.
        let big = Tensor::zeros(&[20], DType::F32).unwrap();
        let part = big.narrow(0, 4, 12).unwrap().view(&[3, 4]).unwrap();
        x.softmax_out(1, &part).unwrap();
        assert_eq!(
            part.to_vec::<f32>().unwrap(),
            x.softmax(1).unwrap().to_vec::<f32>().unwrap()
        );
        assert_eq!(big.to_vec::<f32>().unwrap()[..4], [0.0; 4]);
        assert_eq!(big.to_vec::<f32>().unwrap()[16..], [0.0; 4]);
    }
}
