//! `gradcheck`: compares the gradients autograd computes with central finite differences in
//! f64, as PyTorch's `torch.autograd.gradcheck` does (through a fixed random projection of
//! the output, so one backward checks every input element).

use crate::mode::no_grad;
use crate::random::Generator;
use crate::{DType, Error, Result, Tensor};

/// Tolerances and step for [`gradcheck`].
#[derive(Debug, Clone, Copy)]
pub struct GradcheckOptions {
    /// Finite-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-3,
        }
    }
}

/// Checks `f`'s backward at `inputs` (converted to f64; those that require grad are the ones
/// checked) against finite differences. `Ok` when every element agrees within tolerance;
/// otherwise an error naming the input, the element and both values.
///
/// ```
/// use strata_core::{autograd, Tensor};
/// let x = Tensor::from_vec(vec![0.3f64, -1.2, 2.0], &[3])?.requires_grad_(true)?;
/// autograd::gradcheck(|t| t[0].tanh()?.mul(&t[0]), &[x], Default::default())?;
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn gradcheck(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<()> {
    let xs: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            let x = no_grad(|| {
                if t.dtype().is_floating() {
                    t.to(DType::F64)?.contiguous()?.deep_clone()
                } else {
                    t.deep_clone()
                }
            })?;
            if t.requires_grad() {
                x.requires_grad_(true)?;
            }
            Ok(x)
        })
        .collect::<Result<_>>()?;
    let out = f(&xs)?;
    let mut gen = Generator::new(0x5eed);
    let weights = no_grad(|| Tensor::rand_with(&out.shape(), DType::F64, &mut gen))?;
    let project = |o: &Tensor| -> Result<f64> {
        no_grad(|| {
            o.to(DType::F64)?
                .mul(&weights)?
                .sum(None, false)?
                .item::<f64>()
        })
    };
    let loss = out.to(DType::F64)?.mul(&weights)?.sum(None, false)?;
    let checked: Vec<&Tensor> = xs.iter().filter(|x| x.requires_grad()).collect();
    if checked.is_empty() {
        return Err(Error::Autograd {
            message: "gradcheck: no input requires grad, so there is nothing to check".into(),
        });
    }
    let analytic = super::grad(&[&loss], &checked, true)?;
    for (k, (x, ga)) in checked.iter().zip(analytic).enumerate() {
        let ga = match ga {
            Some(g) => g.to(DType::F64)?.contiguous()?.to_vec::<f64>()?,
            None => vec![0.0; x.numel()],
        };
        let base = x.detached_alias();
        for (i, &a) in ga.iter().enumerate() {
            let at = |delta: f64| -> Result<f64> {
                let v = base.reshape(&[-1])?.select(0, i as i64)?;
                let old = v.item::<f64>()?;
                no_grad(|| v.fill_(old + delta))?;
                let y = no_grad(|| f(&xs));
                no_grad(|| v.fill_(old))?;
                project(&y?)
            };
            let numeric = (at(opts.eps)? - at(-opts.eps)?) / (2.0 * opts.eps);
            if (a - numeric).abs() > opts.atol + opts.rtol * numeric.abs() {
                return Err(Error::Autograd {
                    message: format!(
                        "gradcheck: input {k}, element {i}: autograd gives {a}, finite \
                         differences give {numeric}"
                    ),
                });
            }
        }
    }
    Ok(())
}
