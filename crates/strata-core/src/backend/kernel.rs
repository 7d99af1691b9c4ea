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

/// Where an indexed copy reads each visit's source element, as an element offset along the
/// picked dimension.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pick<'a> {
    /// `table[coords[dim]]` (`index_select`): one offset per position along `dim`, or
    /// `table[0]` for every visit without a dimension.
    ByCoordinate {
        /// The offsets, one per index.
        table: &'a [isize],
        /// The picked dimension, if the walk has one.
        dim: Option<usize>,
    },
    /// `indices[k]·stride` for the `k`-th visit in row-major order (`gather`).
    ByVisit {
        /// One index per visit.
        indices: &'a [i64],
        /// The source's stride along the picked dimension.
        stride: isize,
    },
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

/// Buffers a matrix product works in, allocated by the op (so they are counted, attributed
/// and predicted like any tensor): null where the product needs none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GemmScratch {
    /// Room for every result, in the product's dtype, when the output cannot be written
    /// directly (it shares memory with an input, or is not dense): [`GemmScratch::buffer_len`].
    pub(crate) buffer: *mut u8,
    /// f32 room for f16/bf16 products, which are widened: [`GemmScratch::widened_len`].
    pub(crate) widened: *mut u8,
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

    /// f32 elements `p` needs widened when its dtype is f16 or bf16: each product's `a`, `b`
    /// and result, for every product of the batch (products may run at once).
    pub(crate) fn widened_len(p: &Product, dtype: DType) -> usize {
        if !matches!(dtype, DType::F16 | DType::BF16) {
            return 0;
        }
        p.batch
            .iter()
            .product::<usize>()
            .saturating_mul(Self::widened_slot(p.m, p.n, p.k))
    }

    /// f32 elements one `m×k · k×n` widened product uses.
    pub(crate) fn widened_slot(m: usize, n: usize, k: usize) -> usize {
        m.saturating_mul(k)
            .saturating_add(k.saturating_mul(n))
            .saturating_add(m.saturating_mul(n))
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
