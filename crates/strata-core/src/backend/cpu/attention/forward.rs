//! The fused forward: for each block of query rows, an online softmax over the key blocks
//! (causal masking stops at the block's last diagonal), then the output and the rows'
//! log-sum-exp.

use super::rows::RowOps;
use super::{head_rows, narrow, product, score_tile, spread, ReadOnly, Rows, Shared};
use crate::backend::attention::AttentionArgs;

/// Runs the forward in compute type `C`.
///
/// # Safety
/// As for [`crate::backend::Backend::attention_forward`].
pub(super) unsafe fn run<C: RowOps>(a: &AttentionArgs<'_>) {
    let (p, t) = (a.problem, a.tiles);
    let blocks = p.q_blocks(t.q_block);
    let items = p.batch * p.heads * blocks;
    let out = Shared(a.out);
    let lse = Shared(a.lse.cast::<C>());
    let args = ReadOnly(a);
    // SAFETY: the scratch holds `slots` slots (the caller's contract); each item writes only
    // its own rows of the output and the log-sum-exp.
    unsafe {
        spread(
            t.slots,
            items,
            t.forward_slot(p).unwrap_or(0),
            a.scratch.cast::<C>(),
            |item, slot| block(args.get(), item / blocks, item % blocks, slot, out, lse),
        )
    };
}

/// One block of query rows of head `bh` (`b·heads + h`).
fn block<C: RowOps>(
    a: &AttentionArgs<'_>,
    bh: usize,
    q_block: usize,
    slot: &mut [C],
    out: Shared<u8>,
    lse: Shared<C>,
) {
    let (p, t) = (a.problem, a.tiles);
    let (b, h) = (bh / p.heads, bh % p.heads);
    let kvh = p.kv_head(h);
    let (bq, bk, e, ev) = (t.q_block, t.kv_block, p.e, p.ev);
    let i0 = q_block * bq;
    let rows = bq.min(p.l - i0);
    let (scores, rest) = slot.split_at_mut(bq * bk);
    let (acc, rest) = rest.split_at_mut(bq * ev);
    let (max, rest) = rest.split_at_mut(bq);
    let (sum, rest) = rest.split_at_mut(bq);
    let (q_room, rest) = rest.split_at_mut(if t.widens { bq * e } else { 0 });
    let (k_room, v_room) = rest.split_at_mut(if t.widens { bk * e } else { 0 });
    max.fill(C::NEG_INF);
    sum.fill(C::ZERO);
    acc.fill(C::ZERO);
    // SAFETY: the caller's contract makes every row of every head of q, k, v and the mask
    // readable; the slot is this thread's own.
    let q = unsafe { head_rows(&a.q, a.dtype, (b, h, i0), rows, e, q_room) };
    let keys = p.keys_for(i0..i0 + rows);
    let mut j0 = 0;
    while j0 < keys {
        let cols = bk.min(keys - j0);
        // SAFETY: as above.
        let (k, v): (Rows<C>, Rows<C>) = unsafe {
            (
                head_rows(&a.k, a.dtype, (b, kvh, j0), cols, e, k_room),
                head_rows(&a.v, a.dtype, (b, kvh, j0), cols, ev, v_room),
            )
        };
        // SAFETY: the scores tile holds `bq × bk`; q and k address `rows × e` and `cols × e`.
        unsafe {
            score_tile(
                p,
                a.mask.as_ref(),
                (b, h, i0, j0),
                (rows, cols),
                (q, k),
                scores,
                bk,
            )
        };
        for r in 0..rows {
            let row = &mut scores[r * bk..r * bk + cols];
            let mut top = C::row_max(row, max[r]);
            if top == C::NEG_INF {
                if !row.iter().any(|x| x.is_nan_value()) {
                    // Nothing attended yet: the row adds nothing.
                    row.fill(C::ZERO);
                    continue;
                }
                // Only NaN scores (the maximum passes over NaN): the row becomes NaN, as on
                // the math path, instead of looking masked.
                top = row
                    .iter()
                    .copied()
                    .fold(top, |t, x| if x.is_nan_value() { x } else { t });
            }
            let total = C::exp_sum(row, top);
            let rescale = (max[r] - top).exp_vectorisable();
            sum[r] = sum[r] * rescale + total;
            max[r] = top;
            if rescale != C::ONE {
                for x in &mut acc[r * ev..(r + 1) * ev] {
                    *x *= rescale;
                }
            }
        }
        // SAFETY: the accumulator holds `bq × ev`; the probabilities `rows × cols` (row
        // stride bk) and v `cols × ev`.
        unsafe {
            product(
                (rows, ev, cols),
                acc.as_mut_ptr(),
                ev,
                true,
                (scores.as_ptr(), bk, 1),
                (v.ptr, v.stride, 1),
                C::ONE,
            )
        };
        j0 += cols;
    }
    for r in 0..rows {
        let row = &mut acc[r * ev..(r + 1) * ev];
        // A row that attended nothing has sum 0 (output 0); a NaN stays NaN.
        let weight = if sum[r] == C::ZERO {
            C::ZERO
        } else {
            C::ONE / sum[r]
        };
        for x in row.iter_mut() {
            *x *= weight;
        }
        let dst = out.0.wrapping_add(p.out_row(b, h, i0 + r) * a.dtype.size());
        // SAFETY: this row of the output is this item's own.
        unsafe { narrow(a.dtype, row, dst) };
        let log_sum = if sum[r] == C::ZERO {
            C::NEG_INF
        } else {
            max[r] + sum[r].ln()
        };
        // SAFETY: this element of the contiguous log-sum-exp is this item's own.
        unsafe { *lse.0.add(bh * p.l + i0 + r) = log_sum };
    }
}
