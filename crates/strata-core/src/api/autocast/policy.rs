//! PyTorch's CPU autocast lists, by strata op name: which ops compute in the region's
//! dtype, which in f32, and which promote to their widest floating input.

use crate::{DType, Error, Result, Tensor};

/// What autocast does to one op's floating operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpCast {
    /// Cast to the region's dtype (bf16 or f16).
    LowerPrecision,
    /// Cast to f32.
    Fp32,
    /// Cast to the widest floating operand's dtype (f32 over the region's dtype); an operand
    /// of the other half dtype is refused.
    Promote,
}

/// The ops that compute in the region's dtype (PyTorch's CPU `lower_precision_fp` list,
/// as far as strata has the ops).
pub(crate) const LOWER_PRECISION: &[&str] = &[
    "matmul",
    "mm",
    "bmm",
    "addmm",
    "linear",
    "conv2d",
    "scaled_dot_product_attention",
];

/// The ops that compute in f32 (PyTorch's CPU `fp32` list, as far as strata has the ops).
pub(crate) const FP32: &[&str] = &[
    "prod",
    "mse_loss",
    "l1_loss",
    "nll_loss",
    "cross_entropy",
    "binary_cross_entropy_with_logits",
];

/// The ops that promote to their widest floating operand (PyTorch's CPU `promote` list, as
/// far as strata has the ops).
pub(crate) const PROMOTE: &[&str] = &["cat", "stack"];

/// What autocast does to `op`, or `None` when `op` runs in its inputs' dtypes.
pub(crate) fn op_cast(op: &str) -> Option<OpCast> {
    if LOWER_PRECISION.contains(&op) {
        Some(OpCast::LowerPrecision)
    } else if FP32.contains(&op) {
        Some(OpCast::Fp32)
    } else if PROMOTE.contains(&op) {
        Some(OpCast::Promote)
    } else {
        None
    }
}

/// Whether autocast may cast an operand of dtype `d`: floating, and not f64.
pub(crate) fn eligible(d: DType) -> bool {
    d.is_floating() && d != DType::F64
}

/// The dtype `op`'s eligible operands are cast to inside a `region` region, or `None` when
/// autocast leaves `op` alone. `Err` for a promote op given an operand of the other half
/// dtype.
pub(crate) fn target_dtype(
    op: &'static str,
    region: DType,
    inputs: &[&Tensor],
) -> Result<Option<DType>> {
    Ok(match op_cast(op) {
        None => None,
        Some(OpCast::LowerPrecision) => Some(region),
        Some(OpCast::Fp32) => Some(DType::F32),
        Some(OpCast::Promote) => Some(promote(op, region, inputs)?),
    })
}

/// PyTorch's `promote_type`: starting from the region's dtype, each eligible operand in
/// order widens it to f32 when either is f32; two of the region's dtype stay; any other pair
/// (the other half dtype while the type is still the region's) is refused.
fn promote(op: &'static str, region: DType, inputs: &[&Tensor]) -> Result<DType> {
    let mut current = region;
    for (i, t) in inputs.iter().enumerate() {
        let next = t.dtype();
        if !eligible(next) {
            continue;
        }
        if current == DType::F32 || next == DType::F32 {
            current = DType::F32;
        } else if next != region {
            return Err(Error::dtype(
                op,
                format!(
                    "inside a {region} autocast region, input {i} is {next}: autocast joins \
                     {region} and f32 tensors, not {next} ones"
                ),
                Some(&format!(
                    "convert the input with .to(DType::{}) or .to(DType::F32) first, or \
                     run the op outside the region",
                    region.name().to_uppercase()
                )),
            ));
        }
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(d: DType) -> Tensor {
        Tensor::zeros(&[1], d).unwrap()
    }

    #[test]
    fn the_lists_are_disjoint() {
        for op in LOWER_PRECISION {
            assert!(!FP32.contains(op) && !PROMOTE.contains(op), "{op}");
        }
        for op in FP32 {
            assert!(!PROMOTE.contains(op), "{op}");
        }
        assert_eq!(op_cast("softmax"), None);
        assert_eq!(op_cast("linear"), Some(OpCast::LowerPrecision));
        assert_eq!(op_cast("prod"), Some(OpCast::Fp32));
        assert_eq!(op_cast("cat"), Some(OpCast::Promote));
    }

    #[test]
    fn promote_follows_pytorch_in_order() {
        use DType::*;
        let p = |region, ds: &[DType]| {
            let ts: Vec<Tensor> = ds.iter().map(|&d| t(d)).collect();
            let refs: Vec<&Tensor> = ts.iter().collect();
            promote("cat", region, &refs)
        };
        assert_eq!(p(BF16, &[BF16, BF16]).unwrap(), BF16);
        assert_eq!(p(BF16, &[F32, BF16]).unwrap(), F32);
        assert_eq!(p(BF16, &[BF16, F32]).unwrap(), F32);
        // f64 and integers take no part.
        assert_eq!(p(BF16, &[F64, BF16]).unwrap(), BF16);
        assert_eq!(p(BF16, &[I64, I64]).unwrap(), BF16);
        // The other half dtype is refused while the type is still the region's...
        assert!(p(BF16, &[F16, F16]).is_err());
        assert!(p(BF16, &[F16, F32]).is_err());
        assert!(p(BF16, &[F64, F16]).is_err());
        assert!(p(F16, &[BF16, F16]).is_err());
        // ...and accepted once an f32 came first, as in PyTorch.
        assert_eq!(p(BF16, &[F32, F16]).unwrap(), F32);
        assert_eq!(p(F16, &[F32, BF16]).unwrap(), F32);
    }
}
