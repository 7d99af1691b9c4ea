//! What the fused recurrent cells' entries ([`super::lstm_cell`], [`super::gru_cell`])
//! share: the check that every operand is a matrix with contiguous rows, and locking and
//! addressing those rows for the backend.

use crate::backend::args::RowsAt;
use crate::storage::StorageGuards;
use crate::tensor::{lock_bodies, Body};
use crate::{Error, Result, Tensor};

/// `(rows, cols)` of a matrix (or a vector, as one row) whose rows are contiguous, else
/// an internal error.
pub(super) fn matrix(t: &Tensor) -> Result<(usize, usize)> {
    let l = t.layout();
    match (l.sizes(), l.strides()) {
        ([rows, cols], [_, col]) if *col == 1 || *cols <= 1 => Ok((*rows, *cols)),
        ([cols], [col]) if *col == 1 || *cols <= 1 => Ok((1, *cols)),
        _ => Err(Error::Unsupported {
            op: "recurrent cell",
            message: format!(
                "the fused cell was given an operand of shape {:?} and strides {:?}, not a \
                 matrix with contiguous rows",
                l.sizes(),
                l.strides()
            ),
        }),
    }
}

/// The operands' bodies, checked, and how to lock and address them.
pub(super) struct Bodies {
    reads: Vec<Body>,
    writes: Vec<Body>,
}

impl Bodies {
    /// Checks every operand is a matrix with contiguous rows and keeps its body.
    pub(super) fn new(reads: &[&Tensor], writes: &[&Tensor]) -> Result<Bodies> {
        for t in reads.iter().chain(writes) {
            matrix(t)?;
        }
        Ok(Bodies {
            reads: reads.iter().map(|t| t.body()).collect(),
            writes: writes.iter().map(|t| t.body()).collect(),
        })
    }

    /// Locks every storage: the written ones for writing.
    pub(super) fn lock(&self) -> StorageGuards<'_> {
        lock_bodies(&self.reads, &self.writes)
    }

    /// The rows of read operand `t` (one of the reads given to [`Bodies::new`]), or null
    /// for none.
    pub(super) fn read(
        &self,
        guards: &StorageGuards<'_>,
        t: Option<&Tensor>,
        esize: usize,
    ) -> RowsAt<*const u8> {
        match t.map(Tensor::body) {
            None => RowsAt {
                ptr: std::ptr::null(),
                row_stride: 0,
            },
            Some(b) => RowsAt {
                ptr: guards
                    .read_ptr(&b.storage)
                    .wrapping_add(b.layout.offset() * esize),
                row_stride: row_stride(&b),
            },
        }
    }

    /// The rows of written operand `i`.
    pub(super) fn write(
        &self,
        guards: &StorageGuards<'_>,
        i: usize,
        esize: usize,
    ) -> RowsAt<*mut u8> {
        let b = &self.writes[i];
        RowsAt {
            ptr: guards
                .write_ptr(&b.storage)
                .wrapping_add(b.layout.offset() * esize),
            row_stride: row_stride(b),
        }
    }
}

/// Elements between a matrix body's row starts (unused for a single row).
fn row_stride(b: &Body) -> usize {
    match b.layout.strides() {
        [rows_apart, _] => *rows_apart,
        _ => 0,
    }
}
