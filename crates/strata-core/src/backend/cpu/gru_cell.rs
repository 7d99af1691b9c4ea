//! The fused GRU cell: one pass over a step's two gate rows for the forward (the gate sums,
//! the three activations and the new state) and one for the backward (both gate rows'
//! gradients and the state's), where the composed cell runs about a dozen element-wise ops
//! each way. Every value is rounded in the order the composition rounds it, with the
//! activations the sigmoid and tanh kernels evaluate, so the two paths agree bit for bit.
//! Rows are walked as the LSTM cell walks them ([`super::cell_rows`]).

use super::cell_rows::{load, row_passes, rows, rows_mut, run_rows, sigmoid, store, Rows, LANE};
use super::math::Float;
use crate::backend::args::{GruCellArgs, GruCellBackwardArgs};

/// The operands of the forward, as integers.
#[derive(Clone, Copy)]
struct Forward {
    hidden: usize,
    input_gates: Rows,
    hidden_gates: Rows,
    h: Rows,
    workspace: Rows,
    hy: Rows,
}

/// The operands of the backward, as integers.
#[derive(Clone, Copy)]
struct Backward {
    hidden: usize,
    grad_hy: Rows,
    h: Rows,
    workspace: Rows,
    grad_input_gates: Rows,
    grad_hidden_gates: Rows,
    grad_h: Rows,
}

/// Runs the forward; false (nothing written) for a dtype other than f32 and f64.
///
/// # Safety
/// As [`crate::backend::Backend::gru_cell_forward`].
pub(crate) unsafe fn forward(a: &GruCellArgs) -> bool {
    let f = Forward {
        hidden: a.hidden,
        input_gates: rows(a.input_gates),
        hidden_gates: rows(a.hidden_gates),
        h: rows(a.h),
        workspace: rows_mut(a.workspace),
        hy: rows_mut(a.hy),
    };
    // SAFETY: forwarded from the caller.
    unsafe { run_rows(&f, a.dtype, a.rows, a.hidden) }
}

/// Runs the backward; false (nothing written) for a dtype other than f32 and f64.
///
/// # Safety
/// As [`crate::backend::Backend::gru_cell_backward`].
pub(crate) unsafe fn backward(a: &GruCellBackwardArgs) -> bool {
    let b = Backward {
        hidden: a.hidden,
        grad_hy: rows(a.grad_hy),
        h: rows(a.h),
        workspace: rows(a.workspace),
        grad_input_gates: rows_mut(a.grad_input_gates),
        grad_hidden_gates: rows_mut(a.grad_hidden_gates),
        grad_h: rows_mut(a.grad_h),
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
        // SAFETY: the gate columns `q·h + col..+n` (q < 3) and the state columns `col..+n`
        // of row `r` lie inside the operands (caller).
        let (ir, iz, inn, hr, hz, hn, hx) = unsafe {
            (
                load::<T>(f.input_gates, r, col, n),
                load::<T>(f.input_gates, r, h + col, n),
                load::<T>(f.input_gates, r, 2 * h + col, n),
                load::<T>(f.hidden_gates, r, col, n),
                load::<T>(f.hidden_gates, r, h + col, n),
                load::<T>(f.hidden_gates, r, 2 * h + col, n),
                load::<T>(f.h, r, col, n),
            )
        };
        let mut act = [[T::ZERO; LANE]; 3];
        let mut hy = [T::ZERO; LANE];
        for k in 0..LANE {
            // As composed: `σ(hr + ir)`, `σ(hz + iz)`, `tanh(in + hn·r)`, `(h - n)·z + n`.
            let rg = sigmoid(hr[k].add(ir[k]));
            let zg = sigmoid(hz[k].add(iz[k]));
            let ng = inn[k].add(hn[k].mul(rg)).tanh_vectorisable();
            act[0][k] = rg;
            act[1][k] = zg;
            act[2][k] = ng;
            hy[k] = hx[k].sub(ng).mul(zg).add(ng);
        }
        // SAFETY: these columns of row `r` are this thread's to write; the workspace may be
        // the input gates, read above.
        unsafe {
            for (q, v) in act.iter().enumerate() {
                store(v, f.workspace, r, q * h + col, n);
            }
            store(&hn, f.workspace, r, 3 * h + col, n);
            store(&hy, f.hy, r, col, n);
        }
        col += n;
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
        // SAFETY: the workspace columns `q·h + col..+n` (q < 4) and the state columns
        // `col..+n` of row `r` lie inside the operands (caller).
        let (rg, zg, ng, hn, hx, g) = unsafe {
            (
                load::<T>(b.workspace, r, col, n),
                load::<T>(b.workspace, r, h + col, n),
                load::<T>(b.workspace, r, 2 * h + col, n),
                load::<T>(b.workspace, r, 3 * h + col, n),
                load::<T>(b.h, r, col, n),
                load::<T>(b.grad_hy, r, col, n),
            )
        };
        let mut d = [[T::ZERO; LANE]; 4];
        let mut dh = [T::ZERO; LANE];
        for k in 0..LANE {
            // As composed: `dz = g·(h - n)`, `dn = g·(1 - z)`, then each times its slope
            // (`1 - n²`, `(1 - z)·z`, `(1 - r)·r`), and `dr` also times `hn` first.
            let dz = g[k].mul(hx[k].sub(ng[k]));
            let dn = g[k].mul(one.sub(zg[k]));
            let da_n = dn.mul(one.sub(ng[k].mul(ng[k])));
            let da_z = dz.mul(one.sub(zg[k]).mul(zg[k]));
            let da_r = da_n.mul(hn[k]).mul(one.sub(rg[k]).mul(rg[k]));
            d[0][k] = da_r;
            d[1][k] = da_z;
            d[2][k] = da_n;
            d[3][k] = da_n.mul(rg[k]);
            dh[k] = g[k].mul(zg[k]);
        }
        // SAFETY: these columns of row `r` are this thread's to write; absent outputs are
        // not written; `grad_input_gates` may be the workspace's columns, read above.
        unsafe {
            if b.grad_input_gates.present() {
                for (q, v) in d[..3].iter().enumerate() {
                    store(v, b.grad_input_gates, r, q * h + col, n);
                }
            }
            if b.grad_hidden_gates.present() {
                store(&d[0], b.grad_hidden_gates, r, col, n);
                store(&d[1], b.grad_hidden_gates, r, h + col, n);
                store(&d[3], b.grad_hidden_gates, r, 2 * h + col, n);
            }
            if b.grad_h.present() {
                store(&dh, b.grad_h, r, col, n);
            }
        }
        col += n;
    }
}
