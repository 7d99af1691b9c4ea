//! The CPU backend: every kernel that touches host memory through raw pointers.
//!
//! The element-wise engine: one strided iterator that every element-wise op, copy and
//! reduction runs through.
//!
//! An op describes its operands (output first) as strides over a common broadcast shape; the
//! engine orders the dimensions as PyTorch does ([`crate::layout::order`]), coalesces
//! dimensions that are contiguous with each other, and walks the result as a sequence of
//! *runs*: `n` elements along the innermost dimension, each operand advancing by its own byte
//! stride. Kernels ([`kernels`]) work on runs, converting dtypes blockwise.

mod attention;
mod batch_norm;
pub(crate) mod binary;
mod cell_rows;
pub(crate) mod chunk;
mod columns;
mod conv;
pub(crate) mod convert;
pub(crate) mod dense_sum;
pub(crate) mod gather;
pub(crate) mod gemm;
mod gru_cell;
pub(crate) mod kernels;
mod layer_norm;
mod lstm_cell;
pub(crate) mod math;
pub(crate) mod pool2d;
mod pool2d_pairs;
pub(crate) mod reduce;
mod run;
pub(crate) mod softmax;
pub(crate) mod softmax_row;
pub(crate) mod ternary;
pub mod threads;
mod tile;
pub(crate) mod unary;
pub(crate) mod update;

use super::args::{
    ChannelAffineArgs, ChannelSumsArgs, ColumnsArgs, DenseSumArgs, DirectConvArgs,
    DirectWeightGradArgs, GemmArgs, GruCellArgs, GruCellBackwardArgs, LayerNormArgs,
    LayerNormBackwardArgs, LstmCellArgs, LstmCellBackwardArgs, MaxPoolArgs, MaxPoolBackwardArgs,
    PickArgs, ScatterAddArgs, SoftmaxArgs, UpdateArgs,
};
use super::attention::{AttentionArgs, AttentionBackwardArgs};
use super::kernel::{convolves_directly, BinaryOp, FloatOp, Fold, SameOp, TernaryOp};
use super::{Backend, Plan};
use crate::dtype::DType;
use crate::Device;
use crate::Scalar;

/// The CPU backend: kernels over host memory, on strata's thread pool.
pub(crate) struct Cpu;

impl Backend for Cpu {
    fn device(&self) -> Device {
        Device::Cpu
    }

    unsafe fn float_unary(&self, plan: &Plan, f: FloatOp, compute: DType) {
        // SAFETY: forwarded from the caller.
        unsafe { unary::float(plan, f, compute) }
    }

    unsafe fn same_unary(&self, plan: &Plan, s: SameOp, compute: DType) {
        // SAFETY: forwarded from the caller.
        unsafe { unary::same(plan, s, compute) }
    }

    unsafe fn dense_sum(&self, args: &DenseSumArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { dense_sum::sum_blocks(args) }
    }

    unsafe fn binary(&self, plan: &Plan, op: BinaryOp, compute: DType, scalar: Option<Scalar>) {
        // SAFETY: forwarded from the caller.
        unsafe { binary::binary(plan, op, compute, scalar) }
    }

    unsafe fn ternary(&self, plan: &Plan, op: TernaryOp, dtype: DType) {
        // SAFETY: forwarded from the caller.
        unsafe { ternary::ternary(plan, op, dtype) }
    }

    unsafe fn copy(&self, plan: &Plan) {
        // SAFETY: forwarded from the caller.
        unsafe { kernels::copy(plan) }
    }

    unsafe fn copy_to_host(&self, plan: &Plan) {
        // SAFETY: forwarded from the caller; host memory is this device's memory.
        unsafe { kernels::copy(plan) }
    }

    unsafe fn copy_from_host(&self, dst: *mut u8, src: &[u8]) {
        // SAFETY: the caller's promise: `dst` addresses `src.len()` writable bytes of host
        // memory that nothing else touches, so they cannot overlap `src`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
    }

    unsafe fn fill(&self, plan: &Plan, value: Scalar) {
        // SAFETY: forwarded from the caller.
        unsafe { ternary::fill(plan, value) }
    }

    unsafe fn fold(&self, plan: &Plan, input: DType, acc: DType, fold: Fold) {
        // SAFETY: forwarded from the caller.
        unsafe { reduce::fold(plan, input, acc, fold) }
    }

    unsafe fn scan_sum(&self, plan: &Plan, input: DType) {
        // SAFETY: forwarded from the caller.
        unsafe { reduce::scan_sum(plan, input) }
    }

    unsafe fn arg_best(&self, plan: &Plan, acc: DType, max: bool) {
        // SAFETY: forwarded from the caller.
        unsafe { reduce::arg_best(plan, acc, max) }
    }

    unsafe fn softmax(&self, args: &SoftmaxArgs) {
        // SAFETY: forwarded from the caller.
        unsafe { softmax::slabs(args) }
    }

    unsafe fn gemm(&self, args: &GemmArgs<'_>) {
        // SAFETY: forwarded from the caller.
        unsafe { gemm::gemm(args) }
    }

    unsafe fn pick(&self, args: &PickArgs<'_>) {
        // SAFETY: forwarded from the caller.
        unsafe { gather::pick(args) }
    }

    unsafe fn scatter_add(&self, args: &ScatterAddArgs<'_>) {
        // SAFETY: forwarded from the caller.
        unsafe { gather::scatter_add(args) }
    }

    unsafe fn max_pool2d(&self, args: &MaxPoolArgs<'_>) {
        // SAFETY: forwarded from the caller.
        unsafe { pool2d::max_pool2d(args) }
    }

    unsafe fn max_pool2d_backward(&self, args: &MaxPoolBackwardArgs) {
        // SAFETY: forwarded from the caller.
        unsafe { pool2d::max_pool2d_backward(args) }
    }

    unsafe fn update(&self, args: &UpdateArgs<'_>) {
        // SAFETY: forwarded from the caller.
        unsafe { update::update(args) }
    }

    fn fused_attention(&self) -> bool {
        true
    }

    fn fused_layer_norm(&self) -> bool {
        true
    }

    unsafe fn layer_norm_forward(&self, args: &LayerNormArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { layer_norm::forward(args) };
        true
    }

    unsafe fn layer_norm_backward(&self, args: &LayerNormBackwardArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { layer_norm::backward(args) };
        true
    }

    unsafe fn im2col(&self, args: &ColumnsArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { columns::im2col(args) };
        true
    }

    unsafe fn col2im_add(&self, args: &ColumnsArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { columns::col2im_add(args) };
        true
    }

    fn direct_conv(&self, dtype: DType, depth: usize) -> bool {
        convolves_directly(dtype, depth)
    }

    unsafe fn conv2d_direct(&self, args: &DirectConvArgs) -> bool {
        if !convolves_directly(args.dtype, args.sizes.depth()) {
            return false;
        }
        // SAFETY: forwarded from the caller; the dtype is f32.
        unsafe { conv::direct(args) };
        true
    }

    unsafe fn conv2d_direct_weight_grad(&self, args: &DirectWeightGradArgs) -> bool {
        if !convolves_directly(args.dtype, args.sizes.depth()) {
            return false;
        }
        // SAFETY: forwarded from the caller; the dtype is f32.
        unsafe { conv::weight_grad(args) };
        true
    }

    fn fused_batch_norm(&self) -> bool {
        true
    }

    unsafe fn channel_sums(&self, args: &ChannelSumsArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { batch_norm::channel_sums(args) }
    }

    unsafe fn channel_affine(&self, args: &ChannelAffineArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { batch_norm::channel_affine(args) }
    }

    fn fused_lstm_cell(&self) -> bool {
        true
    }

    unsafe fn lstm_cell_forward(&self, args: &LstmCellArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { lstm_cell::forward(args) }
    }

    unsafe fn lstm_cell_backward(&self, args: &LstmCellBackwardArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { lstm_cell::backward(args) }
    }

    fn fused_gru_cell(&self) -> bool {
        true
    }

    unsafe fn gru_cell_forward(&self, args: &GruCellArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { gru_cell::forward(args) }
    }

    unsafe fn gru_cell_backward(&self, args: &GruCellBackwardArgs) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { gru_cell::backward(args) }
    }

    unsafe fn attention_forward(&self, args: &AttentionArgs<'_>) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { attention::attention_forward(args) };
        true
    }

    unsafe fn attention_backward(&self, args: &AttentionBackwardArgs<'_>) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { attention::attention_backward(args) };
        true
    }
}

/// The smallest output, in bytes, that an op writing it fresh writes with streaming
/// (non-temporal) stores where the CPU has them: they skip reading the output's lines in
/// before overwriting them, and do not evict the inputs from the cache. An output that fits
/// comfortably in the last-level cache is better written through it, so the threshold is
/// an eighth of that cache (as the OS reports it), and never below 8 MiB.
pub(crate) fn stream_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| (last_level_cache_bytes().unwrap_or(0) / 8).max(8 << 20))
}

/// The size of the highest-level data cache of CPU 0, from Linux's sysfs.
fn last_level_cache_bytes() -> Option<usize> {
    let mut best: Option<(u32, usize)> = None;
    for index in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let (Some(level), Some(size), Some(kind)) = (read("level"), read("size"), read("type"))
        else {
            continue;
        };
        if kind.trim() == "Instruction" {
            continue;
        }
        let level: u32 = level.trim().parse().ok()?;
        let size = parse_cache_size(size.trim())?;
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, size));
        }
    }
    best.map(|(_, size)| size)
}

/// `"491520K"`, `"32M"` or `"512"` as bytes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    match unit {
        "" => Some(n),
        "K" => Some(n << 10),
        "M" => Some(n << 20),
        "G" => Some(n << 30),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("491520K"), Some(491520 << 10));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("12Q"), None);
        assert!(stream_bytes() >= 8 << 20);
    }
}
