//! Neural-network building blocks: the functional ops of `torch.nn.functional`, each with
//! its backward.
//!
//! ```
//! use strata_core::nn::functional::{cross_entropy, linear, Reduction};
//! use strata_core::{DType, Tensor};
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, -1.0, 0.5], &[2, 2])?;
//! let w = Tensor::from_vec(vec![0.5f32, -0.5, 1.0, 2.0, 0.0, 1.0], &[3, 2])?.requires_grad_(true)?;
//! let target = Tensor::from_vec(vec![1i64, 2], &[2])?;
//! let loss = cross_entropy(&linear(&x, &w, None)?, &target, Reduction::Mean)?;
//! loss.backward()?;
//! assert_eq!(w.grad().unwrap().shape().as_slice(), [3, 2]);
//! # Ok::<(), strata_core::Error>(())
//! ```

pub mod functional;

#[cfg(test)]
mod tests;
