//! Kernel descriptors: the names by which an op asks a backend for a kernel. They say what to
//! compute, never how; every backend implements each of them.

use crate::Scalar;

/// A floating function: integer inputs compute in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatOp {
    /// `e^x`.
    Exp,
    /// `ln x`.
    Log,
    /// `√x`.
    Sqrt,
    /// `1/√x`.
    Rsqrt,
    /// `sin x`.
    Sin,
    /// `cos x`.
    Cos,
    /// `tanh x`.
    Tanh,
    /// `1/(1+e^-x)`.
    Sigmoid,
    /// `x/2 (1 + erf(x/√2))`.
    Gelu,
    /// `x sigmoid(x)`.
    Silu,
    /// d/dx gelu(x) = Φ(x) + x φ(x), for gelu's backward.
    GeluDerivative,
}

/// A unary op that keeps the dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SameOp {
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `max(x, 0)`, NaN kept.
    Relu,
    /// `x` limited to `[min, max]` (either bound may be absent).
    Clamp(Option<Scalar>, Option<Scalar>),
}
