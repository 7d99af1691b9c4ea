//! 2-d max pooling over `[N, C, H, W]` (or any `[.., H, W]`): the values and each maximum's
//! position in its plane, and the gradient routed back to those positions.

use crate::backend::args::{MaxPoolArgs, MaxPoolBackwardArgs};
use crate::backend::for_device;
use crate::backend::kernel::PoolWindows;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::storage::{lock_storages, Access};
use crate::{DType, Result, Tensor};

/// The leading (plane) dimensions of `shape` and their count of planes.
fn planes(shape: &[usize]) -> (&[usize], usize) {
    let lead = &shape[..shape.len() - 2];
    (lead, lead.iter().product())
}

/// The windows' maxima (`[.., OH, OW]`, `x`'s dtype) and their flat positions in each
/// `H·W` plane (i64), both contiguous. The caller has checked the windows against `x`.
pub(crate) fn max_pool2d(
    ctx: &OpContext,
    x: &Tensor,
    win: &PoolWindows,
) -> Result<(Tensor, Tensor)> {
    let src = x.contiguous()?;
    let shape = x.shape();
    let (lead, n) = planes(&shape);
    let mut out_shape = lead.to_vec();
    out_shape.extend([win.oh, win.ow]);
    let layout = Layout::contiguous(&out_shape, 0);
    let values = Tensor::uninit_with_layout(ctx, layout.clone(), x.dtype(), x.device())?;
    let indices = Tensor::uninit_with_layout(ctx, layout, DType::I64, x.device())?;
    if values.numel() > 0 {
        let backend = for_device(x.device())?;
        let (sb, vb, ib) = (src.body(), values.body(), indices.body());
        let guards = lock_storages(&[
            (&*vb.storage, Access::Write),
            (&*ib.storage, Access::Write),
            (&*sb.storage, Access::Read),
        ]);
        let esize = x.dtype().size();
        let input = guards
            .read_ptr(&sb.storage)
            .wrapping_add(sb.layout.offset() * esize);
        let out = guards
            .write_ptr(&vb.storage)
            .wrapping_add(vb.layout.offset() * esize);
        let idx = guards
            .write_ptr(&ib.storage)
            .wrapping_add(ib.layout.offset() * 8) as *mut i64;
        // SAFETY: `src` is contiguous from its offset with n·h·w elements; `values` and
        // `indices` are fresh, contiguous, n·oh·ow elements each, and share no memory with
        // `src` or each other; the caller checked that every window holds a position of the
        // plane; the storages stay locked until `guards` drops.
        unsafe {
            backend.max_pool2d(&MaxPoolArgs {
                dtype: x.dtype(),
                src: input,
                dst: out,
                idx,
                planes: n,
                windows: win,
            })
        };
    }
    Ok((values, indices))
}

/// The gradient of max pooling for an input of `in_shape`: each element of `grad` added at
/// the position `indices` (from [`max_pool2d`]) names in its plane, zeros elsewhere.
pub(crate) fn max_pool2d_backward(
    ctx: &OpContext,
    grad: &Tensor,
    indices: &Tensor,
    in_shape: &[usize],
) -> Result<Tensor> {
    let (g, idx) = (grad.contiguous()?, indices.contiguous()?);
    let (_, n) = planes(in_shape);
    let plane_in = in_shape[in_shape.len() - 2..].iter().product::<usize>();
    let plane_out = g.numel() / n.max(1);
    let gx =
        Tensor::uninit_with_layout(ctx, Layout::contiguous(in_shape, 0), g.dtype(), g.device())?;
    if gx.numel() > 0 {
        let backend = for_device(g.device())?;
        let (gb, ib, xb) = (g.body(), idx.body(), gx.body());
        let guards = lock_storages(&[
            (&*xb.storage, Access::Write),
            (&*gb.storage, Access::Read),
            (&*ib.storage, Access::Read),
        ]);
        let esize = g.dtype().size();
        let gp = guards
            .read_ptr(&gb.storage)
            .wrapping_add(gb.layout.offset() * esize);
        let ip = guards
            .read_ptr(&ib.storage)
            .wrapping_add(ib.layout.offset() * 8) as *const i64;
        let xp = guards
            .write_ptr(&xb.storage)
            .wrapping_add(xb.layout.offset() * esize);
        // SAFETY: `g` and `idx` are contiguous with n·plane_out elements (the pooled shape);
        // `gx` is fresh and contiguous with n·plane_in elements, sharing no memory with them;
        // the storages stay locked until `guards` drops.
        unsafe {
            backend.max_pool2d_backward(&MaxPoolBackwardArgs {
                dtype: g.dtype(),
                grad: gp,
                idx: ip,
                gx: xp,
                planes: n,
                plane_in,
                plane_out,
            })
        };
    }
    Ok(gx)
}
