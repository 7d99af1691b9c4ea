//! Copies the program did not ask for by name: a `reshape` that could not be a view,
//! `contiguous`, casts, and the casts autocast inserts.

use std::collections::BTreeMap;
use std::sync::Mutex;

use strata_core::observer::{AllocEvent, MemoryAction};

use crate::finding::{Finding, FindingKind};
use crate::format::bytes;
use crate::hub::{outermost_frame, Listener, Listening};

/// Which kind of copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CopyKind {
    /// `reshape` (or `flatten`) whose strides could not express the new shape.
    Reshape,
    /// `contiguous` of a strided tensor.
    Contiguous,
    /// A dtype or device conversion the program asked for (`to`).
    Cast,
    /// A cast autocast inserted before an op.
    AutocastCast,
}

impl CopyKind {
    fn describe(self) -> &'static str {
        match self {
            CopyKind::Reshape => "reshape copied (the strides could not express the shape)",
            CopyKind::Contiguous => "contiguous copied a strided tensor",
            CopyKind::Cast => "cast",
            CopyKind::AutocastCast => "autocast cast an operand",
        }
    }
}

/// Copies of one kind from one source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyUsage {
    /// What copied.
    pub kind: CopyKind,
    /// The user's source line (`file:line`) and the op called there.
    pub place: String,
    /// How many copies.
    pub count: usize,
    /// Bytes they allocated.
    pub bytes: usize,
}

struct Recorder(Mutex<BTreeMap<(CopyKind, String), (usize, usize)>>);

fn kind_of(event: &AllocEvent) -> Option<CopyKind> {
    let s = &event.site;
    match s.op {
        "reshape" | "flatten" | "reshape_as" => Some(CopyKind::Reshape),
        "contiguous" => Some(CopyKind::Contiguous),
        "to" | "type_as" | "cast" => Some(CopyKind::Cast),
        "autocast_to" => Some(CopyKind::AutocastCast),
        _ => None,
    }
}

impl Listener for Recorder {
    fn memory(&self, _thread: u64, event: &AllocEvent) {
        if event.action != MemoryAction::Alloc {
            return;
        }
        let Some(kind) = kind_of(event) else {
            return;
        };
        // The user's line is the outermost op's; inside backward the site is the forward's.
        let place = match outermost_frame() {
            Some((op, loc)) if kind == CopyKind::AutocastCast || op != event.site.op => {
                format!("{}:{} ({op})", loc.file(), loc.line())
            }
            _ => format!(
                "{}:{} ({})",
                event.site.file, event.site.line, event.site.op
            ),
        };
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let e = m.entry((kind, place)).or_insert((0, 0));
        e.0 += 1;
        e.1 += event.bytes;
    }
}

/// Counts, while it lives, the copies that hide inside ops: a `reshape` that copied,
/// `contiguous` of a strided tensor, casts, and the casts autocast inserts, with bytes and
/// source lines.
///
/// ```
/// use strata_profile::{CopyKind, CopyWatch};
/// use strata_core::{DType, Tensor};
/// let watch = CopyWatch::start();
/// let x = Tensor::zeros(&[64, 32], DType::F32)?;
/// let y = x.t()?.reshape(&[-1])?; // transposed: reshape must copy
/// let usage = watch.usage();
/// assert_eq!(usage[0].kind, CopyKind::Reshape);
/// assert_eq!(usage[0].bytes, 64 * 32 * 4);
/// # drop(y);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub struct CopyWatch(Listening<Recorder>);

impl CopyWatch {
    /// Starts counting.
    pub fn start() -> CopyWatch {
        CopyWatch(Listening::start(Recorder(Mutex::new(BTreeMap::new()))))
    }

    /// The copies so far, most bytes first.
    pub fn usage(&self) -> Vec<CopyUsage> {
        let m = self.0.listener.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<CopyUsage> = m
            .iter()
            .map(|((kind, place), (count, bytes))| CopyUsage {
                kind: *kind,
                place: place.clone(),
                count: *count,
                bytes: *bytes,
            })
            .collect();
        v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.place.cmp(&b.place)));
        v
    }

    /// One finding per kind and line, most bytes first.
    pub fn report(&self) -> Vec<Finding> {
        self.usage()
            .into_iter()
            .map(|u| {
                let tip = match u.kind {
                    CopyKind::Reshape => "use `view` where a copy is not wanted (it errs instead of copying), or make the input contiguous once",
                    CopyKind::Contiguous => "keep the tensor's layout, or make it contiguous once outside the loop",
                    CopyKind::Cast => "cast once, outside the loop, or keep the data in the dtype it is used in",
                    CopyKind::AutocastCast => "keep weights in the region's dtype, or reuse the cast within the region",
                };
                Finding::new(
                    FindingKind::HiddenCopy,
                    format!(
                        "{}: {} {} times, {} in all; {tip}",
                        u.place,
                        u.kind.describe(),
                        u.count,
                        bytes(u.bytes)
                    ),
                )
            })
            .collect()
    }
}
