//! strata's distributed training: data-parallel training over processes (ranks) that average
//! their gradients by collective communication.
//!
//! - [`ProcessGroup`]: the collectives (`all_reduce`, `broadcast`, `all_gather`,
//!   `reduce_scatter`, `barrier`), each blocking or asynchronous with a [`Work`] handle, as
//!   PyTorch's c10d. With the `mpi` feature, [`MpiProcessGroup`] implements it on MPI (one
//!   communication thread per process), created by [`init_process_group`] in a program
//!   launched with `mpirun -np N`.
//! - [`DistributedDataParallel`]: a module whose gradients are averaged over the ranks in
//!   buckets during backward, each `.grad` a view into its bucket.
//! - [`ZeroRedundancyOptimizer`]: optimizer state sharded over the ranks.
//! - [`PlanningGroup`]: one rank of a world, without communication, for planning each
//!   rank's memory on the meta device.

mod ddp;
pub mod error;
pub mod group;
pub mod launch;
#[cfg(feature = "mpi")]
mod mpi;
mod planning;
pub mod work;
pub mod zero;

pub use ddp::{CommunicationStats, DdpOptions, DistributedDataParallel, NoSync};
pub use error::DistError;
pub use group::{ProcessGroup, ReduceOp};
#[cfg(feature = "mpi")]
pub use mpi::{init_process_group, MpiProcessGroup};
pub use planning::PlanningGroup;
pub use work::Work;
pub use zero::ZeroRedundancyOptimizer;
