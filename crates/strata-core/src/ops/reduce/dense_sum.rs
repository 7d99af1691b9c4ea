//! The fast path of `sum` and `mean` for a contiguous floating input reduced over one run of
//! adjacent dimensions (the kernel is the backend's `dense_sum`).

use crate::backend::args::DenseSumArgs;
use crate::backend::for_device;
use crate::backend::kernel::sums_densely;
use crate::op::OpContext;
use crate::ops::reduce::accumulators::Accumulators;
use crate::storage::{lock_storages, Access};
use crate::{Result, Tensor};

/// Sums `x` over the adjacent dimensions `first..=last` into `[outer, inner]` f64 values (a
/// temporary of `ctx`'s op), or `None` when the fast path does not apply (another dtype, a
/// non-contiguous input, or an empty one).
pub(crate) fn dense_sum(
    ctx: &OpContext,
    x: &Tensor,
    mask: &[bool],
) -> Result<Option<Accumulators<f64>>> {
    let dtype = x.dtype();
    if !sums_densely(dtype) || x.numel() == 0 {
        return Ok(None);
    }
    let (Some(first), Some(last)) = (mask.iter().position(|&m| m), mask.iter().rposition(|&m| m))
    else {
        return Ok(None);
    };
    if !mask[first..=last].iter().all(|&m| m) {
        return Ok(None);
    }
    let body = x.body();
    if !body.layout.is_contiguous() {
        return Ok(None);
    }
    let shape = body.layout.sizes();
    let outer: usize = shape[..first].iter().product();
    let len: usize = shape[first..=last].iter().product();
    let inner: usize = shape[last + 1..].iter().product();
    let backend = for_device(x.device())?;
    let out = Accumulators::new(ctx, backend, x.device(), outer * inner, 0.0f64)?;
    let guards = lock_storages(&[(&*body.storage, Access::Read)]);
    let base = guards
        .read_ptr(&body.storage)
        .wrapping_add(body.layout.offset() * dtype.size());
    // SAFETY: the input is contiguous from its offset and holds outer·len·inner elements of
    // its dtype; the storage is read-locked until `guards` drops, so nothing writes it
    // meanwhile.
    let done = unsafe {
        backend.dense_sum(&DenseSumArgs {
            dtype,
            input: base,
            outer,
            len,
            inner,
            out: out.ptr(),
        })
    };
    drop(guards);
    Ok(done.then_some(out))
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reduce::fold::{finish, Dest};
    use crate::{DType, Device};

    #[test]
    fn matches_the_general_path_on_every_dim_run() {
        let ctx = OpContext::enter("sum");
        let x = Tensor::randn(&[3, 70, 2, 1500], DType::F32).unwrap();
        let exact: Vec<f64> = x.to(DType::F64).unwrap().to_vec().unwrap();
        let shape = [3usize, 70, 2, 1500];
        for (first, last) in [(0, 0), (1, 1), (3, 3), (1, 2), (0, 3), (2, 3)] {
            let mask: Vec<bool> = (0..4).map(|d| d >= first && d <= last).collect();
            let acc = dense_sum(&ctx, &x, &mask).unwrap().unwrap();
            let sums = finish(&ctx, &acc, &[acc.len()], DType::F64, Dest::New, Device::Cpu);
            let got: Vec<f64> = sums.unwrap().to_vec().unwrap();
            let outer: usize = shape[..first].iter().product();
            let len: usize = shape[first..=last].iter().product();
            let inner: usize = shape[last + 1..].iter().product();
            for o in 0..outer {
                for i in 0..inner {
                    let want: f64 = (0..len).map(|k| exact[(o * len + k) * inner + i]).sum();
                    let g = got[o * inner + i];
                    assert!(
                        (g - want).abs() < 1e-9 * (1.0 + want.abs()),
                        "{first}..={last}"
                    );
                }
            }
        }
        assert!(dense_sum(
            &ctx,
            &x.transpose(0, 3).unwrap(),
            &[false, false, false, true]
        )
        .unwrap()
        .is_none());
        assert!(dense_sum(&ctx, &x, &[true, false, true, false])
            .unwrap()
            .is_none());
    }
}
