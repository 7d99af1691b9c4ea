#![doc = include_str!("../README.md")]
//!
//! This facade re-exports the layers below it; most programs need only the [`prelude`].

pub use strata_alloc as alloc;
pub use strata_core as core;
pub use strata_core::cuda;
pub use strata_core::{Error, Result};
pub use strata_data as data;
/// Distributed training (feature `mpi`): process groups, DistributedDataParallel.
#[cfg(feature = "mpi")]
pub use strata_dist as dist;
pub use strata_nn as nn;
pub use strata_profile as profile;

/// The names most programs use.
pub mod prelude {
    pub use strata_core::autograd::{self, no_grad, GradModeGuard};
    pub use strata_core::{
        empty_cache, manual_seed, memory, memory_allocated, memory_reserved, memory_summary,
        with_allocator, DType, Device, Error, Generator, Other, Result, Scalar, SplitSize, Tensor,
    };
}
