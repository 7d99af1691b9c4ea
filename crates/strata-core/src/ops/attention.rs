//! The fused attention's forward and backward over 4-d `[B, heads, L, E]` operands: the
//! outputs and the kernels' scratch are allocated here, through the op, and the kernels run
//! on the operands' backend ([`crate::backend::attention`]).

use std::sync::Arc;

use super::matmul::temporary;
use crate::backend::attention::{
    AttentionArgs, AttentionBackwardArgs, AttentionProblem, AttentionTiles, GradOperand,
    HeadOperand, MaskOperand,
};
use crate::backend::{for_device, Backend};
use crate::layout::order::dense_copy_strides;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::storage::{lock_storages, Access, Storage, StorageGuards};
use crate::tensor::Body;
use crate::{num_threads, DType, Error, Result, Tensor};

/// The operands of one fused attention: 4-d `q`, `k`, `v` whose last dimensions are
/// contiguous, with equal batch sizes, and key/value heads dividing the query heads; a mask
/// of at most 4 dimensions that broadcasts to `[B, heads, L, S]`.
pub(crate) struct FusedAttention<'a> {
    /// `[B, heads, L, E]`.
    pub(crate) q: &'a Tensor,
    /// `[B, kv_heads, S, E]`.
    pub(crate) k: &'a Tensor,
    /// `[B, kv_heads, S, Ev]`.
    pub(crate) v: &'a Tensor,
    /// Bool (true = attend) or floating (added), if any.
    pub(crate) mask: Option<&'a Tensor>,
    /// The scores' factor.
    pub(crate) scale: f64,
    /// Query `i` attends keys `0..=i` only.
    pub(crate) causal: bool,
}

impl FusedAttention<'_> {
    /// The problem these operands pose, after checking the kernel's contract (the caller's
    /// selection should have: an `Err` here is a bug above, not bad input).
    pub(crate) fn problem(&self, op: &'static str) -> Result<AttentionProblem> {
        let (q, k, v) = (self.q.shape(), self.k.shape(), self.v.shape());
        let shapes = || vec![q.to_vec(), k.to_vec(), v.to_vec()];
        let bad = |why: &str| {
            Err(Error::shape(
                op,
                format!("fused attention: {why}"),
                shapes(),
            ))
        };
        if q.len() != 4 || k.len() != 4 || v.len() != 4 {
            return bad("query, key and value must be 4-d");
        }
        if k[0] != q[0] || v[0] != q[0] || k[1] != v[1] || k[2] != v[2] || k[3] != q[3] {
            return bad(
                "key and value must match the query's batch, each other's heads and \
                        keys, and the query's E",
            );
        }
        if k[1] == 0 || q[1] % k[1] != 0 {
            return bad("the key/value heads must divide the query heads");
        }
        let (dt, dev) = (self.q.dtype(), self.q.device());
        if [self.k, self.v]
            .iter()
            .any(|t| t.dtype() != dt || t.device() != dev)
            || [self.q, self.k, self.v]
                .iter()
                .any(|t| t.stride().last() != Some(&1))
        {
            return bad(
                "query, key and value must share a dtype and a device and have a \
                        contiguous last dimension",
            );
        }
        if let Some(m) = self.mask {
            let (ms, want) = (m.shape(), [q[0], q[1], q[2], k[2]]);
            let fits = ms.len() <= 4
                && ms
                    .iter()
                    .rev()
                    .zip(want.iter().rev())
                    .all(|(&n, &w)| n == 1 || n == w);
            if !fits || m.device() != dev {
                return bad("the mask must broadcast to [B, heads, L, S] on the query's device");
            }
        }
        Ok(AttentionProblem {
            batch: q[0],
            heads: q[1],
            kv_heads: k[1],
            l: q[2],
            s: k[2],
            e: q[3],
            ev: v[3],
            scale: self.scale,
            causal: self.causal,
        })
    }
}

/// The bodies of the operands, locked for reading while the kernel runs.
struct Read {
    q: Body,
    k: Body,
    v: Body,
    mask: Option<Body>,
}

impl Read {
    fn of(x: &FusedAttention<'_>) -> Read {
        Read {
            q: x.q.body(),
            k: x.k.body(),
            v: x.v.body(),
            mask: x.mask.map(Tensor::body),
        }
    }

    /// Every storage read, with `writes` written.
    fn locks<'s>(&'s self, writes: &[&'s Storage]) -> Vec<(&'s Storage, Access)> {
        let mut locks: Vec<_> = writes.iter().map(|&s| (s, Access::Write)).collect();
        locks.extend([&self.q, &self.k, &self.v].map(|b| (&*b.storage, Access::Read)));
        if let Some(m) = &self.mask {
            locks.push((&*m.storage, Access::Read));
        }
        locks
    }
}

/// Where a 4-d operand with a contiguous last dimension lies, from its locked storage.
fn head_operand(guards: &StorageGuards<'_>, body: &Body, esize: usize) -> HeadOperand {
    let st = body.layout.strides();
    HeadOperand {
        ptr: guards
            .read_ptr(&body.storage)
            .wrapping_add(body.layout.offset() * esize),
        batch: st[0],
        head: st[1],
        row: st[2],
    }
}

/// The mask broadcast to `[B, heads, L, S]`: its strides aligned to the right, 0 along
/// every dimension it lacks or has as 1.
fn mask_operand(guards: &StorageGuards<'_>, body: &Body, dtype: DType) -> MaskOperand {
    let sizes = body.layout.sizes();
    let st = body.layout.strides();
    let mut strides = [0; 4];
    let skip = 4 - sizes.len();
    for (d, (&n, &s)) in sizes.iter().zip(st).enumerate() {
        strides[skip + d] = if n == 1 { 0 } else { s };
    }
    MaskOperand {
        ptr: guards
            .read_ptr(&body.storage)
            .wrapping_add(body.layout.offset() * dtype.size()),
        dtype,
        strides,
    }
}

/// The mask's operand, if there is a mask.
fn mask_operand_of(
    guards: &StorageGuards<'_>,
    read: &Read,
    x: &FusedAttention<'_>,
) -> Option<MaskOperand> {
    let (body, mask) = (read.mask.as_ref()?, x.mask?);
    Some(mask_operand(guards, body, mask.dtype()))
}

/// A new contiguous tensor of `shape` for the op's result.
fn fresh(ctx: &OpContext, like: &Tensor, shape: &[usize], dtype: DType) -> Result<Tensor> {
    Tensor::uninit_with_layout(ctx, Layout::contiguous(shape, 0), dtype, like.device())
}

/// The error for a backend without the fused kernels (the caller checks first).
fn no_kernel(op: &'static str, device: crate::Device) -> Error {
    Error::Unsupported {
        op,
        message: format!("{device} has no fused attention kernel; use the math path"),
    }
}

/// What both directions start from: the checked problem, the dtype, the compute dtype,
/// and the backend, which must have the fused kernels.
fn prepare(
    ctx: &OpContext,
    x: &FusedAttention<'_>,
) -> Result<(AttentionProblem, DType, DType, &'static dyn Backend)> {
    let p = x.problem(ctx.op())?;
    let dtype = x.q.dtype();
    let backend = for_device(x.q.device())?;
    if !backend.fused_attention() {
        return Err(no_kernel(ctx.op(), x.q.device()));
    }
    Ok((p, dtype, AttentionProblem::compute(dtype), backend))
}

/// The forward's arguments for `x`'s locked operands, with no output, log-sum-exp or
/// scratch yet (null) and the forward's tiles.
fn operands<'p>(
    guards: &StorageGuards<'_>,
    read: &Read,
    x: &FusedAttention<'_>,
    p: &'p AttentionProblem,
) -> AttentionArgs<'p> {
    let dtype = x.q.dtype();
    let esize = dtype.size();
    AttentionArgs {
        dtype,
        problem: p,
        tiles: AttentionTiles::forward(p, dtype, num_threads()),
        q: head_operand(guards, &read.q, esize),
        k: head_operand(guards, &read.k, esize),
        v: head_operand(guards, &read.v, esize),
        mask: mask_operand_of(guards, read, x),
        out: std::ptr::null_mut(),
        lse: std::ptr::null_mut(),
        scratch: std::ptr::null_mut(),
    }
}

/// The output `[B, heads, L, Ev]` of `x`'s dtype, laid out as `[B, L, heads, Ev]` (the
/// transposed view PyTorch's CPU kernel returns), and each row's log-sum-exp `[B, heads, L]`
/// (f64 for f64, else f32; `-inf` for a row that attends nothing).
pub(crate) fn attention_forward(
    ctx: &OpContext,
    x: &FusedAttention<'_>,
) -> Result<(Tensor, Tensor)> {
    let (p, dtype, compute, backend) = prepare(ctx, x)?;
    let tiles = AttentionTiles::forward(&p, dtype, num_threads());
    let room = scratch_len(ctx.op(), tiles.scratch(tiles.forward_slot(&p)))?;
    let out = Tensor::uninit_with_layout(
        ctx,
        Layout::from_slices(&[p.batch, p.heads, p.l, p.ev], &p.out_strides(), 0),
        dtype,
        x.q.device(),
    )?;
    let lse = fresh(ctx, x.q, &[p.batch, p.heads, p.l], compute)?;
    let mut scratch = temporary(ctx, room, compute, x.q.device())?;
    let scratch_ptr = scratch_ptr(&mut scratch);
    let read = Read::of(x);
    let (ob, lb) = (out.body(), lse.body());
    let guards = lock_storages(&read.locks(&[&ob.storage, &lb.storage]));
    let args = AttentionArgs {
        tiles,
        out: guards.write_ptr(&ob.storage),
        lse: guards.write_ptr(&lb.storage),
        scratch: scratch_ptr,
        ..operands(&guards, &read, x, &p)
    };
    // SAFETY: q, k, v and the mask are locked for reading and their layouts (validated by
    // the caller: 4-d, last dimension contiguous, heads and batch as the problem says, a
    // mask that broadcasts) address every element the problem reads; `out` (laid out as the
    // problem's `out_strides` say) and `lse` (contiguous) are fresh, locked for writing; the
    // scratch is this call's own, sized as the tiles say.
    let ran = unsafe { backend.attention_forward(&args) };
    drop(guards);
    drop(scratch);
    if !ran {
        return Err(no_kernel(ctx.op(), x.q.device()));
    }
    Ok((out, lse))
}

/// The gradients of `q`, `k` and `v` (contiguous, of their shapes and dtype) from `grad`,
/// the output's gradient, with the forward's `out` and `lse`.
pub(crate) fn attention_backward(
    ctx: &OpContext,
    x: &FusedAttention<'_>,
    grad: &Tensor,
    out: &Tensor,
    lse: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (p, dtype, compute, backend) = prepare(ctx, x)?;
    // The gradient comes from the engine, a hook or a caller's `backward(gradient)`: it
    // must be the output's shape, on its device; it is read in the output's dtype with its
    // rows contiguous (a gradient broadcast from a sum has stride 0 there).
    let want = [p.batch, p.heads, p.l, p.ev];
    if grad.shape().as_slice() != want || grad.device() != x.q.device() {
        return Err(Error::shape(
            ctx.op(),
            format!(
                "the output's gradient must be {want:?} on {}, got {:?} on {}",
                x.q.device(),
                grad.shape().as_slice(),
                grad.device()
            ),
            vec![grad.shape().to_vec()],
        ));
    }
    if out.stride().as_slice() != p.out_strides() || lse.stride().as_slice() != lse_strides(&p) {
        return Err(Error::shape(
            ctx.op(),
            "the saved output and log-sum-exp must be the forward's own",
            vec![out.shape().to_vec(), lse.shape().to_vec()],
        ));
    }
    let grad = if grad.dtype() != dtype {
        grad.to(dtype)?.contiguous()?
    } else if grad.stride().last() != Some(&1) {
        grad.contiguous()?
    } else {
        grad.clone()
    };
    let tiles = AttentionTiles::backward(&p, dtype, num_threads());
    let room = scratch_len(ctx.op(), tiles.scratch(tiles.backward_slot(&p)))?;
    // Each gradient takes its input's layout, as PyTorch's `zeros_like` does: a query seen
    // as `[B, heads, L, E]` through a transpose of `[B, L, heads, E]` gets a gradient that
    // is contiguous once transposed back, so merging its heads copies nothing.
    let grad_like = |t: &Tensor| Tensor::uninit_with_layout(ctx, dense_like(t), dtype, t.device());
    let (dq, dk, dv) = (grad_like(x.q)?, grad_like(x.k)?, grad_like(x.v)?);
    let mut scratch = temporary(ctx, room, compute, x.q.device())?;
    let scratch_ptr = scratch_ptr(&mut scratch);
    let read = Read::of(x);
    let (ob, lb, gb) = (out.body(), lse.body(), grad.body());
    let (qb, kb, vb) = (dq.body(), dk.body(), dv.body());
    let mut locks = read.locks(&[&qb.storage, &kb.storage, &vb.storage]);
    locks.extend([&ob, &lb, &gb].map(|b| (&*b.storage, Access::Read)));
    let guards = lock_storages(&locks);
    let esize = dtype.size();
    let at = |b: &Body, size: usize| {
        guards
            .read_ptr(&b.storage)
            .wrapping_add(b.layout.offset() * size)
    };
    let args = AttentionBackwardArgs {
        forward: AttentionArgs {
            out: at(&ob, esize).cast_mut(),
            lse: at(&lb, compute.size()).cast_mut(),
            ..operands(&guards, &read, x, &p)
        },
        grad: head_operand(&guards, &gb, esize),
        dq: grad_operand(&guards, &qb),
        dk: grad_operand(&guards, &kb),
        dv: grad_operand(&guards, &vb),
        tiles,
        scratch: scratch_ptr,
    };
    // SAFETY: as for the forward; `out` and `lse` are the forward's results in its layouts
    // (checked above), read; the gradient has a contiguous last dimension and the output's
    // shape; dq, dk and dv are fresh, dense, with a contiguous last dimension (`dense_like`),
    // locked for writing.
    let ran = unsafe { backend.attention_backward(&args) };
    drop(guards);
    drop(scratch);
    if !ran {
        return Err(no_kernel(ctx.op(), x.q.device()));
    }
    Ok((dq, dk, dv))
}

/// A dense layout of `t`'s shape in `t`'s memory order, as PyTorch's `empty_like` gives it
/// ([`dense_copy_strides`]), or the contiguous one when that would not keep the last
/// dimension contiguous, which the kernel needs.
fn dense_like(t: &Tensor) -> Layout {
    let layout = t.body().layout;
    let strides = dense_copy_strides(&layout);
    let sizes = layout.sizes();
    if sizes.last().is_some_and(|&n| n > 1) && strides.last() != Some(&1) {
        return Layout::contiguous(sizes, 0);
    }
    Layout::from_slices(sizes, &strides, 0)
}

/// Where a fresh gradient lies, from its locked storage (its layout from `dense_like`).
fn grad_operand(guards: &StorageGuards<'_>, body: &Body) -> GradOperand {
    let st = body.layout.strides();
    GradOperand {
        ptr: guards.write_ptr(&body.storage),
        batch: st[0],
        head: st[1],
        row: st[2],
    }
}

/// The strides of the contiguous log-sum-exp `[B, heads, L]`.
fn lse_strides(p: &AttentionProblem) -> [usize; 3] {
    [p.heads * p.l, p.l, 1]
}

/// The scratch's element count, or the error for one too large to address.
fn scratch_len(op: &'static str, len: Option<usize>) -> Result<usize> {
    len.ok_or_else(|| {
        Error::shape(
            op,
            "the fused attention's working buffer is too large to address",
            vec![],
        )
    })
}

/// The scratch's first element (null for no scratch).
fn scratch_ptr(scratch: &mut Option<Arc<Storage>>) -> *mut u8 {
    scratch
        .as_mut()
        .and_then(Storage::unshared_write_ptr)
        .unwrap_or(std::ptr::null_mut())
}
