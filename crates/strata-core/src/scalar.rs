//! Numbers given to ops directly (`x.add_scalar(2)`), which keep their kind: `2` and `2.0`
//! promote differently, as Python numbers do in PyTorch.

use crate::dtype::{DType, Element, Wide};

/// A number that is not a tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// A boolean (`True`).
    Bool(bool),
    /// An integer (`2`): keeps integer tensors integral.
    Int(i64),
    /// A float (`2.0`): makes integer tensors floating.
    Float(f64),
}

impl Scalar {
    /// The dtype this number has when it takes part in type promotion: bool, i64, or the
    /// default float type f32.
    pub fn promotion_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::I64,
            Scalar::Float(_) => DType::F32,
        }
    }

    /// The number converted to element type `T` with cast semantics.
    pub fn to<T: Element>(self) -> T {
        T::from_wide(self.wide())
    }

    /// The number as a [`Wide`] value.
    pub fn wide(self) -> Wide {
        match self {
            Scalar::Bool(b) => Wide::Bool(b),
            Scalar::Int(i) => Wide::Int(i),
            Scalar::Float(f) => Wide::Float(f),
        }
    }

    /// Whether converting the number into `dtype` overflows, by PyTorch's checked conversion
    /// of a number given for a whole tensor (`fill_`, `full`, `masked_fill`): a floating
    /// dtype refuses finite numbers beyond its largest (infinities and NaN pass); an integer
    /// dtype refuses NaN, infinities and floats outside its range (truncated toward zero),
    /// and integers outside its range, except that an unsigned dtype takes a negative integer
    /// as small in magnitude as its largest value (it wraps: -1 is 255 for u8); bool takes
    /// anything.
    pub fn overflows(self, dtype: DType) -> bool {
        let f = match self {
            Scalar::Bool(_) => return false,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        };
        let (lo, hi): (f64, f64) = match dtype {
            DType::Bool => return false,
            DType::F16 => (-65504.0, 65504.0),
            DType::BF16 => (-3.3895313892515355e38, 3.3895313892515355e38),
            DType::F32 => (f32::MIN as f64, f32::MAX as f64),
            DType::F64 => return false,
            DType::U8 => (0.0, 255.0),
            DType::I32 => (i32::MIN as f64, i32::MAX as f64),
            DType::I64 => (i64::MIN as f64, i64::MAX as f64),
        };
        if dtype.is_floating() {
            return f.is_finite() && (f < lo || f > hi);
        }
        match self {
            Scalar::Int(i) => match dtype {
                DType::U8 => !(-255..=255).contains(&i),
                DType::I32 => i32::try_from(i).is_err(),
                _ => false,
            },
            // Integers: a float may carry a fraction that truncation drops.
            _ => f.is_nan() || f < lo || f >= hi + 1.0,
        }
    }

    /// Refuses a fill value that overflows `dtype`, as PyTorch's `fill_` does, except that
    /// (as PyTorch's single-element path) one f16 or bf16 element takes any value, rounded.
    pub(crate) fn check_fill(
        self,
        op: &'static str,
        dtype: DType,
        numel: usize,
    ) -> crate::Result<()> {
        if numel == 1 && matches!(dtype, DType::F16 | DType::BF16) {
            return Ok(());
        }
        self.check_fits(op, dtype)
    }

    /// `Err` when the number does not fit `dtype` (see [`Scalar::overflows`]).
    pub(crate) fn check_fits(self, op: &'static str, dtype: DType) -> crate::Result<()> {
        if !self.overflows(dtype) {
            return Ok(());
        }
        Err(crate::Error::argument(
            op,
            format!(
                "the value {} cannot be converted to {dtype} without overflow",
                self.to_f64()
            ),
            Some("pass a value within the dtype's range, or convert the tensor first"),
        ))
    }

    /// The number as `f64`.
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Self {
        Scalar::Float(v)
    }
}
impl From<f32> for Scalar {
    fn from(v: f32) -> Self {
        Scalar::Float(v as f64)
    }
}
impl From<i64> for Scalar {
    fn from(v: i64) -> Self {
        Scalar::Int(v)
    }
}
impl From<i32> for Scalar {
    fn from(v: i32) -> Self {
        Scalar::Int(v as i64)
    }
}
impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::Bool(v)
    }
}
