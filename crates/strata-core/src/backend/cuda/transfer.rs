//! Copies between host memory and a CUDA device for `to_device`: done when they return, or,
//! when asked and the bytes move as they are, only queued on the calling thread's current
//! stream with an event recorded after them, which the caller attaches to the pinned block
//! (not reused before it completes) and, for a copy to the host, to the destination (every
//! host read waits for it).

use strata_alloc::backing::cuda::synchronize_device as driver_sync;
use strata_alloc::backing::cuda::transfer::{self as driver, Wait};
use strata_alloc::HostEvent;

use super::copies::{self, same_bytes};
use crate::backend::{Backend, Plan};
use crate::routing::cuda_error;

/// Which way a copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Host memory (operand 1) to the device (operand 0).
    ToDevice,
    /// The device (operand 1) to host memory (operand 0).
    ToHost,
}

/// Copies operand 1 of `plan` into operand 0 between host memory and CUDA device `index`,
/// converting dtypes: PyTorch's cross-device `copy_`. With `queued`, a plan that is one
/// dense run of one dtype (the bytes as they are) is only queued, and the event that
/// completes with it returned; otherwise the copy is done when this returns. A driver error
/// is left for the op ([`crate::kernel_error`]).
///
/// # Safety
/// The plan's contract, each operand in the memory `direction` says, both locked; with
/// `queued`, the host operand page-locked and untouched (unwritten when read, unread when
/// written) until the event completes.
pub(crate) unsafe fn copy(
    index: usize,
    plan: &Plan,
    direction: Direction,
    queued: bool,
) -> Option<HostEvent> {
    let gpu = match super::backend(index) {
        Ok(gpu) => gpu,
        Err(why) => {
            super::fail(super::no_device_error(index, why));
            return None;
        }
    };
    if !(queued && same_bytes(plan)) {
        match direction {
            // SAFETY: forwarded from the caller.
            Direction::ToDevice => unsafe { copies::copy_from_host(gpu, plan) },
            // SAFETY: forwarded from the caller.
            Direction::ToHost => unsafe { gpu.copy_to_host(plan) },
        }
        return None;
    }
    let len = plan.numel() * plan.dtypes[0].size();
    let (dst, src) = (plan.ptrs[0], plan.ptrs[1]);
    let queued = match direction {
        // SAFETY: the caller's contract; both operands are `len` dense bytes.
        Direction::ToDevice => unsafe {
            driver::copy_to_device(index, dst as usize, src, len, Wait::Queued)
        },
        // SAFETY: as above.
        Direction::ToHost => unsafe {
            driver::copy_to_host(index, dst, src as usize, len, Wait::Queued)
        },
    }
    .and_then(|()| driver::record_on_current(index));
    match queued {
        Ok(event) => Some(HostEvent::from_cuda(event)),
        Err(e) => {
            // The copy may be queued without an event to hold its host memory by: wait for
            // the device, so that nothing it reads or writes is reused under it.
            let _ = driver_sync(index);
            super::fail(cuda_error("to", &e));
            None
        }
    }
}
