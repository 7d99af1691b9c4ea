//! f16 and bf16 products: summed in f32 and rounded once, on every path (the `gemm` crate's
//! f16 kernel, bounded f32 blocks), with working room of a bounded size.

use std::sync::Arc;

use half::{bf16, f16};
use strata_alloc::{DeviceAllocator, HostAllocator};

use crate::backend::kernel::{HalfBlock, HALF_BLOCK, HALF_SLOTS, HALF_SLOT_BYTES};
use crate::{DType, Tensor};

/// Multiples of 1/8 in [-2, 2] (exact in f16 and bf16): their products' sums are exact in
/// f32 whatever the order they are added in, so the product rounded once is known exactly.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 33) as f32 / 8.0 - 2.0
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(values(n, seed), shape)
        .unwrap()
        .to(dtype)
        .unwrap()
}

fn logical(t: &Tensor) -> Vec<f32> {
    t.to(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// Rounds `v` to `dtype` (f16 or bf16) and back.
fn round(v: f32, dtype: DType) -> f32 {
    match dtype {
        DType::F16 => f16::from_f32(v).to_f32(),
        _ => bf16::from_f32(v).to_f32(),
    }
}

/// `beta·c + alpha·(a @ b)` for `a` `[batch.., m, k]` and `b` `[batch.., k, n]` (same batch)
/// or `[k, n]`, `c` broadcastable to `[m, n]`: products summed exactly, then scaled and added
/// in f32 and rounded once, as PyTorch's CPU kernels compute in half precision.
fn reference(a: &Tensor, b: &Tensor, c: Option<(&Tensor, f32)>, alpha: f32) -> Vec<f32> {
    let (sa, sb) = (a.shape(), b.shape());
    let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
    let batches: usize = sa[..sa.len() - 2].iter().product();
    let b_batched = sb.len() > 2;
    let (va, vb) = (logical(a), logical(b));
    let vc = c.map(|(c, beta)| {
        let full = c
            .expand(&[m as i64, n as i64])
            .unwrap()
            .contiguous()
            .unwrap();
        (logical(&full), beta)
    });
    let mut out = Vec::with_capacity(batches * m * n);
    for e in 0..batches {
        let ao = e * m * k;
        let bo = if b_batched { e * k * n } else { 0 };
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|l| va[ao + i * k + l] as f64 * vb[bo + l * n + j] as f64)
                    .sum();
                let mut v = alpha * s as f32;
                if let Some((vc, beta)) = &vc {
                    v += beta * vc[i * n + j];
                }
                out.push(round(v, a.dtype()));
            }
        }
    }
    out
}

fn assert_rounded_once(what: &str, got: &Tensor, want: &[f32]) {
    let got = logical(got);
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (x, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g == w,
            "{what}: element {x} is {g}, the product rounded once is {w}"
        );
    }
}

/// Plain products of several shapes: on f16's own kernel (depth 3..=512, two rows and
/// columns at least), on f32 blocks (bf16, deep f16, vectors), several blocks each way.
#[test]
fn half_products_round_the_f32_sum_once() {
    let shapes = [
        (2, 3, 2),
        (5, 1, 7),
        (4, 2, 3),
        (33, 100, 40),
        (1, 300, 40),
        (40, 300, 1),
        (70, 600, 300),
        (300, 257, 260),
    ];
    for dtype in [DType::F16, DType::BF16] {
        for (seed, &(m, k, n)) in shapes.iter().enumerate() {
            let a = tensor(&[m, k], 2 * seed as u64, dtype);
            let b = tensor(&[k, n], 2 * seed as u64 + 1, dtype);
            let got = a.matmul(&b).unwrap();
            let what = format!("{dtype:?} {m}x{k} @ {k}x{n}");
            assert_rounded_once(&what, &got, &reference(&a, &b, None, 1.0));
        }
    }
}

/// Transposed, strided and broadcast operands are read where they lie.
#[test]
fn half_products_read_strided_operands() {
    for dtype in [DType::F16, DType::BF16] {
        for (m, k, n) in [(20, 40, 30), (270, 300, 20)] {
            // Transposed.
            let at = tensor(&[k, m], 1, dtype).t().unwrap();
            let bt = tensor(&[n, k], 2, dtype).t().unwrap();
            let want = reference(&at, &bt, None, 1.0);
            assert_rounded_once("a.t() @ b.t()", &at.matmul(&bt).unwrap(), &want);
            // Every other row and column.
            let a2 = tensor(&[2 * m, 2 * k], 3, dtype)
                .slice(0, None, None, 2)
                .unwrap()
                .slice(1, None, None, 2)
                .unwrap();
            let b2 = tensor(&[k, 3 * n], 4, dtype)
                .slice(1, None, None, 3)
                .unwrap();
            let want = reference(&a2, &b2, None, 1.0);
            assert_rounded_once("strided", &a2.matmul(&b2).unwrap(), &want);
            // A broadcast row as the left operand.
            let row = tensor(&[1, k], 5, dtype)
                .expand(&[m as i64, k as i64])
                .unwrap();
            let b = tensor(&[k, n], 6, dtype);
            let want = reference(&row, &b, None, 1.0);
            assert_rounded_once("expanded", &row.matmul(&b).unwrap(), &want);
        }
    }
}

/// `addmm`'s `beta·c` and `alpha` are applied in f32 before the one rounding, whatever path
/// the product takes (an `alpha` that is no f16, or an added input, leaves f16's kernel).
#[test]
fn half_addmm_scales_and_adds_before_rounding() {
    for dtype in [DType::F16, DType::BF16] {
        for (m, k, n) in [(6, 20, 9), (30, 520, 270)] {
            let a = tensor(&[m, k], 7, dtype);
            let b = tensor(&[k, n], 8, dtype);
            let c_row = tensor(&[n], 9, dtype);
            let c_full = tensor(&[m, n], 10, dtype);
            for (beta, alpha) in [(0.5f32, 2.0f32), (1.0, 0.1), (0.0, 1.0), (0.25, 0.0)] {
                for c in [&c_row, &c_full] {
                    let got = c.addmm(&a, &b, beta as f64, alpha as f64).unwrap();
                    let want = reference(&a, &b, Some((c, beta)), alpha);
                    let what = format!("{dtype:?} addmm {m}x{k}x{n} beta {beta} alpha {alpha}");
                    assert_rounded_once(&what, &got, &want);
                }
            }
        }
        // Nothing to multiply: beta·c, rounded.
        let c = tensor(&[3, 4], 11, dtype);
        let empty = |s: &[usize]| Tensor::zeros(s, dtype).unwrap();
        let got = c.addmm(&empty(&[3, 0]), &empty(&[0, 4]), 0.5, 1.0).unwrap();
        let want = reference(&empty(&[3, 0]), &empty(&[0, 4]), Some((&c, 0.5)), 1.0);
        assert_rounded_once("k = 0", &got, &want);
    }
}

/// Batches of products run side by side (each in a slot of its own) or one after the other.
#[test]
fn half_batched_products_round_once() {
    for dtype in [DType::F16, DType::BF16] {
        // Small products, enough of them to run side by side; then large ones in turn.
        for (batch, m, k, n) in [(6, 40, 50, 30), (5, 3, 600, 4), (2, 130, 300, 140)] {
            let a = tensor(&[batch, m, k], 12, dtype);
            let b = tensor(&[batch, k, n], 13, dtype);
            let want = reference(&a, &b, None, 1.0);
            assert_rounded_once("bmm", &a.bmm(&b).unwrap(), &want);
            // One right-hand matrix for the whole batch (folded into the rows).
            let b2 = tensor(&[k, n], 14, dtype);
            let want = reference(&a, &b2, None, 1.0);
            assert_rounded_once("batch @ matrix", &a.matmul(&b2).unwrap(), &want);
        }
    }
}

/// Sums that an f16 accumulator, or an output rounded after each depth block, gets wrong:
/// the f32 sum is rounded once.
#[test]
fn half_sums_are_not_rounded_along_the_way() {
    let k = 1030;
    // 2048 + 1029 ones: 3077 rounds once to 3076 in f16 (its step there is 2); rounded
    // after 512 terms it would be 3078, accumulated in f16 it would stay at 2048.
    let mut col = vec![1.0f32; k];
    col[0] = 2048.0;
    let a = Tensor::ones(&[2, k], DType::F16).unwrap();
    let b = Tensor::from_vec(col.repeat(2), &[2, k])
        .unwrap()
        .t()
        .unwrap()
        .to(DType::F16)
        .unwrap();
    let got = a.matmul(&b).unwrap();
    assert_eq!(logical(&got), vec![3076.0; 4]);
    // Terms of 300 past f16's largest finite value (250 of them: 75000), as many of -300,
    // then two of 1: an f16 running sum, or one rounded after a depth block, is infinite.
    for k in [502usize, 1002] {
        let half = (k - 2) / 2;
        let mut col = vec![300.0f32; half];
        col.extend(vec![-300.0; half]);
        col.extend([1.0, 1.0]);
        let b = Tensor::from_vec(col, &[k, 1])
            .unwrap()
            .expand(&[k as i64, 3])
            .unwrap()
            .to(DType::F16)
            .unwrap();
        let a = Tensor::ones(&[3, k], DType::F16).unwrap();
        assert_eq!(logical(&a.matmul(&b).unwrap()), vec![2.0; 9], "k = {k}");
    }
}

/// The working room comes from the allocator, is returned when the product is done, and is
/// bounded whatever the sizes: none on f16's own kernel, a slot per product run side by side
/// for small batches, one slot of at most `HALF_SLOT_BYTES` for a large product.
#[test]
fn half_working_room_is_bounded_and_allocated() {
    let host: Arc<dyn DeviceAllocator> = Arc::new(HostAllocator::new());
    crate::with_allocator(&host, || {
        let peak = |a: &Tensor, b: &Tensor| {
            host.reset_peak_memory_stats();
            let before = host.memory_allocated();
            let c = a.matmul(b).unwrap();
            let out = c.numel() * c.dtype().size();
            assert_eq!(host.memory_allocated() - before, out);
            host.max_memory_allocated() - before - out
        };
        let ones = |s: &[usize], d: DType| Tensor::ones(s, d).unwrap();
        // f16 on its own kernel: nothing beside the output.
        let (a, b) = (
            ones(&[3, 64, 32], DType::F16),
            ones(&[3, 32, 16], DType::F16),
        );
        assert_eq!(peak(&a, &b), 0);
        // bf16, three small products: a slot each.
        let (a, b) = (
            ones(&[3, 64, 32], DType::BF16),
            ones(&[3, 32, 16], DType::BF16),
        );
        let slot = HalfBlock::for_product(64, 16, 32).len() * 4;
        assert_eq!(peak(&a, &b), 3 * slot);
        // Many small products: at most HALF_SLOTS slots.
        let (a, b) = (ones(&[9, 8, 8], DType::BF16), ones(&[9, 8, 8], DType::BF16));
        let slot = HalfBlock::for_product(8, 8, 8).len() * 4;
        assert_eq!(peak(&a, &b), HALF_SLOTS * slot);
        // One large product: one full slot, far less than its operands widened.
        let (m, k, n) = (300, 600, 520);
        for dtype in [DType::BF16, DType::F16] {
            let (a, b) = (ones(&[m, k], dtype), ones(&[k, n], dtype));
            assert_eq!(peak(&a, &b), HALF_SLOT_BYTES);
        }
        assert_eq!(HALF_SLOT_BYTES, 3 * HALF_BLOCK * HALF_BLOCK * 4);
    });
}
