//! Reduction kernels over the runs of a [`Plan`] whose operand 0 is an accumulator with
//! stride 0 along the reduced dimensions (the plan orders those innermost).

use super::kernels::{buffer, input_block, BLOCK};
use super::Plan;
use crate::dtype::Element;

/// Folds the input (operand 1, read as `A`) into the accumulator (operand 0, of type `A`,
/// already holding the initial values): `acc = fold(acc, x)` in iteration order.
///
/// # Safety
/// The plan's operands must be valid for the loop: the input readable, the accumulator a
/// writable buffer of `A` that no other thread touches. The plan must not be parallel.
/// `f` must combine two partial results of its own kind (a sum, a product, a maximum): the
/// loop folds independent lanes and then folds the lanes together with `f`.
pub unsafe fn fold<A: Element>(plan: &Plan, f: impl Fn(A, A) -> A + Sync) {
    plan.for_each_run(|p, s, n| {
        let mut buf = buffer::<A>();
        let acc = p[0] as *mut A;
        let acc_step = s[0] / std::mem::size_of::<A>() as isize;
        for start in (0..n).step_by(BLOCK) {
            let m = BLOCK.min(n - start);
            // SAFETY: the caller guarantees the run is valid for both operands.
            unsafe {
                let x = input_block(plan, 1, p[1], s[1], start, m, &mut buf);
                if acc_step == 0 {
                    // Eight independent partial folds, so the loop is not bound by the
                    // latency of one chain (the ops folded are associative).
                    let mut a = *acc;
                    let mut i = 0;
                    if m >= 16 {
                        let mut lanes = [*x; 8];
                        for (k, lane) in lanes.iter_mut().enumerate() {
                            *lane = *x.add(k);
                        }
                        i = 8;
                        while i + 8 <= m {
                            for (k, lane) in lanes.iter_mut().enumerate() {
                                *lane = f(*lane, *x.add(i + k));
                            }
                            i += 8;
                        }
                        let folded = lanes[1..].iter().fold(lanes[0], |c, &l| f(c, l));
                        a = f(a, folded);
                    }
                    while i < m {
                        a = f(a, *x.add(i));
                        i += 1;
                    }
                    *acc = a;
                } else {
                    let at = acc.offset(start as isize * acc_step);
                    for i in 0..m {
                        let slot = at.offset(i as isize * acc_step);
                        *slot = f(*slot, *x.add(i));
                    }
                }
            }
        }
    });
}

/// For `max`/`min`/`argmax`/`argmin`: operands are (best value `A`, best index `i64`, input,
/// position along the reduced dimension `i64`). Keeps the first element for which
/// `better(candidate, best)` holds; a best index of -1 means "nothing seen yet".
///
/// # Safety
/// As for [`fold`]; operands 0 and 1 are private buffers, operands 2 and 3 readable.
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
