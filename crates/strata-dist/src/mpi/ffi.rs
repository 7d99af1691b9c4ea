//! The MPI calls behind the process group, on byte buffers the caller has locked. Every call
//! here runs on the communication thread (MPI is initialised `FUNNELED` by that thread).

use std::os::raw::{c_char, c_int, c_void};

use mpi::ffi;
use strata_core::DType;

use crate::error::DistError;
use crate::group::ReduceOp;

extern "C" {
    /// `MPI_IN_PLACE` as this MPI library's `mpi.h` defines it (`src/mpi/shim.c`).
    fn strata_mpi_in_place() -> *mut c_void;
}

/// The MPI datatype and element size a reduction of `dtype` uses; `None` for dtypes MPI
/// has no arithmetic type for (the 16-bit floats).
fn reduction_type(dtype: DType) -> Option<ffi::MPI_Datatype> {
    // SAFETY: the RSMPI_* statics are constants the bindings' C side initialises before
    // `main`; reading them has no side effect.
    unsafe {
        Some(match dtype {
            DType::F32 => ffi::RSMPI_FLOAT,
            DType::F64 => ffi::RSMPI_DOUBLE,
            DType::I64 => ffi::RSMPI_INT64_T,
            DType::I32 => ffi::RSMPI_INT32_T,
            DType::U8 => ffi::RSMPI_UINT8_T,
            DType::Bool => ffi::RSMPI_C_BOOL,
            _ => return None,
        })
    }
}

fn mpi_op(op: ReduceOp, dtype: DType) -> ffi::MPI_Op {
    // SAFETY: as in `reduction_type`.
    unsafe {
        match (op, dtype) {
            (_, DType::Bool) => ffi::RSMPI_LOR,
            (ReduceOp::Sum | ReduceOp::Average, _) => ffi::RSMPI_SUM,
            (ReduceOp::Max, _) => ffi::RSMPI_MAX,
        }
    }
}

fn bytes_type() -> ffi::MPI_Datatype {
    // SAFETY: as in `reduction_type`.
    unsafe { ffi::RSMPI_UINT8_T }
}

fn world() -> ffi::MPI_Comm {
    // SAFETY: as in `reduction_type`.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

/// The datatype for reducing `dtype`, or an error naming the fix.
pub(crate) fn checked_reduction_type(
    op: &'static str,
    dtype: DType,
) -> Result<ffi::MPI_Datatype, DistError> {
    reduction_type(dtype).ok_or_else(|| DistError::Group {
        op,
        message: format!(
            "MPI has no arithmetic type for {dtype}, so it cannot reduce it. Hint: reduce an \
             f32 copy (.to(DType::F32)) and convert back"
        ),
    })
}

/// `n` as MPI's `int` count.
fn count(op: &'static str, n: usize) -> Result<c_int, DistError> {
    c_int::try_from(n).map_err(|_| DistError::Group {
        op,
        message: format!(
            "{n} elements exceed the {} one MPI call can move. Hint: split the tensor and run \
             the collective on each part",
            c_int::MAX
        ),
    })
}

/// MPI's description of error `code`.
fn error_text(code: c_int) -> String {
    let mut buf = vec![0 as c_char; 512];
    let mut len: c_int = 0;
    // SAFETY: MPI_MAX_ERROR_STRING is at most 256 in the libraries strata supports; the buffer
    // holds 512 and MPI writes at most that many characters plus the terminator.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    if rc != 0 {
        return "(no description)".into();
    }
    let len = usize::try_from(len).unwrap_or(0).min(buf.len());
    buf[..len].iter().map(|&c| c as u8 as char).collect()
}

fn check(op: &'static str, code: c_int) -> Result<(), DistError> {
    if code == 0 {
        Ok(())
    } else {
        Err(DistError::Mpi {
            op,
            code,
            message: error_text(code),
        })
    }
}

/// Makes failing calls on the world communicator return their codes (the default aborts
/// the job, leaving no message of strata's).
pub(crate) fn return_errors() -> Result<(), DistError> {
    // SAFETY: MPI is initialised on this thread; both handles are the library's constants.
    let rc = unsafe { ffi::MPI_Comm_set_errhandler(world(), ffi::RSMPI_ERRORS_RETURN) };
    check("init_process_group", rc)
}

/// Sums (or maximises) `bytes`, elements of `dtype`, over every rank in place.
pub(crate) fn all_reduce(
    op_name: &'static str,
    bytes: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<(), DistError> {
    let datatype = checked_reduction_type(op_name, dtype)?;
    let n = count(op_name, bytes.len() / dtype.size())?;
    // SAFETY: `bytes` is `n` elements of `datatype`, borrowed mutably for the call; MPI reads
    // and writes them in place and keeps no reference after returning.
    let rc = unsafe {
        ffi::MPI_Allreduce(
            strata_mpi_in_place(),
            bytes.as_mut_ptr().cast(),
            n,
            datatype,
            mpi_op(op, dtype),
            world(),
        )
    };
    check(op_name, rc)
}

/// Copies rank `root`'s `bytes` into every other rank's.
pub(crate) fn broadcast(op: &'static str, bytes: &mut [u8], root: usize) -> Result<(), DistError> {
    let n = count(op, bytes.len())?;
    let root = count(op, root)?;
    // SAFETY: `bytes` is `n` bytes borrowed mutably for the call; MPI keeps no reference.
    let rc = unsafe { ffi::MPI_Bcast(bytes.as_mut_ptr().cast(), n, bytes_type(), root, world()) };
    check(op, rc)
}

/// Gathers every rank's `part` into `gathered` in rank order (`gathered` is world × `part`).
pub(crate) fn all_gather(
    op: &'static str,
    part: &[u8],
    gathered: &mut [u8],
) -> Result<(), DistError> {
    let n = count(op, part.len())?;
    count(op, gathered.len())?;
    // SAFETY: `part` is `n` bytes read for the call, `gathered` (a distinct buffer, the
    // caller's lock on each keeps them apart) is world × `n` bytes written; MPI keeps no
    // reference after returning.
    let rc = unsafe {
        ffi::MPI_Allgather(
            part.as_ptr().cast(),
            n,
            bytes_type(),
            gathered.as_mut_ptr().cast(),
            n,
            bytes_type(),
            world(),
        )
    };
    check(op, rc)
}

/// Reduces every rank's `whole` with `op` and leaves this rank's share in `share`.
pub(crate) fn reduce_scatter(
    op_name: &'static str,
    whole: &[u8],
    share: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<(), DistError> {
    let datatype = checked_reduction_type(op_name, dtype)?;
    let n = count(op_name, share.len() / dtype.size())?;
    count(op_name, whole.len() / dtype.size())?;
    // SAFETY: `whole` is world × `n` elements read for the call, `share` (a distinct buffer)
    // is `n` elements written; MPI keeps no reference after returning.
    let rc = unsafe {
        ffi::MPI_Reduce_scatter_block(
            whole.as_ptr().cast(),
            share.as_mut_ptr().cast(),
            n,
            datatype,
            mpi_op(op, dtype),
            world(),
        )
    };
    check(op_name, rc)
}

/// Waits until every rank has called it.
pub(crate) fn barrier(op: &'static str) -> Result<(), DistError> {
    // SAFETY: MPI is initialised on this thread; the communicator is the world's.
    let rc = unsafe { ffi::MPI_Barrier(world()) };
    check(op, rc)
}

/// Ends every rank of the job with `code` (`MPI_Abort` on the world communicator). It is
/// called from whichever thread failed: Open MPI's abort only asks its runtime to end the
/// job, which is safe while the communication thread is inside a collective.
pub(crate) fn abort(code: c_int) {
    // SAFETY: MPI is initialised (a group exists); the communicator is the world's.
    unsafe {
        ffi::MPI_Abort(world(), code);
    }
}
