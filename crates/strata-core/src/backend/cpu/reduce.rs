//! Reduction kernels over the runs of a [`Plan`] whose operand 0 is an accumulator with
//! stride 0 along the reduced dimensions (the plan orders those innermost).

use super::kernels::{buffer, input_block, store, BLOCK};
use super::Plan;
use crate::dtype::{cast, Element};

/// Folds the input (operand 1) into the accumulator (operand 0, of type `A`, already
/// holding the initial values) with each element transformed first: `acc = f(acc, g(x, p))`
/// in iteration order. The input is read
/// as `I` (each element rounded to `I`, as an op computing in that dtype sees it) and
/// widened to `A`; `p` is the element's slot in operand 2, a buffer of `A` with the
/// accumulator's strides (a per-result parameter such as a mean), or `A::ZERO` when the plan
/// has only two operands.
///
/// # Safety
/// The plan's operands must be valid for the loop: the input readable, the accumulator a
/// writable buffer of `A` that no other thread touches. The plan must not be parallel.
/// `f` must combine two partial results of its own kind (a sum, a product, a maximum): the
/// loop folds independent lanes and then folds the lanes together with `f`. Operand 2, when
/// present, must be readable with the accumulator's layout.
pub unsafe fn fold_map<I: Element, A: Element>(
    plan: &Plan,
    g: impl Fn(A, A) -> A + Sync,
    f: impl Fn(A, A) -> A + Sync,
) {
    let has_param = plan.num_operands() > 2;
    plan.for_each_run(|p, s, n| {
        let mut buf = buffer::<I>();
        let acc = p[0] as *mut A;
        let acc_step = s[0] / std::mem::size_of::<A>() as isize;
        let param = has_param.then(|| (p[2] as *const A, s[2] / std::mem::size_of::<A>() as isize));
        for start in (0..n).step_by(BLOCK) {
            let m = BLOCK.min(n - start);
            // SAFETY: the caller guarantees the run is valid for every operand.
            unsafe {
                let x = input_block(plan, 1, p[1], s[1], start, m, &mut buf);
                let value = |i: usize| cast::<I, A>(*x.add(i));
                if acc_step == 0 {
                    let pv = param.map_or(A::ZERO, |(pp, _)| *pp);
                    // Eight independent partial folds, so the loop is not bound by the
                    // latency of one chain (the ops folded are associative).
                    let mut a = *acc;
                    let mut i = 0;
                    if m >= 16 {
                        let mut lanes = [A::ZERO; 8];
                        for (k, lane) in lanes.iter_mut().enumerate() {
                            *lane = g(value(k), pv);
                        }
                        i = 8;
                        while i + 8 <= m {
                            for (k, lane) in lanes.iter_mut().enumerate() {
                                *lane = f(*lane, g(value(i + k), pv));
                            }
                            i += 8;
                        }
                        let folded = lanes[1..].iter().fold(lanes[0], |c, &l| f(c, l));
                        a = f(a, folded);
                    }
                    while i < m {
                        a = f(a, g(value(i), pv));
                        i += 1;
                    }
                    *acc = a;
                } else {
                    let at = acc.offset(start as isize * acc_step);
                    for i in 0..m {
                        let slot = at.offset(i as isize * acc_step);
                        let pv =
                            param.map_or(A::ZERO, |(pp, ps)| *pp.offset((start + i) as isize * ps));
                        *slot = f(*slot, g(value(i), pv));
                    }
                }
            }
        }
    });
}

/// Running folds (`cumsum`): operands are (output, carry `A`, input). The carry has stride 0
/// along the scanned dimension, so each carry slot follows one line: `carry = f(carry, x)`,
/// then the output element is the carry (converted to the output's dtype). A sequential walk
/// visits each line's elements in order whatever the loop order. The input is read as `I`
/// and widened to `A`, as in [`fold_map`]. The carry must start at the identity of `f`.
///
/// # Safety
/// As for [`fold_map`]: the output writable (it may be the input itself, element for element),
/// the carry a private buffer, the plan not parallel.
pub unsafe fn scan<I: Element, A: Element>(plan: &Plan, f: impl Fn(A, A) -> A + Sync) {
    plan.for_each_run(|p, s, n| {
        let mut xbuf = buffer::<I>();
        let mut obuf = buffer::<A>();
        let carry = p[1] as *mut A;
        let step = s[1] / std::mem::size_of::<A>() as isize;
        for start in (0..n).step_by(BLOCK) {
            let m = BLOCK.min(n - start);
            // SAFETY: the caller guarantees the run is valid for every operand; `obuf` holds
            // BLOCK elements, of which the loop initialises the first `m` before `store`
            // reads them. Each output element is written after its input element is read.
            unsafe {
                let x = input_block(plan, 2, p[2], s[2], start, m, &mut xbuf);
                let c = carry.offset(start as isize * step);
                for (i, o) in obuf[..m].iter_mut().enumerate() {
                    let slot = c.offset(i as isize * step);
                    *slot = f(*slot, cast::<I, A>(*x.add(i)));
                    o.write(*slot);
                }
                let done = std::slice::from_raw_parts(obuf.as_ptr() as *const A, m);
                let o_at = p[0].wrapping_offset(start as isize * s[0]);
                store(done, o_at, s[0], plan.dtype(0));
            }
        }
    });
}

/// For `max`/`min`/`argmax`/`argmin`: operands are (best value `A`, best index `i64`, input,
/// position along the reduced dimension `i64`). Keeps the first element for which
/// `better(candidate, best)` holds; a best index of -1 means "nothing seen yet".
///
/// # Safety
/// As for [`fold_map`]; operands 0 and 1 are private buffers, operands 2 and 3 readable.
pub unsafe fn arg_fold<A: Element>(plan: &Plan, better: impl Fn(A, A) -> bool + Sync) {
    plan.for_each_run(|p, s, n| {
        let mut xbuf = buffer::<A>();
        let mut ibuf = buffer::<i64>();
        let val = p[0] as *mut A;
        let idx = p[1] as *mut i64;
        let vstep = s[0] / std::mem::size_of::<A>() as isize;
        let istep = s[1] / std::mem::size_of::<i64>() as isize;
        for start in (0..n).step_by(BLOCK) {
            let m = BLOCK.min(n - start);
            // SAFETY: the caller guarantees the run is valid for all four operands.
            unsafe {
                let x = input_block(plan, 2, p[2], s[2], start, m, &mut xbuf);
                let pos = input_block(plan, 3, p[3], s[3], start, m, &mut ibuf);
                for i in 0..m {
                    let k = (start + i) as isize;
                    let vslot = val.offset(k * vstep);
                    let islot = idx.offset(k * istep);
                    let cand = *x.add(i);
                    if *islot < 0 || better(cand, *vslot) {
                        *vslot = cand;
                        *islot = *pos.add(i);
                    }
                }
            }
        }
    });
}
