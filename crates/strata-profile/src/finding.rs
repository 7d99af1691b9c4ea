//! What a watch found: a kind and a message that says what, where, and what to do.

use std::fmt;

/// Which pitfall a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FindingKind {
    /// Live bytes from one site grew in every one of the last steps.
    Leak,
    /// Graph nodes from one site grew every step while their saved tensors did not: tensors
    /// kept after backward still hold their graphs (a list of losses).
    GraphKept,
    /// Graph nodes and saved bytes grew every step: state carried from step to step links
    /// each step's graph to the last, and `retain_graph` keeps them all.
    CarriedState,
    /// A graph was built while every module was in evaluation mode.
    GraphInEval,
    /// An optimizer step used gradients summed over several backward passes.
    GradNotCleared,
    /// A small view keeps a large storage alive.
    ViewRetention,
    /// An op copied data the program did not ask to copy by name.
    HiddenCopy,
    /// `empty_cache` is called in a loop and the cache is filled again after each call.
    EmptyCacheInLoop,
    /// Reserved memory the allocator cannot use for large requests.
    Fragmentation,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The pitfall.
    pub kind: FindingKind,
    /// What, where, and what to do (one line for a reminder).
    pub message: String,
    /// True for a one-line reminder that a finding reported in full earlier still holds
    /// (the watch's `report()` gives the full text again).
    pub reminder: bool,
}

impl Finding {
    pub(crate) fn new(kind: FindingKind, message: String) -> Finding {
        Finding {
            kind,
            message,
            reminder: false,
        }
    }

    /// A one-line reminder of a finding of `kind` reported earlier.
    pub(crate) fn reminder(kind: FindingKind, message: String) -> Finding {
        Finding {
            kind,
            message,
            reminder: true,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
