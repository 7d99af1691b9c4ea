//! The CUDA backend, part 1: what runs on a CUDA tensor before the device has kernels of
//! strata's own. Copies (with dtype conversion and any strides), fills and the transfers to
//! and from host memory; every other kernel family is refused.
//!
//! - A dense copy of one dtype is one `cuMemcpyDtoDAsync`, and a fill of a dense tensor one
//!   `cuMemsetD8/D16/D32Async` (8-byte values whose halves agree too): both queued on the
//!   calling thread's current stream, ordered with the work already there, as PyTorch's.
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
//! thread is kept and [`take_error`] hands it to the op, which returns it.

mod staging;
pub(crate) mod transfer;

use std::cell::RefCell;
use std::sync::OnceLock;

use strata_alloc::backing::cuda::transfer::{self as driver, Pattern, Wait};
use strata_alloc::backing::cuda::{device_count, CudaError};

use super::args::{
    DenseSumArgs, GemmArgs, MaxPoolArgs, MaxPoolBackwardArgs, PickArgs, ScatterAddArgs,
    SoftmaxArgs, UpdateArgs,
};
use super::kernel::{BinaryOp, FloatOp, Fold, SameOp, TernaryOp};
use super::{cpu, Backend, Plan};
use crate::{DType, Device, Error, Result, Scalar};
use staging::{covers_extent, extent, is_dense, overlaps, rebased, HostBuffer};

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

thread_local! {
    /// The first error of a CUDA kernel on this thread that no op has reported yet.
    static FAILED: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// Keeps `e` for the op to report, unless an earlier error is still waiting.
pub(super) fn fail(e: Error) {
    FAILED.with(|f| {
        f.borrow_mut().get_or_insert(e);
    });
}

/// Hands this thread's waiting kernel error to the op, if there is one.
pub(crate) fn take_error() -> Result<()> {
    match FAILED.with(|f| f.borrow_mut().take()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
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
    fn device_index(&self) -> usize {
        self.index
    }

    /// Refuses a kernel family this part has no CUDA kernel for (see the module docs).
    fn refuse(&self, family: &'static str) {
        fail(no_kernel_error(family, Device::Cuda(self.index)));
    }

    /// Brings `len` bytes of device memory at `src` into `dst`, waiting for them.
    ///
    /// # Safety
    /// `src` addresses `len` readable device bytes, `dst` `len` writable host bytes.
    unsafe fn download(&self, dst: *mut u8, src: *const u8, len: usize) -> bool {
        // SAFETY: the caller's contract.
        let r = unsafe { driver::copy_to_host(self.index, dst, src as usize, len, Wait::Done) };
        driver_failed("copy to host", r)
    }

    /// Sends `len` host bytes at `src` to device memory at `dst`, waiting for the copy.
    ///
    /// # Safety
    /// `src` addresses `len` readable host bytes, `dst` `len` writable device bytes.
    unsafe fn upload(&self, dst: *mut u8, src: *const u8, len: usize) -> bool {
        // SAFETY: the caller's contract.
        let r = unsafe { driver::copy_to_device(self.index, dst as usize, src, len, Wait::Done) };
        driver_failed("copy to device", r)
    }

    /// Brings operand `k`'s extent to a new host buffer.
    ///
    /// # Safety
    /// Operand `k`'s extent must be readable device memory.
    unsafe fn stage(&self, plan: &Plan, k: usize) -> Option<HostBuffer> {
        let len = extent(plan, k);
        let mut buf = HostBuffer::new(len);
        // SAFETY: the caller's contract; the buffer holds `len` bytes.
        unsafe { self.download(buf.ptr(), plan.ptrs[k], len) }.then_some(buf)
    }

    /// Runs `host` on `plan` rebased onto host copies of its operands (operand 0 the output,
    /// on the device unless `output_on_host`), and writes the output's extent back.
    ///
    /// # Safety
    /// The plan's contract: device operands valid for the loop and locked, operand 0
    /// writable (host memory the caller owns when `output_on_host`).
    unsafe fn staged(&self, plan: &Plan, output_on_host: bool, host: impl FnOnce(&Plan)) {
        let mut inputs = Vec::with_capacity(plan.num_operands());
        for k in 1..plan.num_operands() {
            // SAFETY: the caller's contract: inputs are readable device memory.
            match unsafe { self.stage(plan, k) } {
                Some(b) => inputs.push(b),
                None => return,
            }
        }
        let mut output = None;
        let out_ptr = if output_on_host {
            plan.ptrs[0]
        } else {
            let staged = if covers_extent(plan, 0) {
                Some(HostBuffer::new(extent(plan, 0)))
            } else {
                // SAFETY: the caller's contract: the output is device memory.
                unsafe { self.stage(plan, 0) }
            };
            let Some(buf) = output.insert(staged) else {
                return;
            };
            buf.ptr()
        };
        let mut ptrs = vec![out_ptr];
        ptrs.extend(inputs.iter_mut().map(HostBuffer::ptr));
        host(&rebased(plan, &ptrs));
        if let Some(Some(mut buf)) = output {
            // SAFETY: the output's extent is writable device memory (the caller's contract);
            // the buffer holds that many bytes.
            unsafe { self.upload(plan.ptrs[0], buf.ptr(), extent(plan, 0)) };
        }
    }

    /// Copies operand 1 of `plan` (host memory) into operand 0 (this device's memory),
    /// converting dtypes; done when this returns.
    ///
    /// # Safety
    /// The plan's contract: operand 0 writable device memory, operand 1 readable host
    /// memory, both locked.
    unsafe fn copy_from_host_plan(&self, plan: &Plan) {
        let n = plan.numel();
        if n == 0 {
            return;
        }
        if plan.dtypes[0] == plan.dtypes[1] && is_dense(plan, 0) && is_dense(plan, 1) {
            let len = n * plan.dtypes[0].size();
            // SAFETY: both operands are `len` dense bytes (the caller's contract).
            unsafe { self.upload(plan.ptrs[0], plan.ptrs[1], len) };
            return;
        }
        let len = extent(plan, 0);
        let staged = if covers_extent(plan, 0) {
            Some(HostBuffer::new(len))
        } else {
            // SAFETY: the output is device memory (the caller's contract).
            unsafe { self.stage(plan, 0) }
        };
        let Some(mut buf) = staged else {
            return;
        };
        // SAFETY: the CPU's copy reads the caller's host operand and writes the buffer, which
        // holds the output's extent.
        unsafe { cpu::Cpu.copy(&rebased(plan, &[buf.ptr(), plan.ptrs[1]])) };
        // SAFETY: the output's extent is writable device memory; the buffer holds it.
        unsafe { self.upload(plan.ptrs[0], buf.ptr(), len) };
    }

    /// The bytes of `value` as one element of `dtype`.
    fn element_bytes(value: Scalar, dtype: DType) -> u64 {
        let mut buf = HostBuffer::new(8);
        let plan = Plan::linear(1, std::iter::once((buf.ptr(), dtype)), false);
        // SAFETY: the buffer holds 16 bytes, enough for one element of any dtype.
        unsafe { cpu::Cpu.fill(&plan, value) };
        let mut bytes = [0u8; 8];
        // SAFETY: the buffer holds at least 8 initialised bytes.
        unsafe { std::ptr::copy_nonoverlapping(buf.ptr(), bytes.as_mut_ptr(), 8) };
        let used = dtype.size().min(8);
        bytes[used..].fill(0);
        u64::from_le_bytes(bytes)
    }

    /// The memset pattern writing `count` elements of `size` bytes holding `bits`, with the
    /// number of pattern units, when one exists.
    fn pattern(bits: u64, size: usize, count: usize) -> Option<(Pattern, usize)> {
        match size {
            1 => Some((Pattern::U8(bits as u8), count)),
            2 => Some((Pattern::U16(bits as u16), count)),
            4 => Some((Pattern::U32(bits as u32), count)),
            8 if bits as u32 == (bits >> 32) as u32 => Some((Pattern::U32(bits as u32), 2 * count)),
            _ => None,
        }
    }
}

impl Backend for Cuda {
    fn device(&self) -> Device {
        Device::Cuda(self.device_index())
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
        let n = plan.numel();
        if n == 0 {
            return;
        }
        let len = n * plan.dtypes[0].size();
        let (dst, src) = (plan.ptrs[0] as usize, plan.ptrs[1] as usize);
        if plan.dtypes[0] == plan.dtypes[1]
            && is_dense(plan, 0)
            && is_dense(plan, 1)
            && !overlaps(dst, src, len)
        {
            // SAFETY: both operands are `len` dense device bytes (the plan's contract), apart.
            let r = unsafe { driver::copy_within(self.index, dst, src, len, Wait::Queued) };
            driver_failed("copy", r);
            return;
        }
        // SAFETY: forwarded from the caller; the CPU's copy runs on host buffers.
        unsafe { self.staged(plan, false, |p| cpu::Cpu.copy(p)) }
    }

    unsafe fn copy_to_host(&self, plan: &Plan) {
        let n = plan.numel();
        if n == 0 {
            return;
        }
        if plan.dtypes[0] == plan.dtypes[1] && is_dense(plan, 0) && is_dense(plan, 1) {
            let len = n * plan.dtypes[0].size();
            // SAFETY: operand 1 is `len` dense device bytes and operand 0 `len` host bytes
            // the caller owns (the method's contract).
            unsafe { self.download(plan.ptrs[0], plan.ptrs[1], len) };
            return;
        }
        // SAFETY: forwarded from the caller; the CPU's copy writes the caller's host memory
        // from a host copy of the source.
        unsafe { self.staged(plan, true, |p| cpu::Cpu.copy(p)) }
    }

    unsafe fn copy_from_host(&self, dst: *mut u8, src: &[u8]) {
        // SAFETY: the method's contract: `dst` addresses `src.len()` writable device bytes.
        unsafe { self.upload(dst, src.as_ptr(), src.len()) };
    }

    unsafe fn fill(&self, plan: &Plan, value: Scalar) {
        let n = plan.numel();
        if n == 0 {
            return;
        }
        let dtype = plan.dtypes[0];
        let bits = Self::element_bytes(value, dtype);
        if is_dense(plan, 0) {
            if let Some((pattern, count)) = Self::pattern(bits, dtype.size(), n) {
                // SAFETY: operand 0 is `n` dense, writable device elements (the plan's
                // contract), aligned to their size.
                let r = unsafe {
                    driver::fill(
                        self.index,
                        plan.ptrs[0] as usize,
                        pattern,
                        count,
                        Wait::Queued,
                    )
                };
                driver_failed("fill", r);
                return;
            }
        }
        // SAFETY: forwarded from the caller; the CPU's fill runs on a host buffer.
        unsafe { self.staged(plan, false, |p| cpu::Cpu.fill(p, value)) }
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
    fn fills_find_the_memset_pattern_that_repeats_the_element() {
        let f32_one = Cuda::element_bytes(Scalar::Float(1.0), DType::F32);
        assert_eq!(f32_one, 1.0f32.to_bits() as u64);
        assert_eq!(
            Cuda::pattern(f32_one, 4, 10),
            Some((Pattern::U32(0x3f80_0000), 10))
        );
        let f64_zero = Cuda::element_bytes(Scalar::Int(0), DType::F64);
        assert_eq!(Cuda::pattern(f64_zero, 8, 3), Some((Pattern::U32(0), 6)));
        let f64_one = Cuda::element_bytes(Scalar::Float(1.0), DType::F64);
        assert_eq!(Cuda::pattern(f64_one, 8, 3), None);
        let bf16 = Cuda::element_bytes(Scalar::Float(-2.0), DType::BF16);
        assert_eq!(Cuda::pattern(bf16, 2, 5), Some((Pattern::U16(0xc000), 5)));
        let flag = Cuda::element_bytes(Scalar::Bool(true), DType::Bool);
        assert_eq!(Cuda::pattern(flag, 1, 2), Some((Pattern::U8(1), 2)));
    }

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
        assert!(take_error().is_ok());
        let gpu = Cuda { index: 0 };
        gpu.refuse("matmul");
        gpu.refuse("softmax");
        let e = take_error().unwrap_err().to_string();
        assert!(e.starts_with("matmul:"), "{e}");
        assert!(take_error().is_ok());
    }
}
