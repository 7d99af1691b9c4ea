//! strata's one error type. Every variant names the op, what went wrong, and how to fix it.

use strata_alloc::AllocError;

/// The result type of every fallible strata call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn hint_text(h: &Option<String>) -> String {
    match h {
        Some(h) => format!(". Hint: {h}"),
        None => String::new(),
    }
}

/// Everything strata can refuse. After any of these, the tensors involved and the allocated
/// bytes are exactly as they were before the call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Autograd refused: a second backward through freed nodes, a saved tensor modified in
    /// place, an in-place write autograd cannot record, a tensor that needs no gradient.
    #[error("{message}")]
    Autograd {
        /// What went wrong and how to fix it.
        message: String,
    },
    /// Shapes that do not fit together (broadcasting, element counts, out= shapes).
    #[error("{op}: {message}{}", hint_text(hint))]
    Shape {
        /// The op that refused.
        op: &'static str,
        /// What is wrong, naming the shapes.
        message: String,
        /// The shapes involved.
        shapes: Vec<Vec<usize>>,
        /// How to fix it.
        hint: Option<String>,
    },
    /// A view whose strides cannot describe the requested shape without a copy.
    #[error(
        "{op}: a tensor of shape {shape:?} with strides {strides:?} cannot be viewed as \
         {target:?} without copying (at least one new dimension spans memory that is not \
         evenly strided). Hint: use reshape(), which copies when it must, or call \
         contiguous() first"
    )]
    View {
        /// The op that refused.
        op: &'static str,
        /// Shape of the input.
        shape: Vec<usize>,
        /// Strides of the input, in elements.
        strides: Vec<usize>,
        /// The requested shape.
        target: Vec<usize>,
    },
    /// A dtype the op cannot take or produce.
    #[error("{op}: {message}{}", hint_text(hint))]
    DType {
        /// The op that refused.
        op: &'static str,
        /// What is wrong, naming the dtypes.
        message: String,
        /// How to fix it.
        hint: Option<String>,
    },
    /// An index outside a dimension.
    #[error(
        "{op}: index {index} is out of range for dimension {dim} of size {size} (valid: \
         {lo}..={hi})",
        lo = -(*size as i64),
        hi = *size as i64 - 1
    )]
    Index {
        /// The op that refused.
        op: &'static str,
        /// The index given.
        index: i64,
        /// The dimension it indexes.
        dim: usize,
        /// That dimension's size.
        size: usize,
    },
    /// A dimension number outside the tensor's dimensions.
    #[error(
        "{op}: dimension {dim} is out of range for a tensor with {ndim} dimensions (valid: \
         {lo}..={hi})",
        lo = -(*ndim as i64).max(1),
        hi = (*ndim as i64 - 1).max(0)
    )]
    Dim {
        /// The op that refused.
        op: &'static str,
        /// The dimension given.
        dim: i64,
        /// How many dimensions the tensor has.
        ndim: usize,
    },
    /// A write whose destination overlaps itself or one of the op's inputs.
    #[error("{op}: {message}{}", hint_text(hint))]
    Overlap {
        /// The op that refused.
        op: &'static str,
        /// What overlaps.
        message: String,
        /// How to fix it.
        hint: Option<String>,
    },
    /// An argument with a value the op cannot take.
    #[error("{op}: {message}{}", hint_text(hint))]
    Argument {
        /// The op that refused.
        op: &'static str,
        /// What is wrong.
        message: String,
        /// How to fix it.
        hint: Option<String>,
    },
    /// The allocator could not provide the memory.
    #[error("{op}: {source}")]
    OutOfMemory {
        /// The op that allocated.
        op: &'static str,
        /// The allocator's report.
        source: AllocError,
    },
    /// Tensor operands of one op live on different devices.
    #[error("{op}: expected all tensors on one device, found {first} and {second}. Hint: move them with .to_device(), or pass a 0-d CPU tensor, which joins any device's op")]
    DeviceMismatch {
        /// The op that refused.
        op: &'static str,
        /// The first operand's device.
        first: crate::Device,
        /// The device of the first operand on another one.
        second: crate::Device,
    },
    /// Something strata does not do (yet, or on this device).
    #[error("{op}: {message}")]
    Unsupported {
        /// The op that refused.
        op: &'static str,
        /// What is not supported.
        message: String,
    },
}

impl Error {
    /// A shape error.
    pub fn shape(op: &'static str, message: impl Into<String>, shapes: Vec<Vec<usize>>) -> Self {
        Error::Shape {
            op,
            message: message.into(),
            shapes,
            hint: None,
        }
    }

    /// An invalid-argument error with a hint.
    pub fn argument(op: &'static str, message: impl Into<String>, hint: Option<&str>) -> Self {
        Error::Argument {
            op,
            message: message.into(),
            hint: hint.map(str::to_owned),
        }
    }

    /// A dtype error with a hint.
    pub fn dtype(op: &'static str, message: impl Into<String>, hint: Option<&str>) -> Self {
        Error::DType {
            op,
            message: message.into(),
            hint: hint.map(str::to_owned),
        }
    }

    /// The same error with a hint attached (for variants that carry one).
    pub fn with_hint(mut self, h: impl Into<String>) -> Self {
        match &mut self {
            Error::Shape { hint, .. }
            | Error::DType { hint, .. }
            | Error::Overlap { hint, .. }
            | Error::Argument { hint, .. } => *hint = Some(h.into()),
            _ => {}
        }
        self
    }
}
