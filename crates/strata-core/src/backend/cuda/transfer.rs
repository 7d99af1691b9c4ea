//! Non-blocking transfers between pinned host memory and a CUDA device: the copy is queued
//! on the calling thread's current stream and an event recorded after it, which the caller
//! attaches to the pinned block (not reused before it completes) and, for a copy to the
//! host, to the destination (every host read waits for it).

use strata_alloc::backing::cuda::transfer::{self as driver, Wait};
use strata_alloc::HostEvent;

use super::copies::same_bytes;
use crate::backend::Backend;
use crate::backend::Plan;
use crate::routing::cuda_error;
use crate::Result;

/// Queues the copy of `len` bytes of pinned host memory at `src` to device address `dst`
/// of CUDA device `index`, and returns the event that completes with it.
///
/// # Safety
/// `dst` must address `len` writable bytes of the device's memory; `src` `len` bytes of
/// page-locked host memory that stay valid and unwritten until the event completes.
unsafe fn upload_queued(
    index: usize,
    dst: *mut u8,
    src: *const u8,
    len: usize,
) -> Result<HostEvent> {
    // SAFETY: the caller's contract.
    unsafe { driver::copy_to_device(index, dst as usize, src, len, Wait::Queued) }
        .map_err(|e| cuda_error("to", &e))?;
    recorded(index)
}

/// Queues the copy of `len` bytes at device address `src` of CUDA device `index` to pinned
/// host memory at `dst`, and returns the event that completes with it.
///
/// # Safety
/// `src` must address `len` readable bytes of the device's memory; `dst` `len` bytes of
/// page-locked host memory that nothing reads or writes until the event completes.
unsafe fn download_queued(
    index: usize,
    dst: *mut u8,
    src: *const u8,
    len: usize,
) -> Result<HostEvent> {
    // SAFETY: the caller's contract.
    unsafe { driver::copy_to_host(index, dst, src as usize, len, Wait::Queued) }
        .map_err(|e| cuda_error("to", &e))?;
    recorded(index)
}

/// An event recorded now on the current stream of device `index`.
fn recorded(index: usize) -> Result<HostEvent> {
    driver::record_on_current(index)
        .map(HostEvent::from_cuda)
        .map_err(|e| cuda_error("to", &e))
}

/// Copies operand 1 of `plan` (host memory) into operand 0 (memory of CUDA device
/// `index`), converting dtypes: PyTorch's host-to-device `copy_`. With `queued`, a plan that
/// is one dense run of one dtype (the bytes as they are) is only queued, and the event that
/// completes with it returned; otherwise the copy is done when this returns. A driver error
/// is left for the op ([`super::take_error`]).
///
/// # Safety
/// The plan's contract: operand 0 writable device memory, operand 1 readable host memory,
/// both locked; with `queued`, operand 1 page-locked and unwritten until the event completes.
pub(crate) unsafe fn upload(index: usize, plan: &Plan, queued: bool) -> Option<HostEvent> {
    let gpu = super::backend(index).ok()?;
    if queued && same_bytes(plan) {
        let len = plan.numel() * plan.dtypes[0].size();
        // SAFETY: the caller's contract; both operands are `len` dense bytes.
        return unsafe { upload_queued(index, plan.ptrs[0], plan.ptrs[1], len) }
            .map_err(super::fail)
            .ok();
    }
    // SAFETY: forwarded from the caller.
    unsafe { super::copies::copy_from_host(gpu, plan) };
    None
}

/// Copies operand 1 of `plan` (memory of CUDA device `index`) into operand 0 (host memory),
/// converting dtypes: PyTorch's device-to-host `copy_`. `queued` as for [`upload`].
///
/// # Safety
/// The plan's contract: operand 1 readable device memory, locked; operand 0 host memory the
/// caller owns; with `queued`, operand 0 page-locked and untouched until the event completes.
pub(crate) unsafe fn download(index: usize, plan: &Plan, queued: bool) -> Option<HostEvent> {
    let gpu = super::backend(index).ok()?;
    if queued && same_bytes(plan) {
        let len = plan.numel() * plan.dtypes[0].size();
        // SAFETY: the caller's contract; both operands are `len` dense bytes.
        return unsafe { download_queued(index, plan.ptrs[0], plan.ptrs[1], len) }
            .map_err(super::fail)
            .ok();
    }
    // SAFETY: forwarded from the caller.
    unsafe { gpu.copy_to_host(plan) };
    None
}
