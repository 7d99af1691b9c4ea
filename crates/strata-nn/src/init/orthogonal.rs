//! The orthogonal initialiser's host computation: a Gram–Schmidt QR of a Gaussian matrix.

/// Orthonormalises the columns of the row-major `rows × cols` matrix `a` (`rows >= cols`)
/// in place by modified Gram–Schmidt, giving `Q` of its QR decomposition with `R`'s diagonal
/// made positive (PyTorch multiplies `Q` by the signs of `R`'s diagonal, which is the same
/// thing). A column that is numerically dependent on the previous ones is replaced by a unit
/// vector orthogonal to them.
pub(crate) fn orthonormal_columns(a: &mut [f64], rows: usize, cols: usize) {
    for j in 0..cols {
        for k in 0..j {
            let dot: f64 = (0..rows).map(|i| a[i * cols + j] * a[i * cols + k]).sum();
            for i in 0..rows {
                a[i * cols + j] -= dot * a[i * cols + k];
            }
        }
        let mut norm: f64 = (0..rows)
            .map(|i| a[i * cols + j].powi(2))
            .sum::<f64>()
            .sqrt();
        if norm < 1e-12 {
            // Start over from a basis vector and orthogonalise it (rows >= cols, so one of
            // the first j + 1 basis vectors is independent of the previous columns).
            for e in 0..rows {
                for i in 0..rows {
                    a[i * cols + j] = f64::from(u8::from(i == e));
                }
                for k in 0..j {
                    let dot: f64 = (0..rows).map(|i| a[i * cols + j] * a[i * cols + k]).sum();
                    for i in 0..rows {
                        a[i * cols + j] -= dot * a[i * cols + k];
                    }
                }
                norm = (0..rows)
                    .map(|i| a[i * cols + j].powi(2))
                    .sum::<f64>()
                    .sqrt();
                if norm > 1e-6 {
                    break;
                }
            }
        }
        for i in 0..rows {
            a[i * cols + j] /= norm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_become_orthonormal_even_when_dependent() {
        // The third column is the sum of the first two.
        let mut a = vec![1.0, 2.0, 3.0, 0.0, 1.0, 1.0, 2.0, 0.0, 2.0, 1.0, 1.0, 2.0];
        orthonormal_columns(&mut a, 4, 3);
        for p in 0..3 {
            for q in 0..3 {
                let dot: f64 = (0..4).map(|i| a[i * 3 + p] * a[i * 3 + q]).sum();
                let want = if p == q { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-9, "({p},{q}) {dot}");
            }
        }
    }
}
