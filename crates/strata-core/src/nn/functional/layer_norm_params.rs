//! The weight and bias gradients of `layer_norm` for an f16 or bf16 input, rounded as
//! PyTorch's CPU kernel rounds them.
//!
//! PyTorch splits the rows among its threads; each thread adds its rows' terms into a buffer
//! of the input's (half) dtype, computing each addition in f32 and rounding it to the half
//! dtype, and the buffers are then summed in f32 in thread order. strata follows the same
//! split over its own pool's threads, so the rounding matches PyTorch's run on as many
//! threads.

use crate::api::ternary::fused_mul_add;
use crate::num_threads;
use crate::{DType, Result, Tensor};

/// `(Σ g·x̂, Σ g)` over the rows of `g` and `xhat` (both f32, `[M, N]`), each a `[N]` f32
/// tensor accumulated as PyTorch's kernel does for an input of dtype `half`.
pub(super) fn half_param_grads(g: &Tensor, xhat: &Tensor, half: DType) -> Result<(Tensor, Tensor)> {
    half_param_grads_on(g, xhat, half, num_threads())
}

/// [`half_param_grads`] with the rows split among `threads` threads.
fn half_param_grads_on(
    g: &Tensor,
    xhat: &Tensor,
    half: DType,
    threads: usize,
) -> Result<(Tensor, Tensor)> {
    let (m, n) = (g.shape()[0], g.shape()[1]);
    let zeros = || Tensor::on(g.device()).zeros(&[n], DType::F32);
    let (dw, db) = (zeros()?, zeros()?);
    if m == 0 {
        return Ok((dw, db));
    }
    // One buffer pair for every thread's share, cleared in place between shares, so that
    // what is allocated does not depend on the number of threads (only the rounding does).
    let (bw, bb) = (zeros()?, zeros()?);
    // at::parallel_for with a grain of one row: min(threads, M) chunks of ceil(M / chunks).
    let chunk = m.div_ceil(threads.clamp(1, m));
    for start in (0..m).step_by(chunk) {
        bw.zero_()?;
        bb.zero_()?;
        for r in start..(start + chunk).min(m) {
            let (gr, xr) = (g.select(0, r as i64)?, xhat.select(0, r as i64)?);
            bw.copy_(&fused_mul_add(&gr, &xr, &bw)?.to(half)?)?;
            bb.copy_(&bb.add(&gr)?.to(half)?)?;
        }
        dw.add_(&bw)?;
        db.add_(&bb)?;
    }
    Ok((dw, db))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bf16(v: f32) -> f32 {
        Tensor::from_vec(vec![v], &[1])
            .and_then(|t| t.to(DType::BF16))
            .and_then(|t| t.to(DType::F32))
            .and_then(|t| t.to_vec::<f32>())
            .unwrap()[0]
    }

    #[test]
    fn each_thread_rounds_its_rows_to_half_and_the_buffers_add_in_f32() {
        // Four rows of one column: gradients that are exact in bf16, whose pairwise sums
        // are not.
        let g = [
            117.0f32 / 4096.0,
            79.0 / 16384.0,
            209.0 / 4096.0,
            165.0 / 2048.0,
        ];
        let gt = Tensor::from_vec(g.to_vec(), &[4, 1]).unwrap();
        let ones = Tensor::from_vec(vec![1.0f32; 4], &[4, 1]).unwrap();
        let sum = |threads| {
            let (dw, db) = half_param_grads_on(&gt, &ones, DType::BF16, threads).unwrap();
            (
                dw.to_vec::<f32>().unwrap()[0],
                db.to_vec::<f32>().unwrap()[0],
            )
        };
        // Two threads: rows {0, 1} and {2, 3}, each pair rounded once.
        let two = bf16(g[0] + g[1]) + bf16(g[2] + g[3]);
        assert_eq!(sum(2), (two, two));
        assert_eq!(two, 677.0 / 4096.0);
        // One thread: every partial sum rounded.
        let one = bf16(bf16(bf16(g[0] + g[1]) + g[2]) + g[3]);
        assert_eq!(sum(1), (one, one));
        // A thread per row: the exact f32 sum.
        let exact = ((g[0] + g[1]) + g[2]) + g[3];
        assert_eq!(sum(4), (exact, exact));
        assert_ne!(one, two);
        assert_ne!(two, exact);
    }
}
