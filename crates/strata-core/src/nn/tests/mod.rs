//! Tests of the functional ops: forward values against small hand-computed cases, and every
//! backward against central finite differences in f64.

mod autocast;
mod batch_norm_fused;
mod cells;
mod class_losses;
mod conv_options;
mod conv_pool;
mod gru_layer;
mod layers;
mod lstm_layer;
mod memory;
mod pool_norm;

use crate::autograd::no_grad;
use crate::{DType, Generator, Result, Tensor};

/// An f64 leaf of `shape` with values from a fixed seed, requiring grad.
pub(super) fn leaf(shape: &[usize], seed: u64) -> Tensor {
    leaf_of(DType::F64, shape, seed)
}

/// A leaf of `dtype` and `shape` with values from a fixed seed, requiring grad.
pub(super) fn leaf_of(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, dtype, &mut Generator::new(seed))
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

/// Detached f32 copies of `inputs`, each a leaf requiring grad when `requires_grad`.
pub(super) fn f32_copies(inputs: &[Tensor], requires_grad: bool) -> Vec<Tensor> {
    inputs
        .iter()
        .map(|x| {
            let c = x.detach().unwrap().to(DType::F32).unwrap();
            if requires_grad {
                c.requires_grad_(true).unwrap()
            } else {
                c
            }
        })
        .collect()
}

/// A scalar that weighs every element of `outputs` differently (fixed random weights).
pub(super) fn weighted_sum(outputs: &[Tensor]) -> Result<Tensor> {
    let mut g = Generator::new(11);
    let mut total: Option<Tensor> = None;
    for t in outputs {
        let p = Tensor::randn_with(&t.shape(), t.dtype(), &mut g)?;
        let part = t.mul(&p)?.sum(None, false)?;
        total = Some(match total {
            Some(s) => s.add(&part)?,
            None => part,
        });
    }
    total.ok_or_else(|| crate::Error::from("no outputs to weigh"))
}

/// Every input's gradient (as f64 values) of [`weighted_sum`] of `f(inputs)`; `None` for
/// an input the outputs do not depend on.
pub(super) fn input_grads(
    inputs: &[Tensor],
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Vec<Option<Vec<f64>>> {
    for x in inputs {
        x.zero_grad(true).unwrap();
    }
    weighted_sum(&f(inputs).unwrap())
        .unwrap()
        .backward()
        .unwrap();
    inputs
        .iter()
        .map(|x| x.grad().map(|g| g.to_vec::<f64>().unwrap()))
        .collect()
}

/// An f64 tensor from values.
pub(super) fn f64s(values: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

/// Checks autograd's gradient of `sum(f(inputs) * probe)` for a fixed random `probe`
/// against central finite differences, for every input that requires grad.
pub(super) fn gradcheck(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    let out = f(inputs).unwrap();
    let probe = Tensor::randn_with(&out.shape(), DType::F64, &mut Generator::new(99)).unwrap();
    let weighted = |o: &Tensor| -> f64 {
        o.mul(&probe)
            .unwrap()
            .sum(None, false)
            .unwrap()
            .item::<f64>()
            .unwrap()
    };
    for x in inputs {
        x.zero_grad(true).unwrap();
    }
    out.mul(&probe)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let h = 1e-6;
    for (i, x) in inputs.iter().enumerate() {
        if !x.requires_grad() {
            continue;
        }
        let got = x.grad().expect("a gradient").to_vec::<f64>().unwrap();
        let base = x.to_vec::<f64>().unwrap();
        for k in 0..base.len() {
            let at = |d: f64| {
                let mut v = base.clone();
                v[k] += d;
                let moved = Tensor::from_vec(v, &x.shape()).unwrap();
                let args: Vec<Tensor> = inputs
                    .iter()
                    .enumerate()
                    .map(|(j, t)| {
                        if j == i {
                            moved.clone()
                        } else {
                            t.detach().unwrap()
                        }
                    })
                    .collect();
                weighted(&no_grad(|| f(&args)).unwrap())
            };
            let numeric = (at(h) - at(-h)) / (2.0 * h);
            assert!(
                (numeric - got[k]).abs() <= 1e-6 + 1e-5 * numeric.abs(),
                "input {i}, element {k}: autograd {} vs finite differences {numeric}",
                got[k]
            );
        }
    }
}

/// Asserts `got` equals `want` within `tol`.
pub(super) fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol, "{got:?} vs {want:?}");
    }
}
