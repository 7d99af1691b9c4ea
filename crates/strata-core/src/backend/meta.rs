//! The meta backend: tensors with shapes, layouts and allocations but no data.
//!
//! Every op runs its CPU execute path unchanged on meta tensors: it validates, allocates its
//! outputs and temporaries from the meta device's caching allocator (over address ranges that
//! are never mapped), locks its storages and describes the loop. Only the kernels below are
//! different: they return without touching memory. Because no op has allocation code of its
//! own for meta, the allocator sees exactly the calls a CPU run makes, and a program's
//! allocated and reserved bytes on meta equal its bytes on the CPU.

use super::args::{
    ChannelAffineArgs, ChannelSumsArgs, ColumnsArgs, DenseSumArgs, DirectConvArgs,
    DirectWeightGradArgs, GemmArgs, GruCellArgs, GruCellBackwardArgs, LayerNormArgs,
    LayerNormBackwardArgs, LstmCellArgs, LstmCellBackwardArgs, MaxPoolArgs, MaxPoolBackwardArgs,
    PickArgs, ScatterAddArgs, SoftmaxArgs, UpdateArgs,
};
use super::attention::{AttentionArgs, AttentionBackwardArgs};
use super::kernel::{convolves_directly, sums_densely, BinaryOp, FloatOp, Fold, SameOp, TernaryOp};
use super::{Backend, Plan};
use crate::{DType, Device, Scalar};

/// Kernels that compute nothing: the addresses they are given are never dereferenced.
pub(crate) struct Meta;

impl Backend for Meta {
    fn device(&self) -> Device {
        Device::Meta
    }

    unsafe fn float_unary(&self, _: &Plan, _: FloatOp, _: DType) {}

    unsafe fn same_unary(&self, _: &Plan, _: SameOp, _: DType) {}

    unsafe fn dense_sum(&self, args: &DenseSumArgs) -> bool {
        // The CPU takes this path for exactly these dtypes; taking it here too keeps the two
        // devices on the same allocation sequence.
        sums_densely(args.dtype)
    }

    unsafe fn binary(&self, _: &Plan, _: BinaryOp, _: DType, _: Option<Scalar>) {}

    unsafe fn ternary(&self, _: &Plan, _: TernaryOp, _: DType) {}

    unsafe fn copy(&self, _: &Plan) {}

    unsafe fn copy_to_host(&self, _: &Plan) {}

    unsafe fn copy_from_host(&self, _: *mut u8, _: &[u8]) {}

    unsafe fn fill(&self, _: &Plan, _: Scalar) {}

    unsafe fn fold(&self, _: &Plan, _: DType, _: DType, _: Fold) {}

    unsafe fn scan_sum(&self, _: &Plan, _: DType) {}

    unsafe fn arg_best(&self, _: &Plan, _: DType, _: bool) {}

    unsafe fn softmax(&self, _: &SoftmaxArgs) {}

    unsafe fn gemm(&self, _: &GemmArgs<'_>) {}

    unsafe fn pick(&self, _: &PickArgs<'_>) {}

    unsafe fn scatter_add(&self, _: &ScatterAddArgs<'_>) {}

    unsafe fn max_pool2d(&self, _: &MaxPoolArgs<'_>) {}

    unsafe fn max_pool2d_backward(&self, _: &MaxPoolBackwardArgs) {}

    unsafe fn update(&self, _: &UpdateArgs<'_>) {}

    unsafe fn im2col(&self, _: &ColumnsArgs) -> bool {
        // As the CPU, so that a convolution takes the same path (neither allocates).
        true
    }

    unsafe fn col2im_add(&self, _: &ColumnsArgs) -> bool {
        true
    }

    fn direct_conv(&self, dtype: DType, depth: usize) -> bool {
        // As the CPU, so that a convolution takes the same path and allocates the same.
        convolves_directly(dtype, depth)
    }

    unsafe fn conv2d_direct(&self, _: &DirectConvArgs) -> bool {
        true
    }

    unsafe fn conv2d_direct_weight_grad(&self, _: &DirectWeightGradArgs) -> bool {
        true
    }

    fn fused_batch_norm(&self) -> bool {
        // As the CPU, so that batch norm takes the same path and allocates the same.
        true
    }

    unsafe fn channel_sums(&self, _: &ChannelSumsArgs) -> bool {
        true
    }

    unsafe fn channel_affine(&self, _: &ChannelAffineArgs) -> bool {
        true
    }

    fn fused_attention(&self) -> bool {
        // As the CPU, so that attention takes the same path and allocates the same.
        true
    }

    fn fused_layer_norm(&self) -> bool {
        // As the CPU, so that layer norm takes the same path and allocates the same.
        true
    }

    unsafe fn layer_norm_forward(&self, _: &LayerNormArgs) -> bool {
        true
    }

    unsafe fn layer_norm_backward(&self, _: &LayerNormBackwardArgs) -> bool {
        true
    }

    fn fused_lstm_cell(&self) -> bool {
        // As the CPU, so that an LSTM layer takes the same path and allocates the same.
        true
    }

    unsafe fn lstm_cell_forward(&self, _: &LstmCellArgs) -> bool {
        true
    }

    unsafe fn lstm_cell_backward(&self, _: &LstmCellBackwardArgs) -> bool {
        true
    }

    fn fused_gru_cell(&self) -> bool {
        // As the CPU, so that `gru_cell` takes the same path and allocates the same.
        true
    }

    unsafe fn gru_cell_forward(&self, _: &GruCellArgs) -> bool {
        true
    }

    unsafe fn gru_cell_backward(&self, _: &GruCellBackwardArgs) -> bool {
        true
    }

    unsafe fn attention_forward(&self, _: &AttentionArgs<'_>) -> bool {
        true
    }

    unsafe fn attention_backward(&self, _: &AttentionBackwardArgs<'_>) -> bool {
        true
    }
}
