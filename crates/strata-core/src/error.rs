//! strata's one error type. Every variant names the op, what went wrong, and how to fix it.
//! The errors of the crates above the core (data, state dicts, diagnostics) and of a
//! program's own code convert into it, so one `Result` serves a whole program.

use std::fmt;
use std::sync::Arc;

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
    /// An error of a crate above the core (a dataset or the loader, a state-dict file, a
    /// plan), of the allocator used directly, or of the program's own code, converted by
    /// `?`. Its text is the original's; [`Error::downcast_ref`] gives the original back.
    #[error(transparent)]
    Other(Wrapped),
}

/// Another error held inside an [`Error`], shared so that the error stays `Clone`. Two are
/// equal when they hold the same error.
#[derive(Clone)]
pub struct Wrapped(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Wrapped {
    /// The original error.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Debug for Wrapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Wrapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for Wrapped {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Wrapped {
    fn eq(&self, other: &Wrapped) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Error {
    /// Wraps another error (a crate's own error type converts through this in its `From`).
    pub fn wrap(error: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Other(Wrapped(Arc::new(error)))
    }

    /// The original error of type `E`, if this error wraps one: how a program that
    /// recovers from, say, a missing dataset file looks at its
    /// `strata::data::DataError` after `?` converted it.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Other(w) => w.get().downcast_ref::<E>(),
            _ => None,
        }
    }
}

impl From<Box<dyn std::error::Error + Send + Sync + 'static>> for Error {
    fn from(error: Box<dyn std::error::Error + Send + Sync + 'static>) -> Error {
        Error::Other(Wrapped(Arc::from(error)))
    }
}

impl From<String> for Error {
    fn from(message: String) -> Error {
        Box::<dyn std::error::Error + Send + Sync>::from(message).into()
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Error {
        Box::<dyn std::error::Error + Send + Sync>::from(message).into()
    }
}

impl From<std::io::Error> for Error {
    fn from(error: std::io::Error) -> Error {
        Error::wrap(error)
    }
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

/// The allocator crate's errors, for programs that use an allocator, a snapshot or a replay
/// directly; each keeps its text and is given back by [`Error::downcast_ref`].
macro_rules! wrap_from {
    ($($ty:ty),* $(,)?) => {$(
        impl From<$ty> for Error {
            fn from(error: $ty) -> Error {
                Error::wrap(error)
            }
        }
    )*};
}

wrap_from!(
    AllocError,
    crate::device::ParseDeviceError,
    strata_alloc::ConfigError,
    strata_alloc::CachingError,
    strata_alloc::BackingError,
    strata_alloc::SnapshotReadError,
    strata_alloc::offline::ReplayError,
    strata_alloc::offline::WindowError,
    strata_alloc::offline::UnpickleError,
);

#[cfg(feature = "cuda")]
wrap_from!(strata_alloc::backing::cuda::CudaError);
