//! Tools over a recorded [`Snapshot`](crate::caching::Snapshot), used after the run and away
//! from the allocator that recorded it: reading strata's JSON and pickles and PyTorch's
//! `_dump_snapshot` pickles ([`Snapshot::read_file`](crate::caching::Snapshot::read_file)),
//! writing pickles, walking a trace ([`TraceWalk`]: one reading of allocations, frees and
//! reserved bytes for every tool), restricting a snapshot to a window of its trace, replaying
//! its trace under other allocator settings, and explaining an out-of-memory.
//!
//! The arrows point one way: these tools build on [`caching`](crate::caching) (the snapshot's
//! types, the allocator a replay drives) and the allocator never needs them.

mod explain;
mod pickle;
mod read_ahead;
mod replay;
mod snapshot_read;
mod unpickle;
mod walk;
mod window;

pub use explain::{
    explain, is_library_frame, Capacity, Change, ExplainOptions, Explanation, Fix, Fragmentation,
    Holder, Moment, PoolUse, BEFORE_TRACE, NO_STACK,
};
pub use replay::{
    recorded_config, replay, replay_recorded, replay_recorded_on, replay_with, Coverage,
    ReplayError, ReplayFigures, ReplayOom, ReplayOptions, ReplayReport,
};
pub use snapshot_read::{ReadNotes, SnapshotFormat, SnapshotReadError};
pub use unpickle::UnpickleError;
pub use walk::{FreeAt, Step, TraceRecord, TraceWalk};
pub use window::{Cut, TracePoint, WindowError};
