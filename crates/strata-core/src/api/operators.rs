//! Rust's arithmetic operators on tensors: `+ - * /` and unary `-`, each returning
//! `Result<Tensor>` (a shape or dtype error is an `Err`, never a panic).
//!
//! Operands may be `Tensor` or `&Tensor` on either side, a number (`f64`, `i64`) on the
//! right, and a `Result<Tensor>` on the left with a tensor on the right, so that expressions
//! chain and the first error wins:
//!
//! ```
//! use strata_core::{Tensor, DType};
//! let a = Tensor::ones(&[2, 3], DType::F32)?;
//! let b = Tensor::arange(3, DType::F32)?;
//! let c = ((&a + &b) * &a - &b)?;                 // broadcasting, chained through Result
//! assert_eq!(c.to_vec::<f32>()?, vec![1.0; 6]);
//! let d = (&c * 2.0)?;                              // a Python-style scalar: stays f32
//! assert_eq!(d.dtype(), DType::F32);
//! assert!((&a + &Tensor::ones(&[4], DType::F32)?).is_err()); // shapes [2, 3] and [4]
//! # Ok::<(), strata_core::Error>(())
//! ```

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::{Result, Tensor};

macro_rules! tensor_operator {
    ($Trait:ident, $method:ident) => {
        impl $Trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }

        impl $Trait<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(self, &rhs)
            }
        }

        impl $Trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(&self, rhs)
            }
        }

        impl $Trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(&self, &rhs)
            }
        }

        impl $Trait<f64> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: f64) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }

        impl $Trait<f64> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: f64) -> Result<Tensor> {
                Tensor::$method(&self, rhs)
            }
        }

        impl $Trait<i64> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: i64) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }

        impl $Trait<i64> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: i64) -> Result<Tensor> {
                Tensor::$method(&self, rhs)
            }
        }

        impl $Trait<&Tensor> for Result<Tensor> {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(&self?, rhs)
            }
        }

        impl $Trait<Tensor> for Result<Tensor> {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(&self?, &rhs)
            }
        }

        impl $Trait<Result<Tensor>> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Result<Tensor>) -> Result<Tensor> {
                Tensor::$method(self, &rhs?)
            }
        }

        impl $Trait<Result<Tensor>> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Result<Tensor>) -> Result<Tensor> {
                Tensor::$method(&self, &rhs?)
            }
        }
    };
}

tensor_operator!(Add, add);
tensor_operator!(Sub, sub);
tensor_operator!(Mul, mul);
tensor_operator!(Div, div);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(&self)
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Error, Tensor};

    fn t(v: &[f32]) -> Tensor {
        Tensor::from_slice(v, &[v.len()]).unwrap()
    }

    #[test]
    fn operators_match_the_methods_and_chain() {
        let (a, b) = (t(&[1.0, 2.0]), t(&[3.0, 5.0]));
        assert_eq!((&a + &b).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 7.0]);
        assert_eq!((&b - &a).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
        assert_eq!(
            (&a * 2i64).unwrap().to_vec::<f32>().unwrap(),
            vec![2.0, 4.0]
        );
        assert_eq!((&b / 2.0).unwrap().to_vec::<f32>().unwrap(), vec![1.5, 2.5]);
        let chained = (&a + &b) * &a / a.clone() - b.clone();
        assert_eq!(chained.unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
        assert_eq!((-&a).unwrap().to_vec::<f32>().unwrap(), vec![-1.0, -2.0]);
        let ints = Tensor::arange(3, DType::I64).unwrap();
        assert_eq!((&ints / 2i64).unwrap().dtype(), DType::F32, "true division");
    }

    #[test]
    fn the_first_error_wins_and_nothing_panics() {
        let a = t(&[1.0, 2.0]);
        let bad = t(&[1.0, 2.0, 3.0]);
        let r = (&a + &bad) * &a + &a;
        assert!(matches!(r, Err(Error::Shape { .. })), "{r:?}");
        let r = &a * ((&a - &bad) + &a);
        assert!(matches!(r, Err(Error::Shape { .. })));
    }
}
