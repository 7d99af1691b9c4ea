//! The fused backward: for each (batch entry, key/value head), the query heads that share
//! it one after another, and for each of their query blocks the key blocks the forward
//! visited; each tile's probabilities are recomputed from the saved log-sum-exp
//! (`P = exp(s − lse)`), and with `D = rowsum(dO ∘ O)`:
//! `dV += Pᵀ·dO`, `dS = P ∘ (dO·Vᵀ − D)`, `dQ += scale·dS·K`, `dK += scale·dSᵀ·Q`.

use half::{bf16, f16};

use super::rows::RowOps;
use super::{head_rows, narrow, product, score_tile, spread, Acc, ReadOnly, Rows, Shared};
use crate::backend::attention::{AttentionArgs, AttentionBackwardArgs, GradOperand};
use crate::DType;

/// Runs the backward in compute type `C`.
///
/// # Safety
/// As for [`crate::backend::Backend::attention_backward`].
pub(super) unsafe fn run<C: RowOps>(a: &AttentionBackwardArgs<'_>) {
    let p = a.forward.problem;
    let items = p.batch * p.kv_heads;
    let grads = Grads {
        dq: Shared(a.dq.ptr),
        dk: Shared(a.dk.ptr),
        dv: Shared(a.dv.ptr),
    };
    let args = ReadOnly(a);
    // SAFETY: the scratch holds `slots` slots (the caller's contract); each item writes only
    // the gradients of its own key/value head and of the query heads that read it.
    unsafe {
        spread(
            a.tiles.slots,
            items,
            a.tiles.backward_slot(p).unwrap_or(0),
            a.scratch.cast::<C>(),
            |item, slot| {
                group(
                    args.get(),
                    item / p.kv_heads,
                    item % p.kv_heads,
                    slot,
                    grads,
                )
            },
        )
    };
}

/// The three gradients' first elements.
#[derive(Clone, Copy)]
struct Grads {
    dq: Shared<u8>,
    dk: Shared<u8>,
    dv: Shared<u8>,
}

/// The rooms of one backward slot.
struct Rooms<'s, C> {
    /// One tile of probabilities.
    probs: &'s mut [C],
    /// One tile of their gradient.
    dprobs: &'s mut [C],
    /// `D` for every query row of the head.
    d: &'s mut [C],
    /// When widening: the head's q, k, v and output gradient, and the accumulators of dq,
    /// dk and dv (each empty otherwise).
    q: &'s mut [C],
    k: &'s mut [C],
    v: &'s mut [C],
    grad: &'s mut [C],
    dq: &'s mut [C],
    dk: &'s mut [C],
    dv: &'s mut [C],
}

/// Splits a slot into its rooms.
fn rooms<'s, C>(a: &AttentionBackwardArgs<'_>, slot: &'s mut [C]) -> Rooms<'s, C> {
    let (p, t) = (a.forward.problem, a.tiles);
    let tile = t.q_block * t.kv_block;
    let w = usize::from(t.widens);
    let (probs, rest) = slot.split_at_mut(tile);
    let (dprobs, rest) = rest.split_at_mut(tile);
    let (d, rest) = rest.split_at_mut(p.l);
    let (q, rest) = rest.split_at_mut(w * p.l * p.e);
    let (k, rest) = rest.split_at_mut(w * p.s * p.e);
    let (v, rest) = rest.split_at_mut(w * p.s * p.ev);
    let (grad, rest) = rest.split_at_mut(w * p.l * p.ev);
    let (dq, rest) = rest.split_at_mut(w * p.l * p.e);
    let (dk, rest) = rest.split_at_mut(w * p.s * p.e);
    let dv = &mut rest[..w * p.s * p.ev];
    Rooms {
        probs,
        dprobs,
        d,
        q,
        k,
        v,
        grad,
        dq,
        dk,
        dv,
    }
}

/// Rows of a gradient being accumulated: `ptr` and the stride between rows, in elements.
#[derive(Clone, Copy)]
struct GradRows<C> {
    ptr: *mut C,
    stride: usize,
}

/// A gradient's rows for head `(b, h)`, laid out as `layout` says: where they lie when the
/// dtype is the compute type, else the accumulator `room` (rows of `cols`). Zeroed.
fn grad_rows<C: Acc>(
    (dst, layout): (Shared<u8>, &GradOperand),
    dtype: DType,
    (b, h): (usize, usize),
    (rows, cols): (usize, usize),
    room: &mut [C],
) -> GradRows<C> {
    let g = if dtype == C::DTYPE {
        GradRows {
            ptr: dst.0.cast::<C>().wrapping_add(layout.row_at(b, h, 0)),
            stride: layout.row,
        }
    } else {
        GradRows {
            ptr: room.as_mut_ptr(),
            stride: cols,
        }
    };
    for r in 0..rows {
        // SAFETY: these rows are this item's own (its head of the output, or its
        // accumulator), writable.
        unsafe { std::ptr::write_bytes(g.ptr.wrapping_add(r * g.stride), 0, cols) };
    }
    g
}

/// Rounds an accumulator of rows of `cols` into head `(b, h)` of a half-precision
/// gradient laid out as `layout` says.
///
/// # Safety
/// That head of `dst` must be this item's own, writable.
unsafe fn store_grad<C: Acc>(
    (dst, layout): (Shared<u8>, &GradOperand),
    dtype: DType,
    (b, h): (usize, usize),
    acc: &[C],
    cols: usize,
) {
    if dtype != C::DTYPE && cols > 0 {
        for (r, row) in acc.chunks_exact(cols).enumerate() {
            let at = dst.0.wrapping_add(layout.row_at(b, h, r) * dtype.size());
            // SAFETY: forwarded from the caller.
            unsafe { narrow(dtype, row, at) };
        }
    }
}

/// Every query head that reads key/value head `(b, kvh)`.
fn group<C: RowOps>(a: &AttentionBackwardArgs<'_>, b: usize, kvh: usize, slot: &mut [C], g: Grads) {
    let f = &a.forward;
    let p = f.problem;
    let dtype = f.dtype;
    let r = rooms(a, slot);
    // SAFETY: the caller's contract makes every head of q, k, v, the gradient, the output
    // and the mask readable.
    let (k, v) = unsafe {
        (
            head_rows(&f.k, dtype, (b, kvh, 0), p.s, p.e, &mut *r.k),
            head_rows(&f.v, dtype, (b, kvh, 0), p.s, p.ev, &mut *r.v),
        )
    };
    let dk = grad_rows((g.dk, &a.dk), dtype, (b, kvh), (p.s, p.e), &mut *r.dk);
    let dv = grad_rows((g.dv, &a.dv), dtype, (b, kvh), (p.s, p.ev), &mut *r.dv);
    let per_kv = p.heads / p.kv_heads;
    for h in kvh * per_kv..(kvh + 1) * per_kv {
        // SAFETY: as above.
        let (q, grad) = unsafe {
            (
                head_rows(&f.q, dtype, (b, h, 0), p.l, p.e, &mut *r.q),
                head_rows(&a.grad, dtype, (b, h, 0), p.l, p.ev, &mut *r.grad),
            )
        };
        // SAFETY: as above.
        unsafe { row_dots(f, (b, h), grad, &mut *r.d) };
        let dq = grad_rows((g.dq, &a.dq), dtype, (b, h), (p.l, p.e), &mut *r.dq);
        let heads = Head {
            at: (b, h),
            q,
            k,
            v,
            grad,
            dq,
            dk,
            dv,
        };
        let mut i0 = 0;
        while i0 < p.l {
            let rows = a.tiles.q_block.min(p.l - i0);
            // SAFETY: as above; the gradients' rows are this item's own.
            unsafe { query_block(a, &heads, i0, rows, r.d, &mut *r.probs, &mut *r.dprobs) };
            i0 += rows;
        }
        // SAFETY: the query head's gradient is this item's own.
        unsafe { store_grad((g.dq, &a.dq), dtype, (b, h), &*r.dq, p.e) };
    }
    // SAFETY: the key/value head's gradients are this item's own.
    unsafe {
        store_grad((g.dk, &a.dk), dtype, (b, kvh), &*r.dk, p.e);
        store_grad((g.dv, &a.dv), dtype, (b, kvh), &*r.dv, p.ev);
    }
}

/// `D[i] = Σ_c dO[i, c]·O[i, c]` for every query row of head `(b, h)`.
///
/// # Safety
/// The head's output rows must be readable and `grad` must address `L × Ev`.
unsafe fn row_dots<C: Acc>(
    f: &AttentionArgs<'_>,
    (b, h): (usize, usize),
    grad: Rows<C>,
    d: &mut [C],
) {
    let p = f.problem;
    let ev = p.ev;
    for (i, di) in d.iter_mut().enumerate().take(p.l) {
        let src = f.out.wrapping_add(p.out_row(b, h, i) * f.dtype.size());
        // SAFETY: forwarded from the caller.
        let go = unsafe { std::slice::from_raw_parts(grad.ptr.add(i * grad.stride), ev) };
        // SAFETY: forwarded from the caller: `ev` elements of the output's dtype at `src`.
        let o = |c: usize| unsafe {
            match f.dtype {
                DType::BF16 => C::from_f64(f64::from((*src.cast::<bf16>().add(c)).to_f32())),
                DType::F16 => C::from_f64(f64::from((*src.cast::<f16>().add(c)).to_f32())),
                _ => *src.cast::<C>().add(c),
            }
        };
        *di = go
            .iter()
            .enumerate()
            .fold(C::ZERO, |s, (c, &y)| s + o(c) * y);
    }
}

/// One query head's operands in the compute type, and its gradients' accumulators.
struct Head<C> {
    at: (usize, usize),
    q: Rows<C>,
    k: Rows<C>,
    v: Rows<C>,
    grad: Rows<C>,
    dq: GradRows<C>,
    dk: GradRows<C>,
    dv: GradRows<C>,
}

/// Query rows `i0..i0 + rows` of one head against the key blocks the forward visited.
///
/// # Safety
/// The head's operands must address their full extents; its gradients are this item's own.
#[allow(clippy::too_many_arguments)]
unsafe fn query_block<C: RowOps>(
    a: &AttentionBackwardArgs<'_>,
    hd: &Head<C>,
    i0: usize,
    rows: usize,
    d: &[C],
    probs: &mut [C],
    dprobs: &mut [C],
) {
    let f = &a.forward;
    let p = f.problem;
    let bk = a.tiles.kv_block;
    let (e, ev) = (p.e, p.ev);
    let (b, h) = hd.at;
    let scale = C::from_f64(p.scale);
    let head = b * p.heads + h;
    let lse = f.lse.cast::<C>().wrapping_add(head * p.l + i0);
    // SAFETY: forwarded from the caller (every pointer below addresses the rows named).
    unsafe {
        let q = Rows {
            ptr: hd.q.ptr.add(i0 * hd.q.stride),
            stride: hd.q.stride,
        };
        let go = hd.grad.ptr.add(i0 * hd.grad.stride);
        let dq = hd.dq.ptr.add(i0 * hd.dq.stride);
        let keys = p.keys_for(i0..i0 + rows);
        let mut j0 = 0;
        while j0 < keys {
            let cols = bk.min(keys - j0);
            let k = Rows {
                ptr: hd.k.ptr.add(j0 * hd.k.stride),
                stride: hd.k.stride,
            };
            let v = hd.v.ptr.add(j0 * hd.v.stride);
            score_tile(
                p,
                f.mask.as_ref(),
                (b, h, i0, j0),
                (rows, cols),
                (q, k),
                probs,
                bk,
            );
            for r in 0..rows {
                let row = &mut probs[r * bk..r * bk + cols];
                let shift = *lse.add(r);
                if shift == C::NEG_INF {
                    row.fill(C::ZERO);
                } else {
                    C::exp_shift(row, shift);
                }
            }
            // dV[j] += Pᵀ·dO
            product(
                (cols, ev, rows),
                hd.dv.ptr.add(j0 * hd.dv.stride),
                hd.dv.stride,
                true,
                (probs.as_ptr(), 1, bk),
                (go, hd.grad.stride, 1),
                C::ONE,
            );
            // dP = dO·Vᵀ, then dS = P ∘ (dP − D) in its place.
            product(
                (rows, cols, ev),
                dprobs.as_mut_ptr(),
                bk,
                false,
                (go, hd.grad.stride, 1),
                (v, 1, hd.v.stride),
                C::ONE,
            );
            for r in 0..rows {
                let di = d[i0 + r];
                let pr = &probs[r * bk..r * bk + cols];
                for (x, &pv) in dprobs[r * bk..r * bk + cols].iter_mut().zip(pr) {
                    *x = pv * (*x - di);
                }
            }
            // dQ += scale·dS·K; dK[j] += scale·dSᵀ·Q
            product(
                (rows, e, cols),
                dq,
                hd.dq.stride,
                true,
                (dprobs.as_ptr(), bk, 1),
                (k.ptr, k.stride, 1),
                scale,
            );
            product(
                (cols, e, rows),
                hd.dk.ptr.add(j0 * hd.dk.stride),
                hd.dk.stride,
                true,
                (dprobs.as_ptr(), 1, bk),
                (q.ptr, q.stride, 1),
                scale,
            );
            j0 += cols;
        }
    }
}
