//! The CUDA backend's copies and fills, written over a [`Mover`] (how bytes reach the
//! device's memory): the driver on a GPU, plain host memory in the tests below, so that the
//! fast paths, the staging and the memset patterns are checked on every machine.
//!
//! A dense copy of one dtype is one copy within the device, a dense fill one memset whose
//! pattern repeats the element; anything else is staged ([`super::staging`]): the operands'
//! extents come to host buffers, the CPU's kernel runs on the plan rebased onto them, and
//! the output's extent goes back.

use strata_alloc::backing::cuda::transfer::Pattern;

use super::staging::{covers_extent, extent, is_dense, overlaps, rebased, HostBuffer};
use crate::backend::{cpu, Backend, Plan};
use crate::{DType, Scalar};

/// How bytes move to, from and within a device's memory. A method that fails keeps its
/// error for the op ([`super::fail`]) and returns false (or nothing).
pub(crate) trait Mover {
    /// Brings `len` bytes of device memory at `src` to host memory at `dst`, done on return.
    ///
    /// # Safety
    /// `src` addresses `len` readable device bytes, `dst` `len` writable host bytes.
    unsafe fn download(&self, dst: *mut u8, src: *const u8, len: usize) -> bool;

    /// Sends `len` host bytes at `src` to device memory at `dst`, done on return.
    ///
    /// # Safety
    /// `src` addresses `len` readable host bytes, `dst` `len` writable device bytes.
    unsafe fn upload(&self, dst: *mut u8, src: *const u8, len: usize) -> bool;

    /// Copies `len` bytes within the device's memory (queued, in stream order).
    ///
    /// # Safety
    /// Both address `len` bytes of device memory, `dst` writable, not overlapping.
    unsafe fn copy_within(&self, dst: *mut u8, src: *const u8, len: usize);

    /// Writes `pattern` `count` times from `dst` (queued, in stream order).
    ///
    /// # Safety
    /// `dst` addresses `count` writable device elements of the pattern's width, aligned.
    unsafe fn fill(&self, dst: *mut u8, pattern: Pattern, count: usize);
}

/// Brings operand `k`'s extent to a new host buffer.
///
/// # Safety
/// Operand `k`'s extent must be readable device memory.
unsafe fn stage(m: &impl Mover, plan: &Plan, k: usize) -> Option<HostBuffer> {
    let len = extent(plan, k);
    let mut buf = host_buffer(len)?;
    // SAFETY: the caller's contract; the buffer holds `len` bytes.
    unsafe { m.download(buf.ptr(), plan.ptrs[k], len) }.then_some(buf)
}

/// A host buffer of `len` bytes, or nothing with the error kept for the op.
fn host_buffer(len: usize) -> Option<HostBuffer> {
    HostBuffer::new(len).map_err(super::fail).ok()
}

/// A host buffer for the output's extent: empty when the output writes all of it, else
/// the device's bytes (so bytes between its elements go back unchanged).
///
/// # Safety
/// The output's extent must be readable device memory.
unsafe fn stage_output(m: &impl Mover, plan: &Plan) -> Option<HostBuffer> {
    if covers_extent(plan, 0) {
        host_buffer(extent(plan, 0))
    } else {
        // SAFETY: the caller's contract.
        unsafe { stage(m, plan, 0) }
    }
}

/// Runs `host` on `plan` rebased onto host copies of its operands (operand 0 the output,
/// on the device unless `output_on_host`), and writes a device output's extent back.
///
/// # Safety
/// The plan's contract: device operands valid for the loop and locked, operand 0 writable
/// (host memory the caller owns when `output_on_host`).
unsafe fn staged(m: &impl Mover, plan: &Plan, output_on_host: bool, host: impl FnOnce(&Plan)) {
    let mut inputs = Vec::with_capacity(plan.num_operands());
    for k in 1..plan.num_operands() {
        // SAFETY: the caller's contract: inputs are readable device memory.
        match unsafe { stage(m, plan, k) } {
            Some(b) => inputs.push(b),
            None => return,
        }
    }
    let mut output = None;
    let out_ptr = if output_on_host {
        plan.ptrs[0]
    } else {
        // SAFETY: the caller's contract: the output is device memory.
        let Some(buf) = output.insert(unsafe { stage_output(m, plan) }) else {
            return;
        };
        buf.ptr()
    };
    let mut ptrs = vec![out_ptr];
    ptrs.extend(inputs.iter_mut().map(HostBuffer::ptr));
    host(&rebased(plan, &ptrs));
    if let Some(Some(mut buf)) = output {
        // SAFETY: the output's extent is writable device memory (the caller's contract); the
        // buffer holds that many bytes.
        unsafe { m.upload(plan.ptrs[0], buf.ptr(), extent(plan, 0)) };
    }
}

/// Whether a copy over `plan` moves bytes as they are: one dense run of one dtype.
pub(super) fn same_bytes(plan: &Plan) -> bool {
    plan.dtypes[0] == plan.dtypes[1] && is_dense(plan, 0) && is_dense(plan, 1)
}

/// Copies operand 1 into operand 0, both in the device's memory, converting dtypes.
///
/// # Safety
/// [`Backend::copy`]'s contract, with device memory.
pub(super) unsafe fn copy(m: &impl Mover, plan: &Plan) {
    let n = plan.numel();
    if n == 0 {
        return;
    }
    let len = n * plan.dtypes[0].size();
    let (dst, src) = (plan.ptrs[0], plan.ptrs[1]);
    if same_bytes(plan) && !overlaps(dst as usize, src as usize, len) {
        // SAFETY: both operands are `len` dense device bytes (the plan's contract), apart.
        unsafe { m.copy_within(dst, src, len) };
        return;
    }
    // SAFETY: forwarded from the caller; the CPU's copy runs on host buffers.
    unsafe { staged(m, plan, false, |p| cpu::Cpu.copy(p)) }
}

/// Copies operand 1 (device memory) into operand 0 (host memory), converting dtypes.
///
/// # Safety
/// [`Backend::copy_to_host`]'s contract.
pub(super) unsafe fn copy_to_host(m: &impl Mover, plan: &Plan) {
    let n = plan.numel();
    if n == 0 {
        return;
    }
    if same_bytes(plan) {
        let len = n * plan.dtypes[0].size();
        // SAFETY: operand 1 is `len` dense device bytes and operand 0 `len` host bytes the
        // caller owns.
        unsafe { m.download(plan.ptrs[0], plan.ptrs[1], len) };
        return;
    }
    // SAFETY: forwarded; the CPU's copy writes the caller's host memory from a host copy of
    // the source.
    unsafe { staged(m, plan, true, |p| cpu::Cpu.copy(p)) }
}

/// Copies operand 1 (host memory) into operand 0 (device memory), converting dtypes; done
/// when this returns.
///
/// # Safety
/// The plan's contract: operand 0 writable device memory, operand 1 readable host memory,
/// both locked.
pub(super) unsafe fn copy_from_host(m: &impl Mover, plan: &Plan) {
    let n = plan.numel();
    if n == 0 {
        return;
    }
    if same_bytes(plan) {
        let len = n * plan.dtypes[0].size();
        // SAFETY: both operands are `len` dense bytes (the caller's contract).
        unsafe { m.upload(plan.ptrs[0], plan.ptrs[1], len) };
        return;
    }
    // SAFETY: the output is device memory (the caller's contract).
    let Some(mut buf) = (unsafe { stage_output(m, plan) }) else {
        return;
    };
    // SAFETY: the CPU's copy reads the caller's host operand and writes the buffer, which
    // holds the output's extent.
    unsafe { cpu::Cpu.copy(&rebased(plan, &[buf.ptr(), plan.ptrs[1]])) };
    // SAFETY: the output's extent is writable device memory; the buffer holds it.
    unsafe { m.upload(plan.ptrs[0], buf.ptr(), extent(plan, 0)) };
}

/// Sets every element of operand 0 (device memory) to `value`.
///
/// # Safety
/// [`Backend::fill`]'s contract, with device memory.
pub(super) unsafe fn fill(m: &impl Mover, plan: &Plan, value: Scalar) {
    let n = plan.numel();
    if n == 0 {
        return;
    }
    let dtype = plan.dtypes[0];
    if is_dense(plan, 0) {
        if let Some((pattern, count)) = pattern(element_bytes(value, dtype), dtype.size(), n) {
            // SAFETY: operand 0 is `n` dense, writable device elements (the plan's contract),
            // aligned to their size.
            unsafe { m.fill(plan.ptrs[0], pattern, count) };
            return;
        }
    }
    // SAFETY: forwarded from the caller; the CPU's fill runs on a host buffer.
    unsafe { staged(m, plan, false, |p| cpu::Cpu.fill(p, value)) }
}

/// The bytes of `value` as one element of `dtype` (little-endian, zero above its size).
fn element_bytes(value: Scalar, dtype: DType) -> u64 {
    let mut word = 0u64;
    let ptr = (&mut word as *mut u64).cast::<u8>();
    let plan = Plan::linear(1, &[(ptr, dtype)], false);
    // SAFETY: the word holds 8 bytes, aligned for any dtype's one element (at most 8 bytes).
    unsafe { cpu::Cpu.fill(&plan, value) };
    u64::from_le(word)
}

/// The memset pattern that writes `count` elements of `size` bytes holding `bits`, with the
/// number of pattern units, when one exists: zeros byte by byte (`cuMemsetD8`, as PyTorch's
/// `zeros`), else the element's own width.
fn pattern(bits: u64, size: usize, count: usize) -> Option<(Pattern, usize)> {
    if bits == 0 {
        return Some((Pattern::U8(0), count * size));
    }
    match size {
        1 => Some((Pattern::U8(bits as u8), count)),
        2 => Some((Pattern::U16(bits as u16), count)),
        4 => Some((Pattern::U32(bits as u32), count)),
        8 if bits as u32 == (bits >> 32) as u32 => Some((Pattern::U32(bits as u32), 2 * count)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::backend::Operand;

    /// "Device memory" that is host memory, counting what crosses over, so the backend's
    /// logic runs here exactly as on a GPU.
    #[derive(Default)]
    struct HostMemory {
        calls: RefCell<Vec<&'static str>>,
    }

    impl HostMemory {
        fn took(&self) -> Vec<&'static str> {
            std::mem::take(&mut self.calls.borrow_mut())
        }
    }

    impl Mover for HostMemory {
        unsafe fn download(&self, dst: *mut u8, src: *const u8, len: usize) -> bool {
            self.calls.borrow_mut().push("download");
            // SAFETY: the trait's contract, over host memory.
            unsafe { std::ptr::copy(src, dst, len) };
            true
        }

        unsafe fn upload(&self, dst: *mut u8, src: *const u8, len: usize) -> bool {
            self.calls.borrow_mut().push("upload");
            // SAFETY: as above.
            unsafe { std::ptr::copy(src, dst, len) };
            true
        }

        unsafe fn copy_within(&self, dst: *mut u8, src: *const u8, len: usize) {
            self.calls.borrow_mut().push("copy_within");
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        }

        unsafe fn fill(&self, dst: *mut u8, pattern: Pattern, count: usize) {
            self.calls.borrow_mut().push("memset");
            for i in 0..count {
                // SAFETY: as above: `count` aligned elements of the pattern's width.
                unsafe {
                    match pattern {
                        Pattern::U8(v) => dst.add(i).write(v),
                        Pattern::U16(v) => dst.cast::<u16>().add(i).write(v),
                        Pattern::U32(v) => dst.cast::<u32>().add(i).write(v),
                    }
                }
            }
        }
    }

    fn operand<T>(v: &mut [T], strides: &[usize], dtype: DType) -> Operand {
        Operand {
            ptr: v.as_mut_ptr().cast(),
            strides: strides.to_vec(),
            dtype,
        }
    }

    fn order(shape: &[usize]) -> Vec<usize> {
        (0..shape.len()).rev().collect()
    }

    #[test]
    fn a_dense_copy_of_one_dtype_is_one_copy_within_the_device() {
        let m = HostMemory::default();
        let mut src: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let mut dst = vec![0f32; 12];
        let ops = [
            operand(&mut dst, &[4, 1], DType::F32),
            operand(&mut src, &[4, 1], DType::F32),
        ];
        let plan = Plan::new(&[3, 4], &ops, &order(&[3, 4]), true);
        // SAFETY: both plans' operands are our own vectors, sized for the loop.
        unsafe { copy(&m, &plan) };
        assert_eq!(m.took(), ["copy_within"]);
        assert_eq!(dst, src);
    }

    #[test]
    fn a_transposed_converting_copy_is_staged_and_leaves_gaps_alone() {
        let m = HostMemory::default();
        // Source: a [3, 4] f64 matrix read transposed as [4, 3].
        let mut src: Vec<f64> = (0..12).map(|i| i as f64 + 0.5).collect();
        // Output: every other f32 of a 24-element buffer (a strided view), the gaps -1.
        let mut dst = vec![-1f32; 24];
        let ops = [
            operand(&mut dst, &[6, 2], DType::F32),
            operand(&mut src, &[1, 4], DType::F64),
        ];
        let plan = Plan::new(&[4, 3], &ops, &order(&[4, 3]), true);
        // SAFETY: as above.
        unsafe { copy(&m, &plan) };
        assert_eq!(m.took(), ["download", "download", "upload"]);
        for r in 0..4 {
            for c in 0..3 {
                assert_eq!(dst[r * 6 + c * 2], (c * 4 + r) as f32 + 0.5);
                assert_eq!(dst[r * 6 + c * 2 + 1], -1.0, "a gap was written");
            }
        }
    }

    #[test]
    fn a_copy_onto_an_overlapping_range_is_staged() {
        let m = HostMemory::default();
        let mut buf: Vec<i32> = (0..8).collect();
        let base = buf.as_mut_ptr();
        // dst = buf[2..8], src = buf[0..6]: same bytes, overlapping.
        let ops = [
            Operand {
                ptr: base.wrapping_add(2).cast(),
                strides: vec![1],
                dtype: DType::I32,
            },
            Operand {
                ptr: base.cast(),
                strides: vec![1],
                dtype: DType::I32,
            },
        ];
        let plan = Plan::new(&[6], &ops, &[0], false);
        // SAFETY: both operands lie inside `buf`.
        unsafe { copy(&m, &plan) };
        assert_eq!(m.took(), ["download", "upload"]);
        assert_eq!(buf, [0, 1, 0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn transfers_move_bytes_as_they_are_or_stage_a_conversion() {
        let m = HostMemory::default();
        let mut device: Vec<f32> = (0..6).map(|i| i as f32 * 1.5).collect();
        let mut host = vec![0f32; 6];
        let ops = [
            operand(&mut host, &[1], DType::F32),
            operand(&mut device, &[1], DType::F32),
        ];
        // SAFETY: our own vectors.
        unsafe { copy_to_host(&m, &Plan::new(&[6], &ops, &[0], false)) };
        assert_eq!((m.took(), &host), (vec!["download"], &device));
        // Down as i64 from a column of a [3, 2] matrix.
        let mut wide = vec![0i64; 3];
        let ops = [
            operand(&mut wide, &[1], DType::I64),
            operand(&mut device, &[2], DType::F32),
        ];
        // SAFETY: as above.
        unsafe { copy_to_host(&m, &Plan::new(&[3], &ops, &[0], false)) };
        assert_eq!((m.took(), wide), (vec!["download"], vec![0, 3, 6]));
        // Up as bf16 into a column, the other column untouched.
        let mut up = vec![half::bf16::from_f32(9.0); 6];
        let mut src = vec![1.0f64, 2.0, 3.0];
        let ops = [
            operand(&mut up, &[2], DType::BF16),
            operand(&mut src, &[1], DType::F64),
        ];
        // SAFETY: as above.
        unsafe { copy_from_host(&m, &Plan::new(&[3], &ops, &[0], false)) };
        assert_eq!(m.took(), ["download", "upload"]);
        let up: Vec<f32> = up.iter().map(|v| v.to_f32()).collect();
        assert_eq!(up, [1.0, 9.0, 2.0, 9.0, 3.0, 9.0]);
    }

    #[test]
    fn fills_are_one_memset_where_a_pattern_repeats_the_element_and_staged_otherwise() {
        let m = HostMemory::default();
        for (value, dtype) in [
            (Scalar::Float(1.5), DType::F32),
            (Scalar::Int(0), DType::F64),
            (Scalar::Float(-2.0), DType::BF16),
            (Scalar::Bool(true), DType::Bool),
            (Scalar::Int(-7), DType::I32),
        ] {
            let mut buf = vec![0u64; 4];
            let ops = [Operand {
                ptr: buf.as_mut_ptr().cast(),
                strides: vec![1],
                dtype,
            }];
            let n = 32 / dtype.size();
            let plan = Plan::new(&[n], &ops, &[0], false);
            // SAFETY: 32 bytes hold `n` elements of `dtype`.
            unsafe { fill(&m, &plan, value) };
            assert_eq!(m.took(), ["memset"], "{dtype}");
            let mut want = vec![0u64; 4];
            let ops = [Operand {
                ptr: want.as_mut_ptr().cast(),
                strides: vec![1],
                dtype,
            }];
            // SAFETY: as above.
            unsafe { cpu::Cpu.fill(&Plan::new(&[n], &ops, &[0], false), value) };
            assert_eq!(buf, want, "{dtype}");
        }
        // An f64 whose halves differ has no 4-byte pattern, and a strided view no memset.
        let mut v = vec![0f64; 6];
        let ops = [operand(&mut v, &[2], DType::F64)];
        // SAFETY: 3 elements at stride 2 lie in 6.
        unsafe { fill(&m, &Plan::new(&[3], &ops, &[0], false), Scalar::Float(1.0)) };
        assert_eq!(m.took(), ["download", "upload"]);
        assert_eq!(v, [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
        assert_eq!(
            pattern(element_bytes(Scalar::Float(1.0), DType::F64), 8, 3),
            None
        );
        assert_eq!(
            pattern(element_bytes(Scalar::Int(0), DType::I64), 8, 3),
            Some((Pattern::U8(0), 24))
        );
        assert_eq!(
            pattern(element_bytes(Scalar::Float(1.0), DType::F32), 4, 3),
            Some((Pattern::U32(0x3f80_0000), 3))
        );
    }
}
