//! Kernel descriptors: the names by which an op asks a backend for a kernel. They say what to
//! compute, never how; every backend implements each of them.

use crate::{DType, Scalar};

/// A floating function: integer inputs compute in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatOp {
    /// `e^x`.
    Exp,
    /// `ln x`.
    Log,
    /// `√x`.
    Sqrt,
    /// `1/√x`.
    Rsqrt,
    /// `sin x`.
    Sin,
    /// `cos x`.
    Cos,
    /// `tanh x`.
    Tanh,
    /// `1/(1+e^-x)`.
    Sigmoid,
    /// `x/2 (1 + erf(x/√2))`.
    Gelu,
    /// `x sigmoid(x)`.
    Silu,
    /// d/dx gelu(x) = Φ(x) + x φ(x), for gelu's backward.
    GeluDerivative,
    /// `x/2 (1 + tanh(√(2/π) (x + 0.044715 x³)))`: gelu's tanh approximation.
    GeluTanh,
    /// d/dx of [`FloatOp::GeluTanh`], for its backward.
    GeluTanhDerivative,
}

/// A unary op that keeps the dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SameOp {
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `max(x, 0)`, NaN kept.
    Relu,
    /// `x` limited to `[min, max]` (either bound may be absent).
    Clamp(Option<Scalar>, Option<Scalar>),
    /// 0 where `x` is infinite, else `x` (NaN kept): `logsumexp`'s shift.
    ZeroInfinities,
}

/// A binary element-wise op: `out = a op b`, with `b` a tensor or a number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum BinaryOp {
    /// `a + alpha·b`.
    Add(Scalar),
    /// `a - alpha·b`.
    Sub(Scalar),
    /// `a·b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a^b`.
    Pow,
    /// The larger of the two, NaN kept.
    Maximum,
    /// The smaller of the two, NaN kept.
    Minimum,
    /// `a == b` (a bool result).
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
    /// `a` where `b > 0`, else 0 (a NaN `b` passes `a`): relu's gradient `a` given its output
    /// `b`, PyTorch's `threshold_backward`, in one pass.
    ReluGrad,
}

impl BinaryOp {
    /// Whether the op compares (a bool result, no gradient).
    pub(crate) fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// A three-operand element-wise op over (out, a, b, c).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum TernaryOp {
    /// `a` where the condition (operand a, read as 0 or 1) is set, else `b` (operands
    /// `cond, a, b`).
    Where,
    /// `x + value·t1·t2` (operands `x, t1, t2`).
    AddCMul(Scalar),
    /// `a·b + c` rounded once (floating dtypes).
    FusedMulAdd,
    /// `value` where the mask (operand b) is set, else `a` (operands `x, mask`; two inputs).
    MaskedFill(Scalar),
}

/// The per-element term a fold accumulates, from the element `x` (widened to the
/// accumulator) and the result's parameter `p` (a mean, a maximum; 0 without one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FoldTerm {
    /// `x`.
    Value,
    /// `|x|`.
    Abs,
    /// 1 for a non-zero `x`, else 0.
    NonZero,
    /// `x²`.
    Square,
    /// `|x|^p` for a fixed power.
    AbsPow(f64),
    /// `(x - p)²`.
    SquaredDeviation,
    /// `e^(x - p)`.
    ExpShifted,
}

/// How a fold combines terms; partial results combine the same way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FoldCombine {
    /// Sum (wrapping for integer accumulators).
    Sum,
    /// Product (wrapping for integer accumulators).
    Prod,
    /// Product rounded to a half-precision dtype at every step, as PyTorch's half products.
    ProdRoundedTo(crate::DType),
    /// Maximum, NaN kept.
    Max,
    /// Minimum, NaN kept.
    Min,
}

/// A fold: each reduced element's term, combined into its result's accumulator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fold {
    /// The per-element term.
    pub(crate) term: FoldTerm,
    /// How terms combine.
    pub(crate) combine: FoldCombine,
}

impl Fold {
    /// A fold of the elements themselves.
    pub(crate) fn of_values(combine: FoldCombine) -> Fold {
        Fold {
            term: FoldTerm::Value,
            combine,
        }
    }
}

/// Where one operand's matrices are, in elements of its storage: element `(i, j)` of batch
/// entry `idx` lives at `offset + Σ idx[d]·batch[d] + i·rs + j·cs`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mat {
    pub(crate) offset: usize,
    pub(crate) batch: Vec<usize>,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

impl Mat {
    /// Offset of element `(0, 0)` of batch entry `index`.
    pub(crate) fn at(&self, index: &[usize]) -> usize {
        self.offset
            + index
                .iter()
                .zip(&self.batch)
                .map(|(i, s)| i * s)
                .sum::<usize>()
    }

    /// A matrix operand that is the same for every entry of a batch of `nb` dimensions.
    pub(crate) fn unbatched(offset: usize, nb: usize, rs: usize, cs: usize) -> Mat {
        Mat {
            offset,
            batch: vec![0; nb],
            rs,
            cs,
        }
    }
}

/// A batch of products `a[idx] (m×k) · b[idx] (k×n)`.
#[derive(Debug, Clone)]
pub(crate) struct Product {
    pub(crate) batch: Vec<usize>,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) a: Mat,
    pub(crate) b: Mat,
}

/// Whether `sum` and `mean` over a contiguous input of `dtype` take the dense path (the
/// backend's `dense_sum`, summing in f64): the floating dtypes. Every backend answers the same,
/// so that the meta device allocates as the CPU does.
pub(crate) fn sums_densely(dtype: DType) -> bool {
    dtype.is_floating()
}

/// The longest depth (`c·kh·kw`) a direct convolution takes: longer ones build columns and
/// run on the product kernels, whose blocking suits them better.
pub(crate) const DIRECT_CONV_MAX_DEPTH: usize = 1024;

/// Whether the CPU convolves `dtype` with a depth of `depth` steps (`c·kh·kw`) directly
/// (`Backend::conv2d_direct`): f32 up to [`DIRECT_CONV_MAX_DEPTH`], on every CPU (vector
/// kernels where it has AVX-512 or AVX2, a plain loop elsewhere). The meta device answers
/// the same, so that it allocates as the CPU does.
pub(crate) fn convolves_directly(dtype: DType, depth: usize) -> bool {
    dtype == DType::F32 && (1..=DIRECT_CONV_MAX_DEPTH).contains(&depth)
}

/// The most rows, columns and depth of the f32 blocks an f16/bf16 product widens into.
pub(crate) const HALF_BLOCK: usize = 256;

/// The most products of a batch that widen side by side, each in its own slot of the room.
pub(crate) const HALF_SLOTS: usize = 4;

/// The most bytes one slot of widened room holds (768 KiB): a block of `a`, one of `b` and
/// the f32 sums of one output block. A product's room is at most [`HALF_SLOTS`] slots
/// (3 MiB), whatever its sizes and the number of threads.
pub(crate) const HALF_SLOT_BYTES: usize = 3 * HALF_BLOCK * HALF_BLOCK * 4;

/// The depth up to which the `gemm` crate's f16 kernel sums a whole product in f32 before
/// rounding: its depth blocks are never shorter than this, and it rounds the f16 output after
/// each one.
pub(crate) const F16_NATIVE_MAX_DEPTH: usize = 512;

/// The f32 blocks one f16/bf16 product widens into: `m×k` of `a`, `k×n` of `b` and `m×n`
/// sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct HalfBlock {
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
}

impl HalfBlock {
    /// The blocks of `m×k · k×n` products: each dimension capped at [`HALF_BLOCK`].
    pub(crate) fn for_product(m: usize, n: usize, k: usize) -> HalfBlock {
        HalfBlock {
            m: m.min(HALF_BLOCK),
            n: n.min(HALF_BLOCK),
            k: k.min(HALF_BLOCK),
        }
    }

    /// f32 elements of one slot (at most [`HALF_SLOT_BYTES`] / 4).
    pub(crate) fn len(self) -> usize {
        let len = self.m * self.k + self.k * self.n + self.m * self.n;
        debug_assert!(len * 4 <= HALF_SLOT_BYTES);
        len
    }
}

/// Whether an f16 `m×k · k×n` product runs on the `gemm` crate's own f16 kernel, which widens
/// to f32 inside its packing and sums in f32. It rounds once only when the depth fits one of
/// its depth blocks (3..=[`F16_NATIVE_MAX_DEPTH`]; for `k` ≤ 2 it rounds after each term),
/// both `m` and `n` are at least 2 (its matrix-vector kernels accumulate in f16), no input is
/// added (it would round `beta·c` first) and `alpha` is an f16 (it takes it as one).
pub(crate) fn f16_native(m: usize, n: usize, k: usize, alpha: f32, adds_c: bool) -> bool {
    (3..=F16_NATIVE_MAX_DEPTH).contains(&k)
        && m >= 2
        && n >= 2
        && !adds_c
        && half::f16::from_f32(alpha).to_f32() == alpha
}

/// Whether a product widens in f32 blocks: f16 and bf16 products with something to multiply
/// (`k` > 0, `alpha` ≠ 0) that f16's own kernel does not take ([`f16_native`]).
pub(crate) fn widens_in_blocks(
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    adds_c: bool,
) -> bool {
    let product = k > 0 && m > 0 && n > 0 && alpha != 0.0;
    match dtype {
        DType::BF16 => product,
        DType::F16 => product && !f16_native(m, n, k, alpha, adds_c),
        _ => false,
    }
}

/// Buffers a matrix product works in, allocated by the op (so they are counted, attributed
/// and predicted like any tensor): null where the product needs none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GemmScratch {
    /// Room for every result, in the product's dtype, when the output cannot be written
    /// directly (it shares memory with an input, or is not dense): [`GemmScratch::buffer_len`].
    pub(crate) buffer: *mut u8,
    /// f32 room for f16/bf16 products that widen in blocks: `slots` slots of `block.len()`
    /// elements ([`GemmScratch::half_room`]).
    pub(crate) widened: *mut u8,
    /// The blocks each slot of `widened` holds.
    pub(crate) block: HalfBlock,
    /// Slots in `widened` (0 when the product does not widen in blocks).
    pub(crate) slots: usize,
}

impl GemmScratch {
    /// Elements of the result buffer `p` needs when `buffered`.
    pub(crate) fn buffer_len(p: &Product, buffered: bool) -> usize {
        if !buffered {
            return 0;
        }
        p.batch
            .iter()
            .product::<usize>()
            .saturating_mul(p.m.saturating_mul(p.n))
    }

    /// The blocks and the number of slots of the f32 room `p` widens in, in `dtype`, with
    /// `alpha` and whether an input is added: one slot per product of the batch that may run
    /// at once, at most [`HALF_SLOTS`]; no slot when it does not widen.
    pub(crate) fn half_room(
        p: &Product,
        dtype: DType,
        alpha: f32,
        adds_c: bool,
    ) -> (HalfBlock, usize) {
        if !widens_in_blocks(dtype, p.m, p.n, p.k, alpha, adds_c) {
            return (HalfBlock::default(), 0);
        }
        let batches = p.batch.iter().product::<usize>();
        (
            HalfBlock::for_product(p.m, p.n, p.k),
            batches.min(HALF_SLOTS),
        )
    }
}

/// The windows of a 2-d convolution over planes of `h×w` elements: kernel offset `(i, j)`
/// of output `(y, x)` (of `oh×ow`) reads input row `y·sh + i·dh - ph` and column
/// `x·sw + j·dw - pw`, or zero where that falls in the padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvWindows {
    /// Input plane height and width.
    pub h: usize,
    pub w: usize,
    /// Output plane height and width.
    pub oh: usize,
    pub ow: usize,
    /// Kernel height and width.
    pub kh: usize,
    pub kw: usize,
    /// Distance between output positions, in input positions.
    pub sh: usize,
    pub sw: usize,
    /// Zeros before the first row and column.
    pub ph: usize,
    pub pw: usize,
    /// Distance between the positions a kernel reads.
    pub dh: usize,
    pub dw: usize,
}

impl ConvWindows {
    /// The outputs along one axis that kernel offset `k` reads inside the input, and the
    /// first input position read: `(first output, count, first input)`, or `None` when
    /// every position falls in the padding.
    pub fn reach(
        out: usize,
        size: usize,
        stride: usize,
        pad: usize,
        dil: usize,
        k: usize,
    ) -> Option<(usize, usize, usize)> {
        let offset = k * dil;
        // Output o reads input o·stride + offset - pad, which must lie in 0..size.
        let first = pad.saturating_sub(offset).div_ceil(stride);
        let last = (size.checked_sub(1)? + pad).checked_sub(offset)? / stride;
        let last = last.min(out.checked_sub(1)?);
        if first > last {
            return None;
        }
        Some((first, last - first + 1, first * stride + offset - pad))
    }

    /// [`ConvWindows::reach`] along the rows for kernel row `i`.
    pub fn rows(&self, i: usize) -> Option<(usize, usize, usize)> {
        Self::reach(self.oh, self.h, self.sh, self.ph, self.dh, i)
    }

    /// [`ConvWindows::reach`] along the columns for kernel column `j`.
    pub fn cols(&self, j: usize) -> Option<(usize, usize, usize)> {
        Self::reach(self.ow, self.w, self.sw, self.pw, self.dw, j)
    }
}

/// The windows of a 2-d pooling over planes of `h×w` elements: output `(y, x)` of `oh×ow`
/// reads rows `y·sh - ph ..` and columns `x·sw - pw ..`, `kh×kw` of them, clipped to the
/// plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolWindows {
    /// Input plane height and width.
    pub h: usize,
    pub w: usize,
    /// Output plane height and width.
    pub oh: usize,
    pub ow: usize,
    /// Window height and width.
    pub kh: usize,
    pub kw: usize,
    /// Distance between windows.
    pub sh: usize,
    pub sw: usize,
    /// Padding before the first row and column.
    pub ph: usize,
    pub pw: usize,
}

impl PoolWindows {
    /// The input range along one axis that output `o` reads, clipped to `0..size`.
    pub fn span(
        o: usize,
        stride: usize,
        pad: usize,
        k: usize,
        size: usize,
    ) -> std::ops::Range<usize> {
        let start = (o * stride).saturating_sub(pad);
        let end = (o * stride + k).saturating_sub(pad).min(size);
        start..end.max(start)
    }

    /// Whether every window lies inside the plane: no padding, and the last window of each
    /// axis ends within it.
    pub fn inside(&self) -> bool {
        self.ph == 0
            && self.pw == 0
            && self.oh > 0
            && self.ow > 0
            && (self.oh - 1) * self.sh + self.kh <= self.h
            && (self.ow - 1) * self.sw + self.kw <= self.w
    }

    /// Whether the windows are 2×2 at stride 2, inside the plane (`MaxPool2d(2)`).
    pub fn is_pairs(&self) -> bool {
        (self.kh, self.kw, self.sh, self.sw) == (2, 2, 2, 2) && self.inside()
    }
}

/// One SGD step on a parameter (PyTorch's single-tensor SGD, each operation rounded to the
/// parameter's compute dtype): `d = ±g + weight_decay·p`; with momentum `b = d` on the
/// buffer's first step, else `b = momentum·b + (1 − dampening)·d`, then `d = d + momentum·b`
/// (nesterov) or `d = b`; `p = p − lr·d`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdStep {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: no buffer).
    pub momentum: f64,
    /// Dampening of the gradient's share of the momentum buffer.
    pub dampening: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Ascend instead of descend.
    pub maximize: bool,
    /// The buffer's first step: it is set to the gradient, not blended.
    pub first_step: bool,
}

/// One Adam or AdamW step on a parameter (PyTorch's single-tensor Adam): `d = ±g`; with
/// decoupled weight decay `p = p·(1 − lr·wd)`, else `d = d + wd·p`; `m = lerp(m, d, 1 − β₁)`;
/// `v = β₂·v + (1 − β₂)·d²`; with amsgrad `vmax = max(vmax, v)` stands for `v`;
/// `p = p − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + eps)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment.
    pub beta1: f64,
    /// Decay of the second moment.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Weight decay: an L2 penalty on the gradient, or decoupled (AdamW).
    pub weight_decay: f64,
    /// AdamW's decoupled weight decay.
    pub decoupled_weight_decay: bool,
    /// Keep the running maximum of the second moment.
    pub amsgrad: bool,
    /// Ascend instead of descend.
    pub maximize: bool,
    /// The step number `t`, counted from 1.
    pub step: u64,
}

/// An in-place parameter update: one fused pass over the parameter, its gradient and its
/// state (operands `p, g, s0, s1, s2`, state as the rule needs it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum UpdateRule {
    /// SGD; state: the momentum buffer when momentum is non-zero.
    Sgd(SgdStep),
    /// Adam; state: `exp_avg`, `exp_avg_sq`, and `max_exp_avg_sq` with amsgrad.
    Adam(AdamStep),
}

impl UpdateRule {
    /// How many state tensors the rule reads and writes.
    pub(crate) fn state_count(&self) -> usize {
        match self {
            UpdateRule::Sgd(s) => usize::from(s.momentum != 0.0),
            UpdateRule::Adam(a) => 2 + usize::from(a.amsgrad),
        }
    }

    /// The in-place writes to the parameter that PyTorch's step makes, each of which moves
    /// its version: AdamW's decay is one (`mul_`), the update another.
    pub(crate) fn param_writes(&self) -> u32 {
        match self {
            UpdateRule::Adam(a) if a.decoupled_weight_decay && a.weight_decay != 0.0 => 2,
            _ => 1,
        }
    }
}

/// The operands of one update: the parameter, its gradient and up to three state tensors,
/// all dense with the same `n` elements of the parameter's dtype.
pub(crate) struct UpdatePtrs {
    /// The parameter (written).
    pub(crate) param: *mut u8,
    /// The gradient (read).
    pub(crate) grad: *const u8,
    /// The state tensors the rule uses, in its order (written); null where unused.
    pub(crate) state: [*mut u8; 3],
    /// Elements of each operand.
    pub(crate) n: usize,
}
