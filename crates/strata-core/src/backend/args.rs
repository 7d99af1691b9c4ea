//! The arguments of the backend's kernels that take more than a plan: one struct per
//! [`super::Backend`] method, so that the trait, each backend and each kernel name an operand
//! once, by name, instead of repeating a long positional list.
//!
//! Every pointer is an address in the backend's device memory (never dereferenced above the
//! seam); what each must address is the `# Safety` section of the method that takes it.

use super::kernel::{ConvWindows, GemmScratch, Mat, PoolWindows, Product, UpdatePtrs, UpdateRule};
use crate::{DType, Scalar};

/// [`super::Backend::dense_sum`]: sums `outer` contiguous `[len, inner]` blocks of `dtype`
/// over their `len` dimension into `[outer, inner]` f64 accumulators.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DenseSumArgs {
    /// The input's dtype (f32 or f64 take the fast path).
    pub(crate) dtype: DType,
    /// The input's first element: `outer·len·inner` elements.
    pub(crate) input: *const u8,
    /// Blocks.
    pub(crate) outer: usize,
    /// Elements summed into each result.
    pub(crate) len: usize,
    /// Results per block.
    pub(crate) inner: usize,
    /// The `outer·inner` f64 accumulators written.
    pub(crate) out: *mut u8,
}

/// [`super::Backend::softmax`]: softmax (log-softmax with `log`) of `outer` contiguous slabs
/// of `slab_len` elements, each `[slab_len / inner, inner]` normalised along its first
/// dimension.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SoftmaxArgs {
    /// The floating dtype of input and output.
    pub(crate) dtype: DType,
    /// `outer·slab_len` elements read.
    pub(crate) input: *const u8,
    /// `outer·slab_len` elements written.
    pub(crate) output: *mut u8,
    /// Slabs.
    pub(crate) outer: usize,
    /// Elements of one slab.
    pub(crate) slab_len: usize,
    /// The slab's trailing extent: it is normalised along `slab_len / inner` rows.
    pub(crate) inner: usize,
    /// Log-softmax instead of softmax.
    pub(crate) log: bool,
}

/// [`super::Backend::gemm`]: `out = beta·c + alpha·(a @ b)` for every product of the batch,
/// with operands addressed from their storages' base pointers by [`Mat`] offsets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GemmArgs<'a> {
    /// The dtype of every operand.
    pub(crate) dtype: DType,
    /// The batch of products and where `a` and `b` are.
    pub(crate) product: &'a Product,
    /// The output's storage base.
    pub(crate) out: *mut u8,
    /// Where the output's matrices are.
    pub(crate) out_mat: &'a Mat,
    /// `a`'s storage base.
    pub(crate) a: *const u8,
    /// `b`'s storage base.
    pub(crate) b: *const u8,
    /// The added input, with where its matrices are (`beta·c`).
    pub(crate) c: Option<(*const u8, &'a Mat)>,
    /// The product's factor.
    pub(crate) alpha: Scalar,
    /// The added input's factor.
    pub(crate) beta: Scalar,
    /// Buffers the product works in, allocated by the op.
    pub(crate) scratch: GemmScratch,
}

/// An index tensor that an indexed kernel reads where it lies, in the backend's memory: one
/// index per visit of the kernel's walk, at `Σ coords[d]·strides[d]` elements from `ptr`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexOperand<'a> {
    /// The index's first element.
    pub(crate) ptr: *const u8,
    /// [`DType::I64`] or [`DType::I32`].
    pub(crate) dtype: DType,
    /// The index's strides over the walk's shape, in elements (0 along a dimension of the
    /// walk that does not move through the index).
    pub(crate) strides: &'a [isize],
    /// The size of the indexed dimension: the op checked every index to lie in `0..bound`
    /// before the run. A kernel checks again and leaves a visit alone whose index is out of
    /// range (only another thread writing the index between the check and the run makes one),
    /// so no such write can reach outside the tensors.
    pub(crate) bound: usize,
}

/// [`super::Backend::pick`]: the indexed copy `out[k] = src[…, index[k]·dim_stride, …]` over
/// `shape` (`index_select`, `gather`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PickArgs<'a> {
    /// The dtype of output and source.
    pub(crate) dtype: DType,
    /// The walk's shape.
    pub(crate) shape: &'a [usize],
    /// The output's strides, in elements.
    pub(crate) out_strides: &'a [isize],
    /// The source's strides, in elements (0 along the picked dimension).
    pub(crate) src_strides: &'a [isize],
    /// Consecutive elements each visit copies.
    pub(crate) block: usize,
    /// The output's first element.
    pub(crate) out: *mut u8,
    /// The source's first element.
    pub(crate) src: *const u8,
    /// Whether the walk may be split across threads (each output element written once, the
    /// output apart from the source).
    pub(crate) parallel: bool,
    /// Where each visit reads along the picked dimension.
    pub(crate) index: IndexOperand<'a>,
    /// The source's stride along the picked dimension, in elements.
    pub(crate) dim_stride: isize,
}

/// [`super::Backend::scatter_add`]: `dst[…, index[k]·dim_stride, …] += src[k]` over the
/// index's shape, in row-major order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScatterAddArgs<'a> {
    /// The dtype of source and destination.
    pub(crate) dtype: DType,
    /// The index's shape.
    pub(crate) shape: &'a [usize],
    /// The source's strides, in elements.
    pub(crate) src_strides: &'a [isize],
    /// The destination's strides, in elements (0 along the indexed dimension).
    pub(crate) dst_strides: &'a [isize],
    /// The source's first element.
    pub(crate) src: *const u8,
    /// The destination's first element.
    pub(crate) dst: *mut u8,
    /// Where each visit adds along the indexed dimension.
    pub(crate) index: IndexOperand<'a>,
    /// The destination's stride along the indexed dimension, in elements.
    pub(crate) dim_stride: isize,
}

/// [`super::Backend::im2col`] and [`super::Backend::col2im_add`]: the column matrices of
/// `samples·channels` image planes, each entry `cols[n, c, i, j, y, x]` the input under
/// output `(y, x)` at kernel offset `(i, j)` (see [`ConvWindows`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ColumnsArgs {
    /// The dtype of image and columns.
    pub(crate) dtype: DType,
    /// The image's first element: `[samples, channels, h, w]` at `image_strides`.
    pub(crate) image: *mut u8,
    /// The image's strides, in elements.
    pub(crate) image_strides: [usize; 4],
    /// The columns' first element: `[samples, channels, kh, kw, oh, ow]` at `col_strides`.
    pub(crate) cols: *mut u8,
    /// The columns' strides, in elements.
    pub(crate) col_strides: [usize; 6],
    /// Samples.
    pub(crate) samples: usize,
    /// Channels per sample.
    pub(crate) channels: usize,
    /// The windows over each plane.
    pub(crate) windows: ConvWindows,
}

/// The sizes of a stride-1, undilated, ungrouped 2-d convolution computed straight from
/// the image (the direct convolution's and its weight gradient's): `n` samples of `c`
/// channels of an `h×w` plane, `o` output channels, a `kh×kw` kernel and `ph`, `pw` zeros
/// before the first row and column (and after the last), below the kernel's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvSizes {
    /// Samples, channels, and the image plane `h×w`.
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) h: usize,
    pub(crate) w: usize,
    /// Output channels.
    pub(crate) o: usize,
    /// Kernel height and width, and the padding on each side.
    pub(crate) kh: usize,
    pub(crate) kw: usize,
    pub(crate) ph: usize,
    pub(crate) pw: usize,
}

impl ConvSizes {
    /// The output plane's height and width: `oh = h + 2·ph - kh + 1`, `ow` likewise.
    pub(crate) fn out_plane(&self) -> (usize, usize) {
        (
            self.h + 2 * self.ph + 1 - self.kh,
            self.w + 2 * self.pw + 1 - self.kw,
        )
    }

    /// Steps along the depth of each output: `c·kh·kw`.
    pub(crate) fn depth(&self) -> usize {
        self.c * self.kh * self.kw
    }
}

/// [`super::Backend::conv2d_direct`]: a convolution of [`ConvSizes`] computed straight from
/// the image, with no column matrices: `out[n, o, y, x] = bias[o] + Σ weight(o, c, i, j) ·
/// x[n, c, y + i - ph, x + j - pw]` over `c < channels`, `i < kh`, `j < kw`, zero where the
/// image index falls in the padding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirectConvArgs {
    /// The dtype of every operand.
    pub(crate) dtype: DType,
    /// The convolution's sizes.
    pub(crate) sizes: ConvSizes,
    /// The image's first element: `[n, c, h, w]`, contiguous, read.
    pub(crate) x: *const u8,
    /// The weight's first element: `weight(o, c, i, j)` is the element at `o·s0 + c·s1 +
    /// i·s2 + j·s3` (`weight_strides`), or at `(kh - 1 - i, kw - 1 - j)` when `flip`.
    pub(crate) weight: *const u8,
    pub(crate) weight_strides: [usize; 4],
    pub(crate) flip: bool,
    /// The bias's first element (`o` elements, `bias_stride` apart), or null for none.
    pub(crate) bias: *const u8,
    pub(crate) bias_stride: usize,
    /// The output's first element: `[n, o, oh, ow]`, contiguous, written.
    pub(crate) out: *mut u8,
}

/// [`super::Backend::conv2d_direct_weight_grad`]: the weight's gradient of a direct
/// convolution of [`ConvSizes`] (no bias, no flip): `out[o, c, i, j] = Σ grad[n, o, y, x] ·
/// x[n, c, y + i - ph, x + j - pw]` over every sample and output position, zero where the
/// image index falls in the padding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirectWeightGradArgs {
    /// The dtype of every operand.
    pub(crate) dtype: DType,
    /// The convolution's sizes.
    pub(crate) sizes: ConvSizes,
    /// The image's first element: `[n, c, h, w]`, contiguous, read.
    pub(crate) x: *const u8,
    /// The output gradient's first element: `[n, o, oh, ow]`, contiguous, read.
    pub(crate) grad: *const u8,
    /// The weight gradient's first element: `[o, c, kh, kw]`, contiguous, written.
    pub(crate) out: *mut u8,
}

/// [`super::Backend::channel_sums`]: per-channel sums over `[n, c, s]` contiguous elements
/// (batch norm's statistics), accumulated in f64 and written in `dtype`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChannelSumsArgs {
    /// The dtype of every operand (f32 or f64).
    pub(crate) dtype: DType,
    /// Samples, channels, and elements per channel of one sample.
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) s: usize,
    /// `n·c·s` elements read.
    pub(crate) x: *const u8,
    /// Null: the forward statistics, `first` = the mean and `second` = the biased variance
    /// of each channel. Else `n·c·s` gradient elements read, with `mean` given: `first` =
    /// `Σ grad` and `second` = `Σ grad·(x - mean)` of each channel.
    pub(crate) grad: *const u8,
    /// `c` elements read (with `grad`), or null.
    pub(crate) mean: *const u8,
    /// `c` elements written each.
    pub(crate) first: *mut u8,
    pub(crate) second: *mut u8,
}

/// [`super::Backend::channel_affine`]: `out = x·a[ch] + b[ch]`, plus `grad·d[ch]` when
/// `grad` is given, over `[n, c, s]` contiguous elements (batch norm's element-wise passes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChannelAffineArgs {
    /// The dtype of every operand (f32 or f64).
    pub(crate) dtype: DType,
    /// Samples, channels, and elements per channel of one sample.
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) s: usize,
    /// `n·c·s` elements read.
    pub(crate) x: *const u8,
    /// `c` elements read each.
    pub(crate) a: *const u8,
    pub(crate) b: *const u8,
    /// `n·c·s` elements read and `c` elements of `d`, or both null.
    pub(crate) grad: *const u8,
    pub(crate) d: *const u8,
    /// `n·c·s` elements written.
    pub(crate) out: *mut u8,
}

/// [`super::Backend::max_pool2d`]: 2-d max pooling of contiguous planes, with each maximum's
/// flat position in its plane.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaxPoolArgs<'a> {
    /// The dtype of input and output.
    pub(crate) dtype: DType,
    /// `planes·h·w` elements read.
    pub(crate) src: *const u8,
    /// `planes·oh·ow` elements written.
    pub(crate) dst: *mut u8,
    /// `planes·oh·ow` i64 positions written.
    pub(crate) idx: *mut i64,
    /// Planes.
    pub(crate) planes: usize,
    /// The windows over each plane.
    pub(crate) windows: &'a PoolWindows,
}

/// [`super::Backend::max_pool2d_backward`]: per plane, zeros `gx` and adds each `grad`
/// element at the position `idx` names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaxPoolBackwardArgs {
    /// The dtype of `grad` and `gx`.
    pub(crate) dtype: DType,
    /// `planes·plane_out` gradient elements read.
    pub(crate) grad: *const u8,
    /// `planes·plane_out` i64 positions read.
    pub(crate) idx: *const i64,
    /// `planes·plane_in` elements written.
    pub(crate) gx: *mut u8,
    /// Planes.
    pub(crate) planes: usize,
    /// Elements of one input plane.
    pub(crate) plane_in: usize,
    /// Elements of one output plane.
    pub(crate) plane_out: usize,
}

/// [`super::Backend::update`]: an optimizer's update rule applied in place to one parameter.
#[derive(Clone, Copy)]
pub(crate) struct UpdateArgs<'a> {
    /// The rule and its hyper-parameters.
    pub(crate) rule: &'a UpdateRule,
    /// The parameter's dtype (every operand's).
    pub(crate) dtype: DType,
    /// The parameter, its gradient and the rule's state.
    pub(crate) ptrs: &'a UpdatePtrs,
}

/// [`super::Backend::layer_norm_forward`]: `rows` contiguous rows of `cols` elements of
/// `dtype` (f32 or f64) normalised to zero mean and unit variance, then scaled and shifted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerNormArgs {
    /// f32 or f64, of every operand.
    pub(crate) dtype: DType,
    /// `rows·cols` elements read.
    pub(crate) x: *const u8,
    /// `cols` elements read, or null for none.
    pub(crate) weight: *const u8,
    /// `cols` elements read, or null for none.
    pub(crate) bias: *const u8,
    /// `rows·cols` elements written.
    pub(crate) y: *mut u8,
    /// `rows` elements written: each row's mean.
    pub(crate) mean: *mut u8,
    /// `rows` elements written: each row's `1/sqrt(var + eps)` (biased variance).
    pub(crate) rstd: *mut u8,
    /// Rows.
    pub(crate) rows: usize,
    /// Elements of a row.
    pub(crate) cols: usize,
    /// Added to the variance.
    pub(crate) eps: f64,
    /// Each row's moments by the scalar Welford update in the dtype, element by element
    /// (PyTorch's order for short rows), instead of sums in f64.
    pub(crate) welford: bool,
}

/// [`super::Backend::layer_norm_backward`]: the gradients of a layer norm over `rows`
/// contiguous rows of `cols` elements, from the saved input, mean and `rstd`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerNormBackwardArgs {
    /// f32 or f64, of every operand.
    pub(crate) dtype: DType,
    /// `rows·cols` elements read: the forward's input.
    pub(crate) x: *const u8,
    /// `rows·cols` elements read: the output's gradient.
    pub(crate) grad: *const u8,
    /// `rows` elements read.
    pub(crate) mean: *const u8,
    /// `rows` elements read.
    pub(crate) rstd: *const u8,
    /// `cols` elements read, or null (no weight).
    pub(crate) weight: *const u8,
    /// `rows·cols` elements written, or null (not needed).
    pub(crate) dx: *mut u8,
    /// `cols` elements written, or null (not needed).
    pub(crate) dweight: *mut u8,
    /// `cols` elements written, or null (not needed).
    pub(crate) dbias: *mut u8,
    /// Rows.
    pub(crate) rows: usize,
    /// Elements of a row.
    pub(crate) cols: usize,
}

/// One `rows × cols` matrix operand of the fused recurrent cells: its first element and the
/// distance in elements between the starts of consecutive rows (its elements are
/// contiguous within a row).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowsAt<P> {
    /// The first element, or null where the operand is optional and absent.
    pub(crate) ptr: P,
    /// Elements from one row's start to the next's.
    pub(crate) row_stride: usize,
}

/// [`super::Backend::lstm_cell_forward`]: the element-wise part of `rows` LSTM cells of
/// `hidden` units (PyTorch's `_thnn_fused_lstm_cell`): with
/// `gates = input_gates + hidden_gates + bias_ih + bias_hh` (`[rows, 4·hidden]`, the chunks
/// `i, f, g, o`), writes the activated gates `σ(i), σ(f), tanh(g), σ(o)` to `workspace`,
/// `cy = σ(f)·cx + σ(i)·tanh(g)` and `hy = σ(o)·tanh(cy)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LstmCellArgs {
    /// f32 or f64, of every operand.
    pub(crate) dtype: DType,
    /// Cells (the batch).
    pub(crate) rows: usize,
    /// Units per cell: the gate matrices have `4·hidden` columns, the states `hidden`.
    pub(crate) hidden: usize,
    /// `[rows, 4·hidden]` read (unless `activated`).
    pub(crate) input_gates: RowsAt<*const u8>,
    /// `[rows, 4·hidden]` read, or null for none.
    pub(crate) hidden_gates: RowsAt<*const u8>,
    /// `4·hidden` contiguous elements read, or null for none.
    pub(crate) bias_ih: *const u8,
    /// `4·hidden` contiguous elements read, or null for none.
    pub(crate) bias_hh: *const u8,
    /// `[rows, hidden]` read: the cell state before the step.
    pub(crate) cx: RowsAt<*const u8>,
    /// `[rows, 4·hidden]` written: the activated gates. May be `input_gates` itself (each
    /// element is read before it is written), else overlaps nothing.
    pub(crate) workspace: RowsAt<*mut u8>,
    /// `[rows, hidden]` written: the hidden state after the step, or null for none.
    pub(crate) hy: RowsAt<*mut u8>,
    /// `[rows, hidden]` written: the cell state after the step.
    pub(crate) cy: RowsAt<*mut u8>,
    /// The workspace already holds the step's activated gates (read, not written; the
    /// gate inputs and biases are not read): only the states are computed, with the same
    /// rounding. How a backward recomputes the cell states it did not keep.
    pub(crate) activated: bool,
}

/// [`super::Backend::lstm_cell_backward`]: the gradients of the LSTM cells of
/// [`LstmCellArgs`] from the saved activated gates (`workspace`), `cx` and `cy`:
/// `gc = grad_cy + grad_hy·σ(o)·(1 - tanh²(cy))`, then the pre-activation gates' gradients
/// `gc·tanh(g)·σ'(i)`, `gc·cx·σ'(f)`, `gc·σ(i)·(1 - tanh²(g))`, `grad_hy·tanh(cy)·σ'(o)`
/// into `grad_gates`, and `gc·σ(f)` into `grad_cx`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LstmCellBackwardArgs {
    /// f32 or f64, of every operand.
    pub(crate) dtype: DType,
    /// Cells (the batch).
    pub(crate) rows: usize,
    /// Units per cell.
    pub(crate) hidden: usize,
    /// `[rows, hidden]` read, or null for a zero gradient.
    pub(crate) grad_hy: RowsAt<*const u8>,
    /// `[rows, hidden]` read, or null for a zero gradient.
    pub(crate) grad_cy: RowsAt<*const u8>,
    /// `[rows, hidden]` read.
    pub(crate) cx: RowsAt<*const u8>,
    /// `[rows, hidden]` read.
    pub(crate) cy: RowsAt<*const u8>,
    /// `[rows, 4·hidden]` read: the activated gates the forward wrote.
    pub(crate) workspace: RowsAt<*const u8>,
    /// `[rows, 4·hidden]` written. May be `workspace` itself (each element is read before
    /// it is written), else overlaps nothing.
    pub(crate) grad_gates: RowsAt<*mut u8>,
    /// `[rows, hidden]` written. May be `grad_cy` itself (each element is read before it
    /// is written), else overlaps nothing.
    pub(crate) grad_cx: RowsAt<*mut u8>,
}

/// [`super::Backend::gru_cell_forward`]: the element-wise part of `rows` GRU cells of
/// `hidden` units, from the two products' gates (biases included) `input_gates` and
/// `hidden_gates` (`[rows, 3·hidden]`, the chunks `r, z, n`) and the state `h`:
/// `r = σ(hr + ir)`, `z = σ(hz + iz)`, `n = tanh(in + hn·r)` and `hy = (h - n)·z + n`, each
/// rounded as PyTorch's composition of these ops rounds it. Writes `r, z, n, hn` to
/// `workspace`, all the backward needs besides `h`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GruCellArgs {
    /// f32 or f64, of every operand.
    pub(crate) dtype: DType,
    /// Cells (the batch).
    pub(crate) rows: usize,
    /// Units per cell: the gate matrices have `3·hidden` columns, the states `hidden`.
    pub(crate) hidden: usize,
    /// `[rows, 3·hidden]` read.
    pub(crate) input_gates: RowsAt<*const u8>,
    /// `[rows, 3·hidden]` read.
    pub(crate) hidden_gates: RowsAt<*const u8>,
    /// `[rows, hidden]` read: the state before the step.
    pub(crate) h: RowsAt<*const u8>,
    /// `[rows, 4·hidden]` written: `r, z, n` and the hidden product's `n` chunk `hn`; its
    /// first `3·hidden` columns may be `input_gates` themselves (a layer whose input
    /// products were written into its workspaces: every column is read before it is
    /// written), and it overlaps nothing else.
    pub(crate) workspace: RowsAt<*mut u8>,
    /// `[rows, hidden]` written: the state after the step; overlaps nothing.
    pub(crate) hy: RowsAt<*mut u8>,
}

/// [`super::Backend::gru_cell_backward`]: the gradients of the GRU cells of
/// [`GruCellArgs`] from `grad_hy`, the saved `workspace` (`r, z, n, hn`) and `h`:
/// `dz = g·(h - n)·z(1 - z)`, `dn = g·(1 - z)·(1 - n²)`, `dr = dn·hn·r(1 - r)`; the input
/// gates' gradient is `[dr, dz, dn]`, the hidden gates' `[dr, dz, dn·r]` and the state's
/// `g·z`, each rounded as the composed backward rounds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GruCellBackwardArgs {
    /// f32 or f64, of every operand.
    pub(crate) dtype: DType,
    /// Cells (the batch).
    pub(crate) rows: usize,
    /// Units per cell.
    pub(crate) hidden: usize,
    /// `[rows, hidden]` read.
    pub(crate) grad_hy: RowsAt<*const u8>,
    /// `[rows, hidden]` read: the state before the step.
    pub(crate) h: RowsAt<*const u8>,
    /// `[rows, 4·hidden]` read: what the forward wrote.
    pub(crate) workspace: RowsAt<*const u8>,
    /// `[rows, 3·hidden]` written, or null when not needed; may be the first `3·hidden`
    /// columns of the workspace's own rows (a layer writing its gradients over what it
    /// saved: every column is read before it is written), overlaps nothing else.
    pub(crate) grad_input_gates: RowsAt<*mut u8>,
    /// `[rows, 3·hidden]` written, or null when not needed; overlaps nothing.
    pub(crate) grad_hidden_gates: RowsAt<*mut u8>,
    /// `[rows, hidden]` written, or null when not needed; overlaps nothing.
    pub(crate) grad_h: RowsAt<*mut u8>,
}
