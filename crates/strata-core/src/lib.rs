//! strata's tensors: dtypes, layouts, storage, the element-wise engine and the ops.
//!
//! A [`Tensor`] is a strided view onto a [`storage::Storage`]: views share memory and the
//! version counter, memory returns to its allocator the moment the last handle drops, and
//! every op validates its inputs before it allocates or writes anything, so an `Err` leaves
//! everything as it was.
//!
//! ```
//! use strata_core::{Tensor, DType};
//! let x = Tensor::arange(12, DType::F32)?.view(&[3, 4])?;
//! let col = x.select(1, 2)?;             // a view of column 2
//! col.mul_(10.0)?;                        // written through the view
//! assert_eq!(x.to_vec::<f32>()?[2], 20.0);
//! # Ok::<(), strata_core::Error>(())
//! ```

mod api;
pub mod autograd;
pub(crate) mod backend;
pub(crate) mod cast_scope;
pub mod cuda;
pub mod device;
pub mod dtype;
pub mod error;
pub(crate) mod kernel_error;
pub mod layout;
pub mod memory;
pub mod mode;
pub mod nn;
pub mod observer;
pub mod op;
pub mod ops;
pub mod random;
pub mod routing;
pub mod scalar;
pub mod scope;
pub(crate) mod spare_slot;
pub mod storage;
pub mod tensor;

pub use api::autocast;
pub use backend::cpu::gemm::{bf16_dot_issue_times, half_kernel, HalfKernel};
pub use backend::cpu::threads::{num_threads, pool as thread_pool};
pub use backend::kernel::{AdamStep, SgdStep};
pub use device::{DefaultDevice, Device, ParseDeviceError};
pub use dtype::{DType, Element};
pub use error::{Error, Result, Wrapped};
pub use layout::int_arg::IntArg;
pub use layout::shape_arg::IntoShape;
pub use memory::{
    empty_cache, max_memory_allocated, max_memory_reserved, memory_allocated, memory_reserved,
    memory_summary, reset_peak_memory_stats,
};
pub use op::{CallSite, OpContext, ProgramLines};
pub use ops::binary::Other;
pub use ops::views::SplitSize;
pub use random::{manual_seed, Generator};
pub use routing::{allocating_as, with_allocator, with_device_allocator};
pub use scalar::Scalar;
pub use strata_alloc::{Category, Grouping};
pub use tensor::{ArangeRange, Factory, Tensor, ViewCreation, ViewInfo, WeakTensor};
