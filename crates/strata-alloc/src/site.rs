//! Allocation sites: which line of user code asked for memory, and through which op.

use std::fmt;
use std::panic::Location;

/// The place an allocation was requested from: the user's source location and the op name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Site {
    /// Source file of the user code that called the op.
    pub file: &'static str,
    /// Line in `file`.
    pub line: u32,
    /// Column in `file`.
    pub column: u32,
    /// The op that allocated (`"zeros"`, `"add"`, `"clone"`, ...).
    pub op: &'static str,
}

impl Site {
    /// A site from a captured caller location and an op name.
    pub fn new(location: &'static Location<'static>, op: &'static str) -> Self {
        Site {
            file: location.file(),
            line: location.line(),
            column: location.column(),
            op,
        }
    }

    /// A site with no source location, for memory that no user line asked for.
    pub fn unknown(op: &'static str) -> Self {
        Site {
            file: "<unknown>",
            line: 0,
            column: 0,
            op,
        }
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} ({})", self.file, self.line, self.op)
    }
}

/// Live memory allocated from one site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteUsage {
    /// Where the memory was requested.
    pub site: Site,
    /// Bytes of the live blocks (rounded sizes).
    pub bytes: usize,
    /// The callers' bytes.
    pub requested_bytes: usize,
    /// Number of live blocks.
    pub count: usize,
}
