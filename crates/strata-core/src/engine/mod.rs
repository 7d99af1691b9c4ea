//! The element-wise engine: one strided iterator that every element-wise op, copy and
//! reduction runs through.
//!
//! An op describes its operands (output first) as strides over a common broadcast shape; the
//! engine orders the dimensions as PyTorch does ([`crate::layout::order`]), coalesces
//! dimensions that are contiguous with each other, and walks the result as a sequence of
//! *runs*: `n` elements along the innermost dimension, each operand advancing by its own byte
//! stride. Kernels ([`kernels`]) work on runs, converting dtypes blockwise.

pub mod kernels;
pub mod pool;
pub mod reduce;
mod run;
mod tile;

pub use run::Plan;

use crate::dtype::DType;

/// Per-dimension sizes or strides of a loop: inline up to six dimensions, so planning a loop
/// does not allocate for tensors of ordinary rank.
pub use crate::layout::Dims;

/// One operand of an element-wise loop, described before ordering and coalescing.
#[derive(Debug, Clone)]
pub struct Operand {
    /// Address of the operand's first element.
    pub ptr: *mut u8,
    /// Strides in elements over the loop's shape (0 along broadcast dimensions).
    pub strides: Vec<usize>,
    /// The operand's dtype.
    pub dtype: DType,
}
