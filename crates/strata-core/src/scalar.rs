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
