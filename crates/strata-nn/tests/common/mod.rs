//! Helpers shared by the tests that compare with PyTorch's recorded values.

use strata_core::Tensor;

/// Asserts `got` has `want`'s shape and f32 values within 1e-5 + 1e-4·|want|.
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 + 1e-4 * b.abs(),
            "{what}[{k}]: strata {a}, PyTorch {b}"
        );
    }
}
