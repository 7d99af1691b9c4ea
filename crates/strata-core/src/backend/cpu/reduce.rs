//! Reduction kernels over the runs of a [`Plan`] whose operand 0 is an accumulator with
//! stride 0 along the reduced dimensions (the plan orders those innermost).

use super::kernels::{buffer, input_block, store, BLOCK};
use super::Plan;
use crate::backend::kernel::{Fold, FoldCombine, FoldTerm};
use crate::dtype::{cast, dispatch, DType, DTypeFn, Element};

/// Folds the input (operand 1, read as `input`) into the accumulator (operand 0, f64 or
/// i64 as `acc` says, already holding the initial values) as `fold` describes; operand 2,
/// when present, holds each result's parameter with the accumulator's layout. The terms and
/// combinations the reductions use run as their own loops; any other pairing runs through
/// one general loop.
///
/// # Safety
/// As for [`fold_map`], with `acc` the accumulator's element type.
pub(crate) unsafe fn fold(plan: &Plan, input: DType, acc: DType, fold: Fold) {
    struct F<'a>(&'a Plan, DType, Fold);
    impl DTypeFn for F<'_> {
        type Output = ();
        fn call<I: Element>(self) {
            // SAFETY: the contract of `fold`.
            unsafe {
                match self.1 {
                    DType::I64 => fold_i64::<I>(self.0, self.2),
                    _ => fold_f64::<I>(self.0, self.2),
                }
            }
        }
    }
    dispatch(input, F(plan, acc, fold));
}

/// `term` of `x` with parameter `p`, in f64.
fn term_f64(term: FoldTerm, x: f64, p: f64) -> f64 {
    match term {
        FoldTerm::Value => x,
        FoldTerm::Abs => x.abs(),
        FoldTerm::NonZero => f64::from(u8::from(x != 0.0)),
        FoldTerm::Square => x * x,
        FoldTerm::AbsPow(e) => x.abs().powf(e),
        FoldTerm::SquaredDeviation => (x - p) * (x - p),
        FoldTerm::ExpShifted => (x - p).exp(),
    }
}

/// `v` rounded to `dtype` when it is a half-precision dtype.
fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// `combine(a, v)` in f64.
fn combine_f64(combine: FoldCombine, a: f64, v: f64) -> f64 {
    match combine {
        FoldCombine::Sum => a + v,
        FoldCombine::Prod => a * v,
        FoldCombine::ProdRoundedTo(d) => round_to(d, a * v),
        FoldCombine::Max => a.maximum_nan(v),
        FoldCombine::Min => a.minimum_nan(v),
    }
}

/// [`fold`] into f64 accumulators.
///
/// # Safety
/// As for [`fold`].
unsafe fn fold_f64<I: Element>(plan: &Plan, fold: Fold) {
    use FoldCombine::{Max, Min, Prod, ProdRoundedTo, Sum};
    use FoldTerm::{Abs, AbsPow, ExpShifted, NonZero, Square, SquaredDeviation, Value};
    macro_rules! go {
        ($g:expr, $f:expr) => {
            // SAFETY: forwarded from the caller.
            unsafe { fold_map::<I, f64>(plan, $g, $f) }
        };
    }
    let sum = |a: f64, v: f64| a + v;
    match (fold.term, fold.combine) {
        (Value, Sum) => go!(|x, _| x, sum),
        (Value, Prod) => go!(|x, _| x, |a, x| a * x),
        (Value, ProdRoundedTo(d)) => go!(|x, _| x, move |a, x| round_to(d, a * x)),
        (Value, Max) => go!(|x, _| x, f64::maximum_nan),
        (Value, Min) => go!(|x, _| x, f64::minimum_nan),
        (Abs, Max) => go!(|x: f64, _| x.abs(), f64::maximum_nan),
        (Abs, Min) => go!(|x: f64, _| x.abs(), f64::minimum_nan),
        (Abs, Sum) => go!(|x: f64, _| x.abs(), sum),
        (NonZero, Sum) => go!(|x, _| if x != 0.0 { 1.0 } else { 0.0 }, sum),
        (Square, Sum) => go!(|x, _| x * x, sum),
        (AbsPow(e), Sum) => go!(move |x: f64, _| x.abs().powf(e), sum),
        (SquaredDeviation, Sum) => go!(|x, m| (x - m) * (x - m), sum),
        (ExpShifted, Sum) => go!(|x: f64, m| (x - m).exp(), sum),
        (term, combine) => go!(move |x, p| term_f64(term, x, p), move |a, v| combine_f64(
            combine, a, v
        )),
    }
}

/// [`fold`] into i64 accumulators (wrapping arithmetic, as PyTorch's integer reductions).
///
/// # Safety
/// As for [`fold`].
unsafe fn fold_i64<I: Element>(plan: &Plan, fold: Fold) {
    macro_rules! go {
        ($f:expr) => {
            // SAFETY: forwarded from the caller.
            unsafe { fold_map::<I, i64>(plan, |x, _| x, $f) }
        };
    }
    match (fold.term, fold.combine) {
        (FoldTerm::Value, FoldCombine::Sum) => go!(|a: i64, x| a.wrapping_add(x)),
        (FoldTerm::Value, FoldCombine::Prod | FoldCombine::ProdRoundedTo(_)) => {
            go!(|a: i64, x| a.wrapping_mul(x))
        }
        (FoldTerm::Value, FoldCombine::Max) => go!(|a: i64, x| a.max(x)),
        (FoldTerm::Value, FoldCombine::Min) => go!(|a: i64, x| a.min(x)),
        (term, combine) => {
            let term = move |x: i64, p: i64| match term {
                FoldTerm::Value => x,
                FoldTerm::Abs => x.wrapping_abs(),
                FoldTerm::NonZero => i64::from(x != 0),
                FoldTerm::Square => x.wrapping_mul(x),
                FoldTerm::SquaredDeviation => x.wrapping_sub(p).wrapping_mul(x.wrapping_sub(p)),
                // Powers and exponentials are taken in f64 and truncated.
                FoldTerm::AbsPow(_) | FoldTerm::ExpShifted => {
                    term_f64(term, x as f64, p as f64) as i64
                }
            };
            let combine = move |a: i64, v: i64| match combine {
                FoldCombine::Sum => a.wrapping_add(v),
                FoldCombine::Prod | FoldCombine::ProdRoundedTo(_) => a.wrapping_mul(v),
                FoldCombine::Max => a.max(v),
                FoldCombine::Min => a.min(v),
            };
            // SAFETY: forwarded from the caller.
            unsafe { fold_map::<I, i64>(plan, term, combine) }
        }
    }
}

/// Running sums (`cumsum`) of the input read as `input`, accumulated in f64 for floating
/// inputs and i64 (wrapping) for others: operands as [`scan`].
///
/// # Safety
/// As for [`scan`], with the carry of the accumulation type.
pub(crate) unsafe fn scan_sum(plan: &Plan, input: DType) {
    struct Scan<'a>(&'a Plan);
    impl DTypeFn for Scan<'_> {
        type Output = ();
        fn call<I: Element>(self) {
            // SAFETY: the contract of `scan_sum`.
            unsafe {
                if I::DTYPE.is_floating() {
                    scan::<I, f64>(self.0, |a, v| a + v)
                } else {
                    scan::<I, i64>(self.0, |a, v| a.wrapping_add(v))
                }
            }
        }
    }
    dispatch(input, Scan(plan));
}

/// The best element and its position (`max`/`min` with a dimension, `argmax`/`argmin`) with
/// values of `acc` (f64, where NaN beats everything, or i64): operands as [`arg_fold`].
///
/// # Safety
/// As for [`arg_fold`], with `acc` the value buffer's and input's element type.
pub(crate) unsafe fn arg_best(plan: &Plan, acc: DType, max: bool) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match (acc, max) {
            (DType::I64, true) => arg_fold::<i64>(plan, |c, b| c > b),
            (DType::I64, false) => arg_fold::<i64>(plan, |c, b| c < b),
            (_, true) => arg_fold::<f64>(plan, |c, b| (c.is_nan() && !b.is_nan()) || c > b),
            (_, false) => arg_fold::<f64>(plan, |c, b| (c.is_nan() && !b.is_nan()) || c < b),
        }
    }
}

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
unsafe fn fold_map<I: Element, A: Element>(
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
unsafe fn scan<I: Element, A: Element>(plan: &Plan, f: impl Fn(A, A) -> A + Sync) {
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
unsafe fn arg_fold<A: Element>(plan: &Plan, better: impl Fn(A, A) -> bool + Sync) {
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
