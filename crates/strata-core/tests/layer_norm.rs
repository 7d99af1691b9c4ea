//! The fused layer norm (f32 and f64 rows on the CPU) against a reference computed here in
//! f64 from the definition: the output, the statistics' effect, and the gradients of the
//! input, the weight and the bias, for rows long and short (the scalar Welford path), with
//! and without affine parameters, and for an input that is not contiguous.

use strata_core::nn::functional::layer_norm;
use strata_core::{DType, Generator, Tensor};

/// `rows × cols` values in about [-2, 2], from `seed`.
fn values(rows: usize, cols: usize, seed: u64) -> Vec<f64> {
    let mut g = Generator::new(seed);
    (0..rows * cols).map(|_| 4.0 * g.next_f64() - 2.0).collect()
}

/// y, dx, dw, db of `sum(layer_norm(x)·c)` by the definition, in f64.
fn reference(x: &[f64], c: &[f64], w: &[f64], b: &[f64], cols: usize, eps: f64) -> [Vec<f64>; 4] {
    let rows = x.len() / cols;
    let (mut y, mut dx) = (vec![0.0; x.len()], vec![0.0; x.len()]);
    let (mut dw, mut db) = (vec![0.0; cols], vec![0.0; cols]);
    for r in 0..rows {
        let xr = &x[r * cols..][..cols];
        let mean = xr.iter().sum::<f64>() / cols as f64;
        let var = xr.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        let xhat: Vec<f64> = xr.iter().map(|v| (v - mean) * rstd).collect();
        // d/dxhat = c·w; dx = rstd·(g − mean(g) − xhat·mean(g·xhat)).
        let g: Vec<f64> = (0..cols).map(|j| c[r * cols + j] * w[j]).collect();
        let gm = g.iter().sum::<f64>() / cols as f64;
        let gxm = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / cols as f64;
        for j in 0..cols {
            y[r * cols + j] = xhat[j] * w[j] + b[j];
            dx[r * cols + j] = rstd * (g[j] - gm - xhat[j] * gxm);
            dw[j] += c[r * cols + j] * xhat[j];
            db[j] += c[r * cols + j];
        }
    }
    [y, dx, dw, db]
}

fn check(rows: usize, cols: usize, dtype: DType, affine: bool, transposed: bool) {
    let tol = if dtype == DType::F64 { 1e-10 } else { 2e-4 };
    let xv = values(rows, cols, 1);
    let cv = values(rows, cols, 2);
    let (wv, bv) = if affine {
        (values(1, cols, 3), values(1, cols, 4))
    } else {
        (vec![1.0; cols], vec![0.0; cols])
    };
    let tensor = |v: &[f64], shape: &[usize]| {
        Tensor::from_vec(v.to_vec(), shape)
            .and_then(|t| t.to(dtype))
            .expect("a tensor")
    };
    let x = if transposed {
        // The same values, held column-major: a transposed view.
        let mut t = vec![0.0; rows * cols];
        for r in 0..rows {
            for j in 0..cols {
                t[j * rows + r] = xv[r * cols + j];
            }
        }
        tensor(&t, &[cols, rows]).transpose(0, 1).expect("a view")
    } else {
        tensor(&xv, &[rows, cols])
    };
    let x = x.requires_grad_(true).expect("a leaf");
    let w = tensor(&wv, &[cols]).requires_grad_(true).expect("a leaf");
    let b = tensor(&bv, &[cols]).requires_grad_(true).expect("a leaf");
    let (wa, ba) = if affine {
        (Some(&w), Some(&b))
    } else {
        (None, None)
    };
    let eps = 1e-5;
    let y = layer_norm(&x, &[cols], wa, ba, eps).expect("layer norm");
    assert!(y.is_contiguous());
    y.mul(&tensor(&cv, &[rows, cols]))
        .and_then(|t| t.sum(None, false))
        .and_then(|t| t.backward())
        .expect("backward");
    let [ry, rdx, rdw, rdb] = reference(&xv, &cv, &wv, &bv, cols, eps);
    let read = |t: &Tensor| {
        t.to(DType::F64)
            .and_then(|t| t.to_vec::<f64>())
            .expect("values")
    };
    let what = format!("{rows}×{cols} {dtype:?} affine {affine} transposed {transposed}");
    let close = |got: Vec<f64>, want: &[f64], name: &str| {
        assert_eq!(got.len(), want.len(), "{name} of {what}");
        for (i, (g, r)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - r).abs() <= tol * (1.0 + r.abs()),
                "{name}[{i}] of {what}: {g} against {r}"
            );
        }
    };
    close(read(&y), &ry, "y");
    close(read(&x.grad().expect("dx")), &rdx, "dx");
    if affine {
        close(read(&w.grad().expect("dw")), &rdw, "dw");
        close(read(&b.grad().expect("db")), &rdb, "db");
    }
}

#[test]
fn the_fused_layer_norm_matches_the_definition() {
    for dtype in [DType::F32, DType::F64] {
        for (rows, cols) in [(37, 130), (768, 128), (5, 3), (1, 1), (64, 7), (3, 8)] {
            for affine in [true, false] {
                check(rows, cols, dtype, affine, false);
            }
        }
        check(33, 40, dtype, true, true);
    }
}
