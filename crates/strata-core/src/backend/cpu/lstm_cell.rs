//! The fused LSTM cell: one pass over a step's gates for the forward (the gate sums, the
//! four activations, the new cell and hidden states) and one for the backward (every gate's
//! gradient and the previous cell state's), where the composed cell runs about twenty
//! element-wise ops each way. The activations are the ones the sigmoid and tanh kernels
//! evaluate (for f32 the vectorisable `exp` and `tanh`), so the two paths differ only in
//! the order of a few additions.
//!
//! A row is walked in chunks of [`LANE`] columns, loaded into local arrays and computed
//! there, so the arithmetic vectorises even where the workspace is the input gates
//! themselves; on x86_64 the walk is also compiled with AVX2 and FMA and chosen at run time,
//! as the map kernels are ([`super::chunk`]). Rows run in parallel on strata's pool.

use super::cell_rows::{
    add_from, bias, load, row_passes, rows, rows_mut, run_rows, sigmoid, store, Rows, LANE,
};
use super::math::Float;
use crate::backend::args::{LstmCellArgs, LstmCellBackwardArgs};

/// The operands of the forward, as integers.
#[derive(Clone, Copy)]
struct Forward {
    hidden: usize,
    input_gates: Rows,
    hidden_gates: Rows,
    bias_ih: Rows,
    bias_hh: Rows,
    cx: Rows,
    workspace: Rows,
    hy: Rows,
    cy: Rows,
    activated: bool,
}

/// The operands of the backward, as integers.
#[derive(Clone, Copy)]
struct Backward {
    hidden: usize,
    grad_hy: Rows,
    grad_cy: Rows,
    cx: Rows,
    cy: Rows,
    workspace: Rows,
    grad_gates: Rows,
    grad_cx: Rows,
}

/// Runs the forward; false (nothing written) for a dtype other than f32 and f64.
///
/// # Safety
/// As [`crate::backend::Backend::lstm_cell_forward`].
pub(crate) unsafe fn forward(a: &LstmCellArgs) -> bool {
    let f = Forward {
        hidden: a.hidden,
        input_gates: rows(a.input_gates),
        hidden_gates: rows(a.hidden_gates),
        bias_ih: bias(a.bias_ih),
        bias_hh: bias(a.bias_hh),
        cx: rows(a.cx),
        workspace: rows_mut(a.workspace),
        hy: rows_mut(a.hy),
        cy: rows_mut(a.cy),
        activated: a.activated,
    };
    // SAFETY: forwarded from the caller.
    unsafe { run_rows(&f, a.dtype, a.rows, a.hidden) }
}

/// Runs the backward; false (nothing written) for a dtype other than f32 and f64.
///
/// # Safety
/// As [`crate::backend::Backend::lstm_cell_backward`].
pub(crate) unsafe fn backward(a: &LstmCellBackwardArgs) -> bool {
    let b = Backward {
        hidden: a.hidden,
        grad_hy: rows(a.grad_hy),
        grad_cy: rows(a.grad_cy),
        cx: rows(a.cx),
        cy: rows(a.cy),
        workspace: rows(a.workspace),
        grad_gates: rows_mut(a.grad_gates),
        grad_cx: rows_mut(a.grad_cx),
    };
    // SAFETY: forwarded from the caller.
    unsafe { run_rows(&b, a.dtype, a.rows, a.hidden) }
}

row_passes!(Forward => forward_row, Backward => backward_row);

/// # Safety
/// As [`super::cell_rows::RowPass::row`].
#[inline(always)]
unsafe fn forward_row<T: Float>(f: &Forward, r: usize) {
    let h = f.hidden;
    let mut col = 0;
    while col < h {
        let n = LANE.min(h - col);
        // SAFETY: `col + n ≤ h` lies inside the state rows (caller).
        let cx = unsafe { load::<T>(f.cx, r, col, n) };
        let (mut cy, mut hy) = ([T::ZERO; LANE], [T::ZERO; LANE]);
        if f.activated {
            // Four plain loads rather than a `map` over the gate indices, which was compiled
            // out of line (without AVX2, returning the four chunks through memory).
            // SAFETY: `q·h + col + n ≤ 4h` lies inside the workspace row (caller).
            let (i, fg, g, o) = unsafe {
                (
                    load::<T>(f.workspace, r, col, n),
                    load::<T>(f.workspace, r, h + col, n),
                    load::<T>(f.workspace, r, 2 * h + col, n),
                    load::<T>(f.workspace, r, 3 * h + col, n),
                )
            };
            for k in 0..LANE {
                cy[k] = fg[k].mul(cx[k]).add(i[k].mul(g[k]));
                hy[k] = o[k].mul(cy[k].tanh_vectorisable());
            }
        } else {
            // SAFETY: `q·h + col + n ≤ 4h` lies inside the gate rows and biases (caller).
            let (gi, gf, gg, go) = unsafe {
                (
                    gate_sum::<T>(f, r, col, n),
                    gate_sum::<T>(f, r, h + col, n),
                    gate_sum::<T>(f, r, 2 * h + col, n),
                    gate_sum::<T>(f, r, 3 * h + col, n),
                )
            };
            let mut act = [[T::ZERO; LANE]; 4];
            for k in 0..LANE {
                let (i, fg, g, o) = (
                    sigmoid(gi[k]),
                    sigmoid(gf[k]),
                    gg[k].tanh_vectorisable(),
                    sigmoid(go[k]),
                );
                act[0][k] = i;
                act[1][k] = fg;
                act[2][k] = g;
                act[3][k] = o;
                cy[k] = fg.mul(cx[k]).add(i.mul(g));
                hy[k] = o.mul(cy[k].tanh_vectorisable());
            }
            // SAFETY: the gate columns `q·h + col..+n` of row `r` are this thread's to
            // write; the workspace may be the input gates, read above.
            unsafe {
                for (q, v) in act.iter().enumerate() {
                    store(v, f.workspace, r, q * h + col, n);
                }
            }
        }
        // SAFETY: the state columns `col..+n` of row `r` are this thread's to write.
        unsafe {
            store(&cy, f.cy, r, col, n);
            if f.hy.present() {
                store(&hy, f.hy, r, col, n);
            }
        }
        col += n;
    }
}

/// A gate's sum over `n` columns of row `r` from column `c`: the input and hidden gates
/// and both biases. A function rather than a closure, so that it is compiled inline with the
/// row's instruction set.
///
/// # Safety
/// Columns `c..c + n` lie inside the gate rows and biases.
#[inline(always)]
unsafe fn gate_sum<T: Float>(f: &Forward, r: usize, c: usize, n: usize) -> [T; LANE] {
    // SAFETY: the caller's contract.
    unsafe {
        let mut v = load::<T>(f.input_gates, r, c, n);
        add_from(&mut v, f.hidden_gates, r, c, n);
        add_from(&mut v, f.bias_ih, 0, c, n);
        add_from(&mut v, f.bias_hh, 0, c, n);
        v
    }
}

/// # Safety
/// As [`super::cell_rows::RowPass::row`].
#[inline(always)]
unsafe fn backward_row<T: Float>(b: &Backward, r: usize) {
    let h = b.hidden;
    let one = T::ONE;
    let mut col = 0;
    while col < h {
        let n = LANE.min(h - col);
        // SAFETY: the gate columns `q·h + col..+n` and state columns `col..+n` of row `r`
        // lie inside the operands (caller); absent gradients read as zeros.
        let (i, fg, g, o, cx, cy, ghy, gcy) = unsafe {
            (
                load::<T>(b.workspace, r, col, n),
                load::<T>(b.workspace, r, h + col, n),
                load::<T>(b.workspace, r, 2 * h + col, n),
                load::<T>(b.workspace, r, 3 * h + col, n),
                load::<T>(b.cx, r, col, n),
                load::<T>(b.cy, r, col, n),
                load::<T>(b.grad_hy, r, col, n),
                load::<T>(b.grad_cy, r, col, n),
            )
        };
        let mut d = [[T::ZERO; LANE]; 4];
        let mut dcx = [T::ZERO; LANE];
        for k in 0..LANE {
            let tc = cy[k].tanh_vectorisable();
            let gc = gcy[k].add(ghy[k].mul(o[k]).mul(one.sub(tc.mul(tc))));
            d[0][k] = gc.mul(g[k]).mul(one.sub(i[k]).mul(i[k]));
            d[1][k] = gc.mul(cx[k]).mul(one.sub(fg[k]).mul(fg[k]));
            d[2][k] = gc.mul(i[k]).mul(one.sub(g[k].mul(g[k])));
            d[3][k] = ghy[k].mul(tc).mul(one.sub(o[k]).mul(o[k]));
            dcx[k] = gc.mul(fg[k]);
        }
        // SAFETY: these columns of row `r` are this thread's to write; `grad_gates` may be
        // the workspace and `grad_cx` may be `grad_cy`, both read above.
        unsafe {
            for (q, v) in d.iter().enumerate() {
                store(v, b.grad_gates, r, q * h + col, n);
            }
            store(&dcx, b.grad_cx, r, col, n);
        }
        col += n;
    }
}

#[cfg(test)]
mod tests {
    use super::super::cell_rows::row_builds;
    use super::*;

    /// Values in about [-3, 3], the same each run.
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|k| (((k * 7919 + seed * 104_729) % 1000) as f32 - 500.0) / 167.0)
            .collect()
    }

    fn at(v: &[f32], stride: usize) -> Rows {
        Rows {
            addr: v.as_ptr() as usize,
            stride,
        }
    }

    fn at_mut(v: &mut [f32], stride: usize) -> Rows {
        Rows {
            addr: v.as_mut_ptr() as usize,
            stride,
        }
    }

    /// Each vector build of both passes writes the plain build's bits, on rows of whole
    /// chunks and of a partial one (37 units: two chunks of 16 and one of 5).
    #[test]
    fn every_build_computes_the_plain_rows_bits() {
        let (rows, h) = (3, 37);
        let (gi, gh) = (values(rows * 4 * h, 1), values(rows * 4 * h, 2));
        let (b_ih, b_hh, cx) = (values(4 * h, 3), values(4 * h, 4), values(rows * h, 5));
        let (ghy, gcy) = (values(rows * h, 6), values(rows * h, 7));
        let mut results = Vec::new();
        for (fwd, bwd) in row_builds::<Forward, f32>()
            .into_iter()
            .zip(row_builds::<Backward, f32>())
        {
            let (mut ws, mut hy, mut cy) = (
                vec![0f32; rows * 4 * h],
                vec![0f32; rows * h],
                vec![0f32; rows * h],
            );
            let f = Forward {
                hidden: h,
                input_gates: at(&gi, 4 * h),
                hidden_gates: at(&gh, 4 * h),
                bias_ih: at(&b_ih, 0),
                bias_hh: at(&b_hh, 0),
                cx: at(&cx, h),
                workspace: at_mut(&mut ws, 4 * h),
                hy: at_mut(&mut hy, h),
                cy: at_mut(&mut cy, h),
                activated: false,
            };
            for r in 0..rows {
                // SAFETY: every operand holds `rows` rows of its width; this thread alone
                // writes them; the CPU runs the build (`row_builds`).
                unsafe { (fwd.1)(&f, r) };
            }
            let (mut gg, mut gcx) = (vec![0f32; rows * 4 * h], vec![0f32; rows * h]);
            let b = Backward {
                hidden: h,
                grad_hy: at(&ghy, h),
                grad_cy: at(&gcy, h),
                cx: at(&cx, h),
                cy: at(&cy, h),
                workspace: at(&ws, 4 * h),
                grad_gates: at_mut(&mut gg, 4 * h),
                grad_cx: at_mut(&mut gcx, h),
            };
            for r in 0..rows {
                // SAFETY: as above.
                unsafe { (bwd.1)(&b, r) };
            }
            let bits = |v: &mut Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            results.push((
                fwd.0,
                [&mut ws, &mut hy, &mut cy, &mut gg, &mut gcx].map(bits),
            ));
        }
        let (plain, want) = &results[0];
        assert_eq!(*plain, "plain");
        assert!(want[1].iter().any(|&b| b != 0), "the forward wrote nothing");
        for (name, got) in &results[1..] {
            assert_eq!(got, want, "{name}");
        }
    }
}
