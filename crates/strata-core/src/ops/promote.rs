//! PyTorch's type promotion across tensors and numbers.
//!
//! Dimensioned tensors outrank 0-d tensors, which outrank plain numbers; a lower-priority
//! operand only matters when it is of a higher *category* (bool < integer < floating). So
//! `i32 tensor + 2` stays i32, `i32 tensor + 2.0` is f32, `f16 tensor + f64 0-d tensor` stays
//! f16, and `i32 tensor + f64 0-d tensor` is f64.

use crate::{DType, Scalar, Tensor};

/// One operand of a promoting op.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// A tensor (its dimension decides its priority).
    Tensor(&'a Tensor),
    /// A number.
    Scalar(Scalar),
}

fn promote_opt(a: Option<DType>, b: DType) -> Option<DType> {
    Some(a.map_or(b, |a| a.promote(b)))
}

fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) => {
            if h.is_floating() {
                Some(h)
            } else if h == DType::Bool || l.is_floating() {
                Some(h.promote(l))
            } else {
                Some(h)
            }
        }
    }
}

/// The dtype a computation over `args` is done in (PyTorch's `result_type`).
pub fn result_type(args: &[Arg<'_>]) -> DType {
    let (mut dim, mut zero, mut wrapped) = (None, None, None);
    for a in args {
        match a {
            Arg::Tensor(t) if t.dim() > 0 => dim = promote_opt(dim, t.dtype()),
            Arg::Tensor(t) => zero = promote_opt(zero, t.dtype()),
            Arg::Scalar(s) => wrapped = promote_opt(wrapped, s.promotion_dtype()),
        }
    }
    combine(dim, combine(zero, wrapped)).unwrap_or(DType::F32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    fn t(shape: &[usize], d: DType) -> Tensor {
        Tensor::zeros(shape, d).unwrap()
    }

    #[test]
    fn priority_and_categories() {
        let i32v = t(&[2], I32);
        assert_eq!(
            result_type(&[Arg::Tensor(&i32v), Arg::Scalar(Scalar::Int(2))]),
            I32
        );
        assert_eq!(
            result_type(&[Arg::Tensor(&i32v), Arg::Scalar(Scalar::Float(2.0))]),
            F32
        );
        let f16v = t(&[2], F16);
        let f64s = t(&[], F64);
        assert_eq!(result_type(&[Arg::Tensor(&f16v), Arg::Tensor(&f64s)]), F16);
        assert_eq!(result_type(&[Arg::Tensor(&i32v), Arg::Tensor(&f64s)]), F64);
        let b = t(&[2], Bool);
        assert_eq!(
            result_type(&[Arg::Tensor(&b), Arg::Scalar(Scalar::Int(1))]),
            I64
        );
        let u8v = t(&[2], U8);
        let i64s = t(&[], I64);
        assert_eq!(result_type(&[Arg::Tensor(&u8v), Arg::Tensor(&i64s)]), U8);
        assert_eq!(result_type(&[Arg::Tensor(&u8v), Arg::Tensor(&i32v)]), I32);
    }
}
