//! Backends: where kernels run, and the interface through which ops reach them.
//!
//! An op's forward resolves its operands before it asks for a kernel: it validates them
//! (infer), allocates its outputs through its [`crate::OpContext`] on the operands' device,
//! locks every storage it touches (`storage::lock_storages`) and describes the loop as a
//! [`Plan`]: raw addresses with byte strides over a common shape, or contiguous slabs with
//! their sizes. It then asks the backend of the operands' device ([`for_device`]) for the
//! kernel by a descriptor from [`kernel`], which names *what* to compute. The backend decides
//! *how*: [`cpu`] runs loops over host memory on strata's thread pool.
//!
//! Kernels never see a `Tensor`, a lock or an allocator, and nothing outside this module and
//! `storage` touches raw host pointers. A new device (the meta device, CUDA later) is a
//! sibling of [`cpu`] implementing [`Backend`], not an edit to op files.
//!
//! The interface has one method per kernel family: element-wise maps (unary, binary,
//! ternary), copies and fills, the transfers to and from host memory, folds (reductions,
//! scans, best-element searches), softmax rows, matrix products, and the indexed walks.
//! Descriptors and shapes are plain data ([`kernel`]), loops are [`plan`]s, and every other
//! method takes one argument struct ([`args`], and [`attention`] for the fused attention); every pointer a method takes is the caller's
//! promise, spelled out in its `# Safety` section.

pub(crate) mod args;
pub(crate) mod attention;
pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod kernel;
mod meta;
pub(crate) mod plan;

pub(crate) use plan::{Dims, Operand, Plan};

use crate::Scalar;
use crate::{DType, Device, Error, Result};
use args::{
    ChannelAffineArgs, ChannelSumsArgs, ColumnsArgs, DenseSumArgs, DirectConvArgs,
    DirectWeightGradArgs, GemmArgs, GruCellArgs, GruCellBackwardArgs, LayerNormArgs,
    LayerNormBackwardArgs, LstmCellArgs, LstmCellBackwardArgs, MaxPoolArgs, MaxPoolBackwardArgs,
    PickArgs, ScatterAddArgs, SoftmaxArgs, UpdateArgs,
};
use attention::{AttentionArgs, AttentionBackwardArgs};
use kernel::{BinaryOp, FloatOp, Fold, SameOp, TernaryOp};

/// The kernels of one device.
///
/// Every method without a default is required: each is a kernel family with nothing
/// smaller to build it from, and `copy_to_host`/`copy_from_host` are how the host reaches
/// the device's memory at all. A method added for a fused kernel (the attention, layer norm,
/// the LSTM cell, im2col and col2im, the direct convolution, batch norm's passes) must come with a default that
/// declines, writing nothing, so that the op composes the result from the required ones: a
/// backend implements it only to go faster. Everything a method takes is defined in this
/// module ([`plan`], [`args`], [`kernel`], [`attention`]), never in a backend, and no
/// pointer it is given is dereferenced above the seam.
pub(crate) trait Backend: Sync {
    /// The device whose memory these kernels read and write.
    #[cfg_attr(not(test), allow(dead_code))]
    fn device(&self) -> Device;

    /// `out = f(x)` over `plan` (operand 0 the output, operand 1 the input), computed in the
    /// floating dtype `compute`.
    ///
    /// # Safety
    /// The plan's addresses must be valid for the loop on this backend's device and their
    /// storages locked: operand 0 writable, operand 1 readable.
    unsafe fn float_unary(&self, plan: &Plan, f: FloatOp, compute: DType);

    /// `out = s(x)` over `plan`, computed in `compute`.
    ///
    /// # Safety
    /// As for [`Backend::float_unary`].
    unsafe fn same_unary(&self, plan: &Plan, s: SameOp, compute: DType);

    /// Sums `outer` contiguous `[len, inner]` blocks of f32 or f64 over their `len`
    /// dimension into the `[outer, inner]` f64 accumulators `args.out`; false (nothing
    /// written) when this backend has no such fast path for the dtype. Every backend must
    /// answer as [`kernel::sums_densely`] does, so that the meta device allocates as the CPU.
    ///
    /// # Safety
    /// `args.input` must address `outer·len·inner` readable elements of `args.dtype` that
    /// nothing writes during the call, and `args.out` `outer·inner` writable f64 elements
    /// that nothing else touches.
    unsafe fn dense_sum(&self, args: &DenseSumArgs) -> bool;

    /// `out = a op b` over `plan` (operands out, a, b; or out, a with `scalar` as `b`),
    /// computed in `compute` (comparisons write bool).
    ///
    /// # Safety
    /// The plan's addresses must be valid for the loop on this backend's device and their
    /// storages locked: operand 0 writable, the others readable.
    unsafe fn binary(&self, plan: &Plan, op: BinaryOp, compute: DType, scalar: Option<Scalar>);

    /// A three-operand op (or `masked_fill`, with two inputs) over `plan` in `dtype`.
    ///
    /// # Safety
    /// As for [`Backend::binary`].
    unsafe fn ternary(&self, plan: &Plan, op: TernaryOp, dtype: DType);

    /// Copies operand 1 into operand 0, converting between their dtypes.
    ///
    /// # Safety
    /// As for [`Backend::binary`].
    unsafe fn copy(&self, plan: &Plan);

    /// Copies operand 1 (elements in this device's memory) into operand 0 (host memory the
    /// caller owns), converting between their dtypes: how a tensor's values reach the host.
    /// Required: only the backend knows how to reach its memory from the host.
    ///
    /// # Safety
    /// Operand 1 must be valid for the loop on this device and its storage locked; operand 0
    /// must address host memory that the caller owns and nothing else touches, writable for
    /// the whole loop.
    unsafe fn copy_to_host(&self, plan: &Plan);

    /// Copies the host bytes `src` into this device's memory at `dst`: how values made on the
    /// host (a reduction's positions) reach the device. Required, as `copy_to_host`.
    ///
    /// # Safety
    /// `dst` must address `src.len()` writable bytes of this device's memory that nothing
    /// else touches during the call.
    unsafe fn copy_from_host(&self, dst: *mut u8, src: &[u8]);

    /// Sets every element of operand 0 (the plan's only operand) to `value`.
    ///
    /// # Safety
    /// The plan's operand must be valid for the loop, writable and locked.
    unsafe fn fill(&self, plan: &Plan, value: Scalar);

    /// Folds operand 1 (read as `input`) into the accumulator operand 0 (f64 or i64, per
    /// `acc`, holding the initial values; stride 0 along the reduced dimensions), with an
    /// optional per-result parameter as operand 2.
    ///
    /// # Safety
    /// The plan must be sequential; the input readable and locked; the accumulator and the
    /// parameter private buffers of `acc` laid out as the plan says.
    unsafe fn fold(&self, plan: &Plan, input: DType, acc: DType, fold: Fold);

    /// Running sums along the dimension where the carry (operand 1) has stride 0, from the
    /// input (operand 2, read as `input`) into the output (operand 0).
    ///
    /// # Safety
    /// As for [`Backend::fold`]; the output writable and locked.
    unsafe fn scan_sum(&self, plan: &Plan, input: DType);

    /// The first best element (largest with `max`, else smallest; NaN first for floats) and
    /// its position: operands (best value, best index i64, input, position i64), values of
    /// `acc` (f64 or i64).
    ///
    /// # Safety
    /// As for [`Backend::fold`]; operands 0 and 1 private buffers, 2 and 3 readable.
    unsafe fn arg_best(&self, plan: &Plan, acc: DType, max: bool);

    /// Softmax (log-softmax with `log`) of `outer` contiguous slabs (see [`SoftmaxArgs`]), in
    /// the floating dtype.
    ///
    /// # Safety
    /// `input` must address `outer·slab_len` readable elements of `dtype` and `output` as
    /// many writable ones, not overlapping, that nothing else touches during the call.
    unsafe fn softmax(&self, args: &SoftmaxArgs);

    /// `out = beta·c + alpha·(a @ b)` for every product of the batch, in `dtype`, with
    /// operands addressed from their storages' base pointers by [`kernel::Mat`] offsets. With a
    /// result buffer in `scratch` the result goes through it first (an output that overlaps
    /// an input, or is not dense); f16 and bf16 products widen into `scratch`'s f32 room.
    ///
    /// # Safety
    /// Every element the product, `c`'s `Mat` and `out_mat` address must lie in valid
    /// memory: the inputs readable, the output writable and untouched by anything else during
    /// the call; without a result buffer, the output overlaps neither itself nor an input.
    /// Each non-null `scratch` pointer must address the elements [`kernel::GemmScratch`] says,
    /// writable and used by nothing else during the call.
    unsafe fn gemm(&self, args: &GemmArgs<'_>);

    /// The indexed copy `out[k] = src[…, index[k]·dim_stride, …]` over `shape`
    /// (`index_select`, `gather`), reading the index where it lies: each visit copies `block`
    /// consecutive elements (see [`PickArgs`]).
    ///
    /// # Safety
    /// Every position the walk forms must lie inside the output (writable), the source
    /// (readable) and the index (readable); with `parallel`, each output element is written by
    /// one visit only and the output shares no memory with the source. The kernel itself
    /// keeps every index inside `0..bound` (see [`args::IndexOperand`]).
    unsafe fn pick(&self, args: &PickArgs<'_>);

    /// `dst[…, index[k]·dim_stride, …] += src[k]` over the index's shape, in row-major order
    /// (repeated indices accumulate in order; see [`ScatterAddArgs`]), reading the index where
    /// it lies.
    ///
    /// # Safety
    /// Every position the walk forms must lie inside the source (readable), the index
    /// (readable) and the destination (writable), for any index in `0..bound`.
    unsafe fn scatter_add(&self, args: &ScatterAddArgs<'_>);

    /// 2-d max pooling of `planes` contiguous planes of `src` into `dst`, with each maximum's
    /// flat position in its plane written to `idx` (i64).
    ///
    /// # Safety
    /// `src` holds `planes·h·w` readable elements of `dtype`, `dst` and `idx` `planes·oh·ow`
    /// writable elements of `dtype` and i64, sharing no memory with `src` or each other; every
    /// window holds at least one position inside its plane.
    unsafe fn max_pool2d(&self, args: &MaxPoolArgs<'_>);

    /// Max pooling's backward: per plane, zeros `gx` (`plane_in` elements) and adds each
    /// `grad` element (`plane_out` per plane) at the position `idx` names (positions outside
    /// the plane are skipped).
    ///
    /// # Safety
    /// `grad` and `idx` hold `planes·plane_out` readable elements of `dtype` and i64, `gx`
    /// `planes·plane_in` writable elements of `dtype` sharing no memory with them.
    unsafe fn max_pool2d_backward(&self, args: &MaxPoolBackwardArgs);

    /// Applies an optimizer's update rule in place, in one pass over the parameter, its
    /// gradient and the rule's state tensors (see [`kernel::UpdatePtrs`]).
    ///
    /// # Safety
    /// The parameter and the used state pointers address `n` writable elements of `dtype`, the
    /// gradient `n` readable ones; the written operands share no memory with each other or
    /// the gradient, and the op holds their storages locked.
    unsafe fn update(&self, args: &UpdateArgs<'_>);

    /// Writes every entry of the column matrices `args.cols` from the image `args.image`
    /// (zeros where a window reads padding) in one pass. Returns false, writing nothing, on
    /// a backend without it (the default): the convolution then copies one strided window
    /// per kernel offset with [`Backend::copy`] and [`Backend::fill`].
    ///
    /// # Safety
    /// The image must address readable elements of the dtype for every position of its
    /// shape and strides, and the columns writable ones for every position of theirs; the
    /// columns overlap neither themselves (no two positions share an element) nor the
    /// image, and nothing else touches them during the call.
    unsafe fn im2col(&self, args: &ColumnsArgs) -> bool {
        let _ = args;
        false
    }

    /// Adds every entry of the column matrices `args.cols` onto the image position it was
    /// read from (entries in the padding are dropped), offset by offset in kernel order, as
    /// one strided add per offset would. Returns false, writing nothing, on a backend
    /// without it (the default): the convolution then adds each offset's window with
    /// [`Backend::binary`].
    ///
    /// # Safety
    /// As for [`Backend::im2col`], with the columns read and the image written: the image
    /// overlaps neither itself nor the columns.
    unsafe fn col2im_add(&self, args: &ColumnsArgs) -> bool {
        let _ = args;
        false
    }

    /// Whether this backend convolves `dtype` with a depth of `depth` steps (`c·kh·kw`)
    /// directly ([`Backend::conv2d_direct`]), with no column matrices. Without it (the
    /// default), a convolution builds columns with [`Backend::im2col`] (or strided copies)
    /// and multiplies them with [`Backend::gemm`]. The answer may depend on these two only,
    /// never on the machine, so that the meta device can answer as the CPU and allocate as
    /// it does.
    fn direct_conv(&self, dtype: DType, depth: usize) -> bool {
        let _ = (dtype, depth);
        false
    }

    /// The direct convolution (see [`DirectConvArgs`]). Returns false, writing nothing, on a
    /// backend without it ([`Backend::direct_conv`]).
    ///
    /// # Safety
    /// The image addresses `n·c·h·w` readable elements of the dtype, the weight and a
    /// non-null bias readable elements at every position their strides give, and the output
    /// `n·o·oh·ow` writable ones that overlap none of the others and that nothing else
    /// touches during the call.
    unsafe fn conv2d_direct(&self, args: &DirectConvArgs) -> bool {
        let _ = args;
        false
    }

    /// The weight's gradient of a direct convolution (see [`DirectWeightGradArgs`]), for
    /// the dtypes and depths [`Backend::direct_conv`] takes. Returns false, writing nothing,
    /// on a backend without it.
    ///
    /// # Safety
    /// The image addresses `n·c·h·w` readable elements of the dtype, the gradient
    /// `n·o·oh·ow`, and the output `o·c·kh·kw` writable ones that overlap neither and that
    /// nothing else touches during the call.
    unsafe fn conv2d_direct_weight_grad(&self, args: &DirectWeightGradArgs) -> bool {
        let _ = args;
        false
    }

    /// Whether this backend has batch norm's fused passes ([`Backend::channel_sums`] and
    /// [`Backend::channel_affine`]) for f32 and f64. Without them (the default), batch
    /// norm is composed of the kernels above on this device.
    fn fused_batch_norm(&self) -> bool {
        false
    }

    /// Per-channel sums in one pass (see [`ChannelSumsArgs`]). Returns false, writing
    /// nothing, on a backend without it ([`Backend::fused_batch_norm`]).
    ///
    /// # Safety
    /// Every non-null pointer addresses the elements [`ChannelSumsArgs`] gives it, readable
    /// or written as it says; the written ones overlap nothing and nothing else touches
    /// them during the call.
    unsafe fn channel_sums(&self, args: &ChannelSumsArgs) -> bool {
        let _ = args;
        false
    }

    /// A per-channel affine map in one pass (see [`ChannelAffineArgs`]). Returns false,
    /// writing nothing, on a backend without it.
    ///
    /// # Safety
    /// As for [`Backend::channel_sums`], with the operands of [`ChannelAffineArgs`].
    unsafe fn channel_affine(&self, args: &ChannelAffineArgs) -> bool {
        let _ = args;
        false
    }

    /// Whether this backend has the fused attention kernels
    /// ([`Backend::attention_forward`] and [`Backend::attention_backward`]). Without them
    /// (the default), `scaled_dot_product_attention` takes its math path, composed of the
    /// kernels above, on this device.
    fn fused_attention(&self) -> bool {
        false
    }

    /// The fused attention forward (see [`AttentionArgs`]): an online softmax over key
    /// blocks that never holds more than one block of scores per thread. Returns false,
    /// writing nothing, on a backend without it ([`Backend::fused_attention`]).
    ///
    /// # Safety
    /// `q`, `k`, `v` and the mask must address readable elements for every `(b, h, row,
    /// col)` of the problem, the output and the log-sum-exp their contiguous extents of
    /// writable elements, and the scratch `tiles.slots · tiles.forward_slot` writable
    /// elements of the compute dtype; nothing written overlaps anything else, and nothing
    /// else touches the written memory during the call.
    unsafe fn attention_forward(&self, args: &AttentionArgs<'_>) -> bool {
        let _ = args;
        false
    }

    /// The fused attention backward (see [`AttentionBackwardArgs`]), recomputing each block's
    /// probabilities from the saved log-sum-exp. Returns false, writing nothing, on a backend
    /// without it.
    ///
    /// # Safety
    /// As for [`Backend::attention_forward`], with the output and the log-sum-exp read, the
    /// output's gradient readable like `q`, and `dq`, `dk` and `dv` the contiguous extents of
    /// `q`'s, `k`'s and `v`'s shapes, writable, apart from everything else.
    unsafe fn attention_backward(&self, args: &AttentionBackwardArgs<'_>) -> bool {
        let _ = args;
        false
    }

    /// Whether this backend has the fused layer norm ([`Backend::layer_norm_forward`] and
    /// [`Backend::layer_norm_backward`]) for f32 and f64. Without it (the default),
    /// `layer_norm` is composed of the kernels above on this device.
    fn fused_layer_norm(&self) -> bool {
        false
    }

    /// The fused layer norm's forward (see [`LayerNormArgs`]). Returns false, writing
    /// nothing, on a backend without it ([`Backend::fused_layer_norm`]).
    ///
    /// # Safety
    /// `x` and `y` must address `rows·cols` elements of the dtype (readable, writable),
    /// `mean` and `rstd` `rows` writable ones, and a non-null `weight` and `bias` `cols`
    /// readable ones; nothing written overlaps anything else or is touched by anything else
    /// during the call.
    unsafe fn layer_norm_forward(&self, args: &LayerNormArgs) -> bool {
        let _ = args;
        false
    }

    /// The fused layer norm's backward (see [`LayerNormBackwardArgs`]). Returns false,
    /// writing nothing, on a backend without it.
    ///
    /// # Safety
    /// `x` and `grad` must address `rows·cols` readable elements of the dtype, `mean` and
    /// `rstd` `rows`, a non-null `weight` `cols`; a non-null `dx` `rows·cols` writable
    /// elements, `dweight` and `dbias` `cols`; nothing written overlaps anything else or is
    /// touched by anything else during the call.
    unsafe fn layer_norm_backward(&self, args: &LayerNormBackwardArgs) -> bool {
        let _ = args;
        false
    }

    /// Whether this backend has the fused LSTM cell ([`Backend::lstm_cell_forward`] and
    /// [`Backend::lstm_cell_backward`]) for f32 and f64. Without it (the default), an LSTM
    /// layer runs its steps as `lstm_cell`s composed of the kernels above on this device.
    fn fused_lstm_cell(&self) -> bool {
        false
    }

    /// The fused LSTM cell's element-wise forward (see [`LstmCellArgs`]). Returns false,
    /// writing nothing, on a backend without it ([`Backend::fused_lstm_cell`]).
    ///
    /// # Safety
    /// Every non-null operand must address the rows [`LstmCellArgs`] describes (readable or
    /// writable as it says); the written operands overlap nothing but as it allows, and
    /// nothing else touches them during the call.
    unsafe fn lstm_cell_forward(&self, args: &LstmCellArgs) -> bool {
        let _ = args;
        false
    }

    /// The fused LSTM cell's element-wise backward (see [`LstmCellBackwardArgs`]). Returns
    /// false, writing nothing, on a backend without it.
    ///
    /// # Safety
    /// As for [`Backend::lstm_cell_forward`], with the operands of
    /// [`LstmCellBackwardArgs`].
    unsafe fn lstm_cell_backward(&self, args: &LstmCellBackwardArgs) -> bool {
        let _ = args;
        false
    }

    /// Whether this backend has the fused GRU cell ([`Backend::gru_cell_forward`] and
    /// [`Backend::gru_cell_backward`]) for f32 and f64. Without it (the default), `gru_cell`
    /// runs its element-wise part as the composition of the kernels above on this device.
    fn fused_gru_cell(&self) -> bool {
        false
    }

    /// The fused GRU cell's element-wise forward (see [`GruCellArgs`]). Returns false,
    /// writing nothing, on a backend without it ([`Backend::fused_gru_cell`]).
    ///
    /// # Safety
    /// Every operand must address the rows [`GruCellArgs`] describes (readable or writable
    /// as it says); the written operands overlap nothing, and nothing else touches them
    /// during the call.
    unsafe fn gru_cell_forward(&self, args: &GruCellArgs) -> bool {
        let _ = args;
        false
    }

    /// The fused GRU cell's element-wise backward (see [`GruCellBackwardArgs`]). Returns
    /// false, writing nothing, on a backend without it.
    ///
    /// # Safety
    /// As for [`Backend::gru_cell_forward`], with the operands of [`GruCellBackwardArgs`]
    /// (a null written operand is not written).
    unsafe fn gru_cell_backward(&self, args: &GruCellBackwardArgs) -> bool {
        let _ = args;
        false
    }
}

/// The backend whose kernels run on `device`'s memory.
#[inline]
pub(crate) fn for_device(device: Device) -> Result<&'static dyn Backend> {
    match device {
        Device::Cpu => Ok(&cpu::Cpu),
        Device::Meta => Ok(&meta::Meta),
        Device::Cuda(index) => for_cuda(index),
    }
}

/// [`for_device`] for CUDA device `index` (kept out of line: every CPU op inlines the rest).
#[cold]
#[inline(never)]
fn for_cuda(index: usize) -> Result<&'static dyn Backend> {
    cuda_backend(index).map_err(|why| no_backend(Device::Cuda(index), "backend", why))
}

/// `Ok` when this build can make tensors on `device` (the CPU, meta, and a CUDA device the
/// driver sees), else the error `op` reports. Factories and moves check it before anything
/// is allocated, whatever allocator the device is routed to.
pub(crate) fn check_device(device: Device, op: &'static str) -> Result<()> {
    match device {
        Device::Cpu | Device::Meta => Ok(()),
        Device::Cuda(index) => cuda_backend(index)
            .map(drop)
            .map_err(|why| no_backend(device, op, why)),
    }
}

/// The error for a device this build or machine has no backend for, saying why.
fn no_backend(device: Device, op: &'static str, why: String) -> Error {
    let message = format!("cannot place a tensor on {device}: {why}");
    Error::Unsupported { op, message }
}

/// The kernels of CUDA device `index`, or why there are none: no driver, no such device.
#[cfg(feature = "cuda")]
fn cuda_backend(index: usize) -> std::result::Result<&'static dyn Backend, String> {
    cuda::backend(index).map(|b| b as &'static dyn Backend)
}

/// Without the `cuda` feature there are no CUDA kernels.
#[cfg(not(feature = "cuda"))]
fn cuda_backend(_index: usize) -> std::result::Result<&'static dyn Backend, String> {
    Err(
        "strata was not compiled with CUDA support (feature `cuda`); use Device::Cpu or \
         Device::Meta"
            .to_owned(),
    )
}

/// `Err` for op `op` on `device` when the device's backend has no kernel for it yet (a CUDA
/// tensor's ops other than copies and fills, in this part of CUDA support).
pub(crate) fn refuse_without_kernel(op: &'static str, device: Device) -> Result<()> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::refuse_without_kernel(op, device),
        _ => {
            let _ = op;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_device_finds_its_backend_or_a_clear_error() {
        assert_eq!(
            for_device(Device::Cpu).map(|b| b.device()).ok(),
            Some(Device::Cpu)
        );
        assert_eq!(
            for_device(Device::Meta).map(|b| b.device()).ok(),
            Some(Device::Meta)
        );
        // On a machine with a GPU its backend; elsewhere (every CI machine) the reason.
        match for_device(Device::Cuda(0)) {
            Ok(b) => assert_eq!(b.device(), Device::Cuda(0)),
            Err(e) => {
                let m = e.to_string();
                assert!(m.contains("cannot place a tensor on cuda:0: "), "{m}");
                assert!(m.contains("CUDA"), "{m}");
            }
        }
        let far = for_device(Device::Cuda(1000)).err().map(|e| e.to_string());
        assert!(far.is_some_and(|m| m.contains("cannot place a tensor on cuda:1000")));
        assert!(refuse_without_kernel("add", Device::Cpu).is_ok());
    }
}
