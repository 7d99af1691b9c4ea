//! Allocation sites: which line of user code asked for memory, and through which op.

use std::fmt;
use std::panic::Location;

/// The place an allocation was requested from: the user's source location, the op name, and
/// the scope path the program was in (`encoder.layers.3.mlp`; empty outside every scope).
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
    /// The scope path (`""` when none).
    pub scope: &'static str,
}

impl Site {
    /// A site from a captured caller location and an op name.
    pub fn new(location: &'static Location<'static>, op: &'static str) -> Self {
        Site {
            file: location.file(),
            line: location.line(),
            column: location.column(),
            op,
            scope: "",
        }
    }

    /// This site inside the scope path `scope`.
    pub fn in_scope(self, scope: &'static str) -> Self {
        Site { scope, ..self }
    }

    /// A site with no source location, for memory that no user line asked for.
    pub fn unknown(op: &'static str) -> Self {
        Site {
            file: "<unknown>",
            line: 0,
            column: 0,
            op,
            scope: "",
        }
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} ({})", self.file, self.line, self.op)?;
        if !self.scope.is_empty() {
            write!(f, " in {}", self.scope)?;
        }
        Ok(())
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

/// How [`live_allocations_by`](crate::CachingAllocator::live_allocations_by) groups live
/// blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// By source line and op (the key is the site as displayed, scope included).
    Site,
    /// By scope path (`""` for memory allocated outside every scope).
    Scope,
    /// By [`Category`](crate::Category).
    Category,
}

/// Live memory of one group of blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupUsage {
    /// What the blocks have in common: a site, a scope path or a category name.
    pub key: String,
    /// Bytes of the live blocks (rounded sizes).
    pub bytes: usize,
    /// The callers' bytes.
    pub requested_bytes: usize,
    /// Number of live blocks.
    pub count: usize,
}
