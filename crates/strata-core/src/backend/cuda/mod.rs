//! The CUDA backend, part 1: what runs on a CUDA tensor before the device has kernels of
//! strata's own. Copies (with dtype conversion and any strides), fills and the transfers to
//! and from host memory ([`copies`], written over a [`Mover`] that is the driver here);
//! every other kernel family is refused.
//!
//! - A dense copy of one dtype is one `cuMemcpyDtoDAsync`, and a fill of a dense tensor one
//!   `cuMemsetD8/D16/D32Async` (zeros byte by byte): both queued on the calling thread's
//!   current stream, ordered with the work already there, as PyTorch's.
//! - Anything else (a strided or converting copy, an 8-byte fill that no 4-byte pattern
//!   repeats) is staged: the operands' byte extents come to aligned host buffers, the CPU's
//!   kernel runs on the same plan over them, and the written extent goes back. That waits
//!   for the stream, and the buffers are host memory outside every allocator.
//! - Transfers wait for the copy unless the op asked for a non-blocking one (the pinned
//!   paths of `Tensor::to_device_non_blocking`, in [`transfer`]).
//!
//! The op entry refuses every other op on a CUDA tensor before it runs
//! ([`refuse_without_kernel`]); the kernel families below that refuse anyway (a path that
//! reached them without the entry) write nothing and leave the error for the op to report.
//! Driver errors do the same: the [`Backend`] methods cannot fail, so the first error of the
//! thread is kept ([`crate::kernel_error`]) and the op takes and returns it, which returns it.

mod copies;
mod staging;
pub(crate) mod transfer;

use std::sync::OnceLock;

use strata_alloc::backing::cuda::transfer::{self as driver, Pattern, Wait};
use strata_alloc::backing::cuda::{device_count, CudaError};

use super::args::{
    DenseSumArgs, GemmArgs, MaxPoolArgs, MaxPoolBackwardArgs, PickArgs, ScatterAddArgs,
    SoftmaxArgs, UpdateArgs,
};
use super::kernel::{BinaryOp, FloatOp, Fold, SameOp, TernaryOp};
use super::{Backend, Plan};
use crate::{DType, Device, Error, Result, Scalar};
pub(crate) use copies::Mover;

/// Devices a process can address through this backend.
const MAX_DEVICES: usize = 64;

/// The kernels of CUDA device `index`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cuda {
    index: usize,
}

static DEVICES: [Cuda; MAX_DEVICES] = {
    let mut all = [Cuda { index: 0 }; MAX_DEVICES];
    let mut i = 0;
    while i < MAX_DEVICES {
        all[i].index = i;
        i += 1;
    }
    all
};

/// The ops that run on CUDA tensors in this part: copies, conversions and fills (views run
/// no kernel, and transfers do not go through the op entry).
const OPS_WITH_KERNELS: [&str; 6] = ["copy_", "clone", "contiguous", "to", "fill_", "zero_"];

/// The backend of CUDA device `index`, or why there is none: no driver, no such device.
pub(crate) fn backend(index: usize) -> std::result::Result<&'static Cuda, String> {
    static COUNT: OnceLock<std::result::Result<usize, CudaError>> = OnceLock::new();
    let count = COUNT
        .get_or_init(device_count)
        .as_ref()
        .map_err(ToString::to_string)?;
    if index >= *count {
        return Err(CudaError::NoDevice {
            index,
            count: *count,
        }
        .to_string());
    }
    DEVICES
        .get(index)
        .ok_or_else(|| format!("strata addresses at most {MAX_DEVICES} CUDA devices"))
}

/// The error for CUDA device `index`, which the backend cannot reach: `why`.
fn no_device_error(index: usize, why: String) -> Error {
    Error::Unsupported {
        op: "to",
        message: format!("cannot reach cuda:{index}: {why}"),
    }
}

/// `Err` for op `op` on a CUDA tensor unless this part runs it: its kernel comes with the
/// CUDA kernels (NVRTC and cuBLAS), not yet built.
pub(crate) fn refuse_without_kernel(op: &'static str, device: Device) -> Result<()> {
    if OPS_WITH_KERNELS.contains(&op) {
        return Ok(());
    }
    Err(no_kernel_error(op, device))
}

fn no_kernel_error(op: &'static str, device: Device) -> Error {
    Error::Unsupported {
        op,
        message: format!(
            "`{op}` has no CUDA kernel yet: on {device} strata runs factories, views, \
             copies, `to`, fills and transfers, and the CUDA kernels of other ops come with \
             the next part of CUDA support; move the tensor with `.to_device(Device::Cpu)` \
             (or `.cpu()`) and run `{op}` there"
        ),
    }
}

/// Keeps `e` for the op to report (see [`crate::kernel_error`]).
pub(super) fn fail(e: Error) {
    crate::kernel_error::fail(e);
}

/// Keeps a driver error as the op's error.
fn driver_failed(call: &'static str, r: std::result::Result<(), CudaError>) -> bool {
    match r {
        Ok(()) => true,
        Err(e) => {
            fail(crate::routing::cuda_error(call, &e));
            false
        }
    }
}

impl Cuda {
    /// Refuses a kernel family this part has no CUDA kernel for (see the module docs).
    fn refuse(&self, family: &'static str) {
        fail(no_kernel_error(family, Device::Cuda(self.index)));
    }
}

/// The device's memory moved by the driver on the thread's current stream: host transfers
/// wait for their copy, copies and fills within the device are queued.
impl Mover for Cuda {
    unsafe fn download(&self, dst: *mut u8, src: *const u8, len: usize) -> bool {
        // SAFETY: the caller's contract.
        let r = unsafe { driver::copy_to_host(self.index, dst, src as usize, len, Wait::Done) };
        driver_failed("copy to host", r)
    }

    unsafe fn upload(&self, dst: *mut u8, src: *const u8, len: usize) -> bool {
        // SAFETY: the caller's contract.
        let r = unsafe { driver::copy_to_device(self.index, dst as usize, src, len, Wait::Done) };
        driver_failed("copy to device", r)
    }

    unsafe fn copy_within(&self, dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: the caller's contract.
        let r = unsafe {
            driver::copy_within(self.index, dst as usize, src as usize, len, Wait::Queued)
        };
        driver_failed("copy", r);
    }

    unsafe fn fill(&self, dst: *mut u8, pattern: Pattern, count: usize) {
        // SAFETY: the caller's contract.
        let r = unsafe { driver::fill(self.index, dst as usize, pattern, count, Wait::Queued) };
        driver_failed("fill", r);
    }
}

impl Backend for Cuda {
    fn device(&self) -> Device {
        Device::Cuda(self.index)
    }

    unsafe fn float_unary(&self, _: &Plan, _: FloatOp, _: DType) {
        self.refuse("unary op");
    }

    unsafe fn same_unary(&self, _: &Plan, _: SameOp, _: DType) {
        self.refuse("unary op");
    }

    unsafe fn dense_sum(&self, _: &DenseSumArgs) -> bool {
        // No fast path: the op falls back to `fold`, which refuses.
        false
    }

    unsafe fn binary(&self, _: &Plan, _: BinaryOp, _: DType, _: Option<Scalar>) {
        self.refuse("binary op");
    }

    unsafe fn ternary(&self, _: &Plan, _: TernaryOp, _: DType) {
        self.refuse("ternary op");
    }

    unsafe fn copy(&self, plan: &Plan) {
        // SAFETY: forwarded from the caller.
        unsafe { copies::copy(self, plan) }
    }

    unsafe fn copy_to_host(&self, plan: &Plan) {
        // SAFETY: forwarded from the caller.
        unsafe { copies::copy_to_host(self, plan) }
    }

    unsafe fn copy_from_host(&self, dst: *mut u8, src: &[u8]) {
        // SAFETY: the method's contract: `dst` addresses `src.len()` writable device bytes.
        unsafe { self.upload(dst, src.as_ptr(), src.len()) };
    }

    unsafe fn fill(&self, plan: &Plan, value: Scalar) {
        // SAFETY: forwarded from the caller.
        unsafe { copies::fill(self, plan, value) }
    }

    unsafe fn fold(&self, _: &Plan, _: DType, _: DType, _: Fold) {
        self.refuse("reduction");
    }

    unsafe fn scan_sum(&self, _: &Plan, _: DType) {
        self.refuse("cumsum");
    }

    unsafe fn arg_best(&self, _: &Plan, _: DType, _: bool) {
        self.refuse("argmax");
    }

    unsafe fn softmax(&self, _: &SoftmaxArgs) {
        self.refuse("softmax");
    }

    unsafe fn gemm(&self, _: &GemmArgs<'_>) {
        self.refuse("matmul");
    }

    unsafe fn pick(&self, _: &PickArgs<'_>) {
        self.refuse("index_select");
    }

    unsafe fn scatter_add(&self, _: &ScatterAddArgs<'_>) {
        self.refuse("scatter_add");
    }

    unsafe fn max_pool2d(&self, _: &MaxPoolArgs<'_>) {
        self.refuse("max_pool2d");
    }

    unsafe fn max_pool2d_backward(&self, _: &MaxPoolBackwardArgs) {
        self.refuse("max_pool2d_backward");
    }

    unsafe fn update(&self, _: &UpdateArgs<'_>) {
        self.refuse("optimizer step");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_copies_and_fills_pass_the_entry_and_the_refusal_says_what_to_do() {
        for op in OPS_WITH_KERNELS {
            assert!(refuse_without_kernel(op, Device::Cuda(0)).is_ok());
        }
        let e = refuse_without_kernel("add", Device::Cuda(0))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("add: `add` has no CUDA kernel yet: on cuda:0")
                && e.contains(".to_device(Device::Cpu)"),
            "{e}"
        );
    }

    #[test]
    fn a_refused_family_leaves_its_first_error_for_the_op() {
        let _serial = crate::kernel_error::TEST_SERIAL
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        assert!(crate::kernel_error::take().is_ok());
        let gpu = Cuda { index: 0 };
        gpu.refuse("matmul");
        gpu.refuse("softmax");
        let e = crate::kernel_error::take().unwrap_err().to_string();
        assert!(e.starts_with("matmul:"), "{e}");
        assert!(crate::kernel_error::take().is_ok());
    }
}
