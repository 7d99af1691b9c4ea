//! Snapshots: the allocator's segments, blocks and trace, in the structure of PyTorch's
//! `torch.cuda.memory._snapshot()`, serialisable to JSON and (in `pickle.rs`) to the pickle
//! PyTorch's memory tools read.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::config::PoolKind;
use super::history::TraceAction;
use crate::{Category, Site};

/// One stack frame. strata records the user's source line and the op (`name`) that
/// allocated, innermost first, then, inside a scope, a frame named by the scope path whose
/// file is `<scope>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Source file.
    pub filename: String,
    /// Line in `filename`.
    pub line: u32,
    /// The op that allocated.
    pub name: String,
}

impl Frame {
    /// Reads back what [`Frame::frames`] writes (and what PyTorch's stacks hold): the innermost
    /// code frame as `file:line (name)`, and the scope path, each when the frames have one.
    pub fn site_and_scope(frames: &[Frame]) -> (Option<String>, Option<&str>) {
        let site = frames
            .iter()
            .find(|f| f.filename != SCOPE_FILE)
            .map(|f| format!("{}:{} ({})", f.filename, f.line, f.name));
        let scope = frames
            .iter()
            .find(|f| f.filename == SCOPE_FILE)
            .map(|f| f.name.as_str());
        (site, scope)
    }

    pub(crate) fn frames(site: Option<Site>) -> Vec<Frame> {
        let Some(s) = site else {
            return Vec::new();
        };
        let mut frames = vec![Frame {
            filename: s.file.to_string(),
            line: s.line,
            name: s.op.to_string(),
        }];
        if !s.scope.is_empty() {
            frames.push(Frame {
                filename: SCOPE_FILE.to_string(),
                line: 0,
                name: s.scope.to_string(),
            });
        }
        frames
    }
}

/// A trace entry's stack, innermost frame first. Entries with the same stack share one (a
/// long trace holds few distinct stacks), so a snapshot's memory grows with its entries, not
/// with their frames.
pub type Frames = Arc<[Frame]>;

/// The file name of the frame that carries a scope path.
pub const SCOPE_FILE: &str = "<scope>";

/// The state of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Handed out.
    ActiveAllocated,
    /// Freed by its owner, but other streams that used it have not finished yet.
    ActivePendingFree,
    /// Free, cached.
    Inactive,
}

/// A block inside a segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSnapshot {
    /// Start address.
    pub address: u64,
    /// Size in bytes (rounded).
    pub size: u64,
    /// The caller's bytes (0 for free blocks).
    pub requested_size: u64,
    /// Allocated, pending free, or free.
    pub state: BlockState,
    /// Where it was allocated (empty for free blocks).
    pub frames: Vec<Frame>,
    /// What an allocated block holds (strata's key; absent in PyTorch's snapshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
}

/// A segment (for an expandable segment: one contiguous mapped range of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentSnapshot {
    /// Device index (always 0 here).
    pub device: i64,
    /// Start address.
    pub address: u64,
    /// Size in bytes.
    pub total_size: u64,
    /// Bytes of allocated blocks.
    pub allocated_size: u64,
    /// Bytes of allocated and pending-free blocks.
    pub active_size: u64,
    /// Callers' bytes of active blocks.
    pub requested_size: u64,
    /// The stream the segment belongs to.
    pub stream: u64,
    /// `"small"` or `"large"`.
    pub segment_type: PoolKind,
    /// Memory pool id; `(0, 0)` is the default pool.
    pub segment_pool_id: (u64, u64),
    /// Whether this is (part of) an expandable segment.
    pub is_expandable: bool,
    /// Where the segment was created.
    pub frames: Vec<Frame>,
    /// The blocks, in address order, tiling the segment.
    pub blocks: Vec<BlockSnapshot>,
}

/// A trace entry as a snapshot stores it. An `oom` entry has `device_free` instead of `addr`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntrySnapshot {
    /// `alloc`, `free_requested`, `free_completed`, `segment_alloc`, `segment_free`,
    /// `segment_map`, `segment_unmap`, `oom` or `snapshot`.
    pub action: TraceAction,
    /// Block, segment or range address (absent for `oom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<u64>,
    /// The device's free bytes (only for `oom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_free: Option<u64>,
    /// Bytes.
    pub size: u64,
    /// Stream.
    pub stream: u64,
    /// Microseconds since the Unix epoch.
    pub time_us: i64,
    /// Where it came from (shared with the entries of the same stack).
    pub frames: Frames,
    /// On a `free_requested` entry, what the block held when it was freed (strata's key;
    /// absent in PyTorch's snapshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
}

/// The settings in force when the snapshot was taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocatorSettings {
    /// The raw settings text.
    #[serde(rename = "STRATA_ALLOC_CONF")]
    pub conf: String,
    /// `native` or `system`.
    pub backend: String,
    /// Bytes, -1 when unlimited.
    pub max_split_size: i64,
    /// 0 when off.
    pub garbage_collection_threshold: f64,
    /// Whether new memory goes into expandable segments.
    pub expandable_segments: bool,
    /// Divisions per bucket, keyed by the bucket's start in MiB (`"1"`, `"2"`, `"4"`, ...).
    pub roundup_power2_divisions: BTreeMap<String, u64>,
    /// The memory limit in bytes, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
    /// Whether ties between equal free blocks went to the lowest address, PyTorch's rule (and
    /// strata's over a backing that [orders by address](crate::Backing::orders_by_address)),
    /// rather than to the oldest segment, strata's rule over host memory. A replay follows the
    /// same rule. Absent from a file: PyTorch's rule.
    #[serde(default = "ties_by_address_unless_said")]
    pub ties_by_address: bool,
}

/// A snapshot that does not say how ties were broken comes from PyTorch.
fn ties_by_address_unless_said() -> bool {
    true
}

/// Everything the allocator holds, plus the recorded history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Segments in address order.
    pub segments: Vec<SegmentSnapshot>,
    /// One list of trace entries per device, oldest first.
    pub device_traces: Vec<Vec<TraceEntrySnapshot>>,
    /// Settings.
    pub allocator_settings: AllocatorSettings,
}

impl Snapshot {
    /// Compact JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a snapshot always serialises")
    }

    /// Indented JSON.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a snapshot always serialises")
    }

    /// Reads a snapshot written by [`to_json`](Self::to_json).
    pub fn from_json(s: &str) -> Result<Snapshot, serde_json::Error> {
        serde_json::from_str(s)
    }

    /// Writes [`to_json`](Self::to_json) to `path`, replacing any file there.
    pub fn save_json(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_json())
    }

    /// Reads a snapshot file written by [`save_json`](Self::save_json).
    pub fn load_json(path: impl AsRef<std::path::Path>) -> std::io::Result<Snapshot> {
        let text = std::fs::read_to_string(path)?;
        Snapshot::from_json(&text).map_err(std::io::Error::from)
    }

    /// Sum of `total_size` over all segments.
    pub fn total_reserved(&self) -> u64 {
        self.segments.iter().map(|s| s.total_size).sum()
    }

    /// Sum of `allocated_size` over all segments.
    pub fn total_allocated(&self) -> u64 {
        self.segments.iter().map(|s| s.allocated_size).sum()
    }
}
