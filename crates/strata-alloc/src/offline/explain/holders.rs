//! Who holds the memory at a moment: the live blocks, grouped by the first stack frame in the
//! user's own code.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::caching::TraceAction;
use crate::caching::{BlockState, Frame, SegmentSnapshot, TraceEntrySnapshot, SCOPE_FILE};

/// The group of blocks allocated before the trace began (a full ring buffer, recording
/// switched on late, or a window), whose stacks it does not have.
pub const BEFORE_TRACE: &str = "<allocated before the trace or window began>";

/// The group of blocks recorded without a stack.
pub const NO_STACK: &str = "<no stack recorded>";

/// Live blocks allocated from one place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    /// The first frame in the user's own code (`file:line (function)`), or [`NO_STACK`],
    /// or [`BEFORE_TRACE`].
    pub site: String,
    /// Bytes of its live blocks.
    pub bytes: u64,
    /// How many live blocks.
    pub blocks: usize,
    /// Bytes by what they hold (strata's categories), where the snapshot says.
    pub categories: BTreeMap<String, u64>,
    /// The trace entries that allocated its blocks (with their frees, the entries a replay
    /// without this holder leaves out), and the addresses of its blocks held from before
    /// the trace. Not written to JSON.
    #[serde(skip)]
    pub(super) lifetimes: Vec<Lifetime>,
}

/// One live block: where its life is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Lifetime {
    /// Allocated by the trace entry `alloc`, freed by the entries `frees` (if it is freed).
    Traced { alloc: usize, frees: Vec<usize> },
    /// Held from before the trace, at this address, freed by the entries `frees`.
    Before { addr: u64, frees: Vec<usize> },
}

/// Whether `filename` is library code: PyTorch's and Python's own files, installed packages,
/// C++ sources and frames without a file. These are skipped when looking for the user's frame.
pub fn is_library_frame(filename: &str) -> bool {
    const PARTS: [&str; 10] = [
        "/torch/",
        "/.cargo/registry/",
        "/site-packages/",
        "/dist-packages/",
        "/lib/python3",
        "/lib64/python3",
        "/c10/",
        "/aten/",
        "/csrc/",
        "<frozen ",
    ];
    const SUFFIXES: [&str; 6] = [".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp"];
    filename.is_empty()
        || filename.starts_with("??")
        || filename.starts_with("torch/")
        || PARTS.iter().any(|p| filename.contains(p))
        || SUFFIXES.iter().any(|s| filename.ends_with(s))
}

/// The group a stack belongs to: its first frame in user code (or, with `library_frames`, its
/// first frame), as `file:line (function)`.
pub fn site_of(frames: &[Frame], library_frames: bool) -> String {
    let code = frames.iter().filter(|f| f.filename != SCOPE_FILE);
    let mut chosen = None;
    for f in code {
        if library_frames || !is_library_frame(&f.filename) {
            chosen = Some(f);
            break;
        }
    }
    match chosen {
        Some(f) => format!("{}:{} ({})", f.filename, f.line, f.name),
        None if frames.is_empty() => NO_STACK.to_owned(),
        None => "<library code only>".to_owned(),
    }
}

/// Adds one block to its group.
fn add(
    groups: &mut HashMap<String, Holder>,
    site: String,
    bytes: u64,
    category: Option<String>,
    lifetime: Option<Lifetime>,
) {
    let h = groups.entry(site.clone()).or_insert_with(|| Holder {
        site,
        bytes: 0,
        blocks: 0,
        categories: BTreeMap::new(),
        lifetimes: Vec::new(),
    });
    h.bytes += bytes;
    h.blocks += 1;
    if let Some(c) = category {
        *h.categories.entry(c).or_default() += bytes;
    }
    h.lifetimes.extend(lifetime);
}

/// The groups, largest first (ties by site).
fn sorted(groups: HashMap<String, Holder>) -> Vec<Holder> {
    let mut out: Vec<Holder> = groups.into_values().collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    out
}

/// The blocks live after trace entries `0..end` (those allocated and not yet freed by their
/// owner, and those held from before the trace, `missing`), grouped. Categories come from the
/// entry that later frees each block, or from the snapshot's segments where it is still live.
pub(super) fn from_trace(
    trace: &[TraceEntrySnapshot],
    end: usize,
    missing: &[(u64, u64)],
    segments: &[SegmentSnapshot],
    library_frames: bool,
) -> Vec<Holder> {
    enum Live {
        Traced(usize),
        Before(u64),
    }
    let mut live: HashMap<u64, Live> = missing
        .iter()
        .map(|&(addr, _)| (addr, Live::Before(addr)))
        .collect();
    let missing_bytes: HashMap<u64, u64> = missing.iter().copied().collect();
    for (i, e) in trace.iter().enumerate().take(end) {
        let Some(addr) = e.addr else { continue };
        match e.action {
            TraceAction::Alloc => {
                live.insert(addr, Live::Traced(i));
            }
            TraceAction::FreeRequested | TraceAction::FreeCompleted => {
                live.remove(&addr);
            }
            _ => {}
        }
    }
    // Each live block's later frees and, on `free_requested`, what it held.
    let mut frees: HashMap<u64, (Vec<usize>, Option<String>)> = HashMap::new();
    let mut closed: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for (i, e) in trace.iter().enumerate().skip(end) {
        let Some(addr) = e.addr else { continue };
        if !live.contains_key(&addr) || closed.contains(&addr) {
            continue;
        }
        match e.action {
            TraceAction::FreeRequested => {
                let f = frees.entry(addr).or_default();
                f.0.push(i);
                f.1 = e.category.map(|c| c.as_str().to_owned());
            }
            TraceAction::FreeCompleted => {
                frees.entry(addr).or_default().0.push(i);
                closed.insert(addr);
            }
            // The address is handed out again: the block's life ended before.
            TraceAction::Alloc => {
                closed.insert(addr);
            }
            _ => {}
        }
    }
    let still_live: HashMap<u64, String> = segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .filter_map(|b| Some((b.address, b.category?.as_str().to_owned())))
        .collect();
    // In the order they were allocated (those from before the trace first), so that the
    // explanation is the same at every run.
    let mut live: Vec<(u64, Live)> = live.into_iter().collect();
    live.sort_by_key(|(addr, l)| match l {
        Live::Before(_) => (0, *addr),
        Live::Traced(i) => (1, *i as u64),
    });
    let mut groups = HashMap::new();
    for (addr, l) in live {
        let (block_frees, freed_as) = frees.remove(&addr).unwrap_or_default();
        let category = freed_as.or_else(|| still_live.get(&addr).cloned());
        match l {
            Live::Traced(i) => {
                let e = &trace[i];
                let lifetime = Lifetime::Traced {
                    alloc: i,
                    frees: block_frees,
                };
                add(
                    &mut groups,
                    site_of(&e.frames, library_frames),
                    e.size,
                    category,
                    Some(lifetime),
                );
            }
            Live::Before(addr) => {
                let bytes = missing_bytes.get(&addr).copied().unwrap_or(0);
                let lifetime = Lifetime::Before {
                    addr,
                    frees: block_frees,
                };
                add(
                    &mut groups,
                    BEFORE_TRACE.to_owned(),
                    bytes,
                    category,
                    Some(lifetime),
                );
            }
        }
    }
    sorted(groups)
}

/// The allocated blocks of a snapshot's segments, grouped: who holds the memory when there is
/// no trace to replay.
pub(super) fn from_segments(segments: &[SegmentSnapshot], library_frames: bool) -> Vec<Holder> {
    let mut groups = HashMap::new();
    for b in segments.iter().flat_map(|s| &s.blocks) {
        if b.state != BlockState::ActiveAllocated {
            continue;
        }
        let bytes = if b.requested_size > 0 {
            b.requested_size
        } else {
            b.size
        };
        add(
            &mut groups,
            site_of(&b.frames, library_frames),
            bytes,
            b.category.map(|c| c.as_str().to_owned()),
            None,
        );
    }
    sorted(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(filename: &str, line: u32, name: &str) -> Frame {
        Frame {
            filename: filename.to_owned(),
            line,
            name: name.to_owned(),
        }
    }

    #[test]
    fn the_first_user_frame_names_the_group() {
        let frames = vec![
            frame("??", 0, "c10::cuda::CUDACachingAllocator::malloc"),
            frame(
                "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py",
                125,
                "forward",
            ),
            frame("/home/me/model.py", 41, "forward"),
            frame("/home/me/train.py", 88, "step"),
        ];
        assert_eq!(site_of(&frames, false), "/home/me/model.py:41 (forward)");
        assert_eq!(
            site_of(&frames, true),
            "??:0 (c10::cuda::CUDACachingAllocator::malloc)"
        );
        assert_eq!(site_of(&[], false), NO_STACK);
        assert_eq!(site_of(&frames[..2], false), "<library code only>");
    }

    #[test]
    fn library_paths_are_recognised() {
        for f in [
            "/opt/venv/lib/python3.12/site-packages/torch/functional.py",
            "torch/nn/functional.py",
            "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
            "<frozen runpy>",
        ] {
            assert!(is_library_frame(f), "{f}");
        }
        for f in ["/home/me/model.py", "src/main.rs", "train.py"] {
            assert!(!is_library_frame(f), "{f}");
        }
    }
}
