//! What the fused attention kernels take: the problem, where each operand lies, and the
//! tiles and scratch they work in. The tiles are decided here, not in a backend, so that
//! every backend (the meta device included) allocates the same scratch for a problem.

use crate::DType;

/// One attention problem: `B` batch entries of `heads` query heads, each attending `L`
/// queries over `S` keys; key and value heads are shared by `heads / kv_heads` query heads
/// each (grouped-query attention; `kv_heads == heads` without it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AttentionProblem {
    /// Batch entries (`B`).
    pub(crate) batch: usize,
    /// Query heads.
    pub(crate) heads: usize,
    /// Key and value heads: a divisor of `heads`.
    pub(crate) kv_heads: usize,
    /// Queries per head (`L`).
    pub(crate) l: usize,
    /// Keys per head (`S`).
    pub(crate) s: usize,
    /// The query's and key's last dimension (`E`).
    pub(crate) e: usize,
    /// The value's last dimension (`Ev`).
    pub(crate) ev: usize,
    /// The scores' factor.
    pub(crate) scale: f64,
    /// Query `i` attends keys `0..=i` only (top-left aligned).
    pub(crate) causal: bool,
}

impl AttentionProblem {
    /// The dtype the kernels compute and accumulate in, and write the row log-sum-exp in:
    /// f64 for f64 inputs, else f32 (also for f16 and bf16, as PyTorch's CPU kernel).
    pub(crate) fn compute(dtype: DType) -> DType {
        if dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        }
    }

    /// The key/value head that query head `h` reads.
    pub(crate) fn kv_head(&self, h: usize) -> usize {
        h / (self.heads / self.kv_heads.max(1)).max(1)
    }

    /// The strides of the output `[B, heads, L, Ev]`, which lies in memory as
    /// `[B, L, heads, Ev]`, as PyTorch's CPU kernel lays it out: merging the heads back
    /// (`transpose(1, 2)` then a `[B, L, heads·Ev]` view) then copies nothing.
    pub(crate) fn out_strides(&self) -> [usize; 4] {
        [
            self.l * self.heads * self.ev,
            self.ev,
            self.heads * self.ev,
            1,
        ]
    }

    /// Where the output's row `(b, h, i)` starts, in elements.
    pub(crate) fn out_row(&self, b: usize, h: usize, i: usize) -> usize {
        let s = self.out_strides();
        b * s[0] + h * s[1] + i * s[2]
    }

    /// How many query blocks of `q_block` rows cover `L`.
    pub(crate) fn q_blocks(&self, q_block: usize) -> usize {
        self.l.div_ceil(q_block.max(1))
    }

    /// The keys query rows `rows` may attend: all `S`, or with causal masking those up to
    /// the last row's diagonal.
    pub(crate) fn keys_for(&self, rows: std::ops::Range<usize>) -> usize {
        if self.causal {
            rows.end.min(self.s)
        } else {
            self.s
        }
    }
}

/// Where a `[B, heads, rows, cols]` operand lies: element `(b, h, row, col)` at
/// `b·batch + h·head + row·row + col` elements from `ptr` (its last dimension contiguous).
/// `P` is the pointer: read (`*const u8`) or written (`*mut u8`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadLayout<P> {
    /// Element `(0, 0, 0, 0)`.
    pub(crate) ptr: P,
    /// Stride between batch entries, in elements.
    pub(crate) batch: usize,
    /// Stride between heads, in elements.
    pub(crate) head: usize,
    /// Stride between rows, in elements.
    pub(crate) row: usize,
}

impl<P> HeadLayout<P> {
    /// Where row `(b, h, i)` starts, in elements.
    pub(crate) fn row_at(&self, b: usize, h: usize, i: usize) -> usize {
        b * self.batch + h * self.head + i * self.row
    }
}

/// One of `q`, `k`, `v` (or the output's gradient), read.
pub(crate) type HeadOperand = HeadLayout<*const u8>;

/// One of the gradients dq, dk, dv, written.
pub(crate) type GradOperand = HeadLayout<*mut u8>;

/// An attention mask broadcast to `[B, heads, L, S]`: bool (true = attend) or floating
/// (added to the scores), with stride 0 along every broadcast dimension.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaskOperand {
    /// Element `(0, 0, 0, 0)`.
    pub(crate) ptr: *const u8,
    /// The mask's dtype.
    pub(crate) dtype: DType,
    /// Strides over `[B, heads, L, S]`, in elements.
    pub(crate) strides: [usize; 4],
}

/// Query rows per block for `l` queries, as PyTorch's CPU kernel splits them (more rows per
/// block for long sequences, so that each key block is reused by more rows).
fn q_block_for(l: usize) -> usize {
    let rows = if l >= 768 {
        256
    } else if l >= 192 {
        64
    } else {
        32
    };
    rows.min(l).max(1)
}

/// Keys per block, at most (PyTorch's CPU kernel's split).
const KV_BLOCK: usize = 512;

/// The tiles a fused attention kernel works in and the scratch they take, in elements of
/// the compute dtype ([`AttentionProblem::compute`]). Work is spread over `slots` threads,
/// each with its own slot of scratch; the scratch is linear in `L` and `S`, never `L·S`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttentionTiles {
    /// Query rows per block.
    pub(crate) q_block: usize,
    /// Keys per block.
    pub(crate) kv_block: usize,
    /// Threads working at once, each in its own slot.
    pub(crate) slots: usize,
    /// Whether the inputs are widened into the slot first (f16 and bf16).
    pub(crate) widens: bool,
}

impl AttentionTiles {
    /// The forward's tiles for `p` in `dtype` on `threads` threads: one work item per
    /// (batch entry, head, query block).
    pub(crate) fn forward(p: &AttentionProblem, dtype: DType, threads: usize) -> AttentionTiles {
        let q_block = q_block_for(p.l);
        let items = p.batch * p.heads * p.q_blocks(q_block);
        AttentionTiles {
            q_block,
            kv_block: KV_BLOCK.min(p.s).max(1),
            slots: items.min(threads.max(1)),
            widens: AttentionProblem::compute(dtype) != dtype,
        }
    }

    /// The backward's tiles: one work item per (batch entry, key/value head), which owns
    /// the gradients of its keys and values.
    pub(crate) fn backward(p: &AttentionProblem, dtype: DType, threads: usize) -> AttentionTiles {
        let items = p.batch * p.kv_heads;
        AttentionTiles {
            q_block: q_block_for(p.l),
            kv_block: KV_BLOCK.min(p.s).max(1),
            slots: items.min(threads.max(1)),
            widens: AttentionProblem::compute(dtype) != dtype,
        }
    }

    /// One forward slot's elements: the scores of a block, the output's accumulator, the
    /// rows' running maximum and sum, and (when widening) a query block and a key and a
    /// value block. `None` when the count overflows.
    pub(crate) fn forward_slot(&self, p: &AttentionProblem) -> Option<usize> {
        let (bq, bk) = (self.q_block, self.kv_block);
        let widened = if self.widens {
            bq.checked_mul(p.e)?
                .checked_add(bk.checked_mul(p.e.checked_add(p.ev)?)?)?
        } else {
            0
        };
        bq.checked_mul(bk)?
            .checked_add(bq.checked_mul(p.ev)?)?
            .checked_add(2 * bq)?
            .checked_add(widened)
    }

    /// One backward slot's elements: the probabilities and their gradient for a block, the
    /// rows' `dO·O`, and (when widening) the head's query, key, value and output gradient
    /// and the accumulators of the three input gradients. `None` when the count overflows.
    pub(crate) fn backward_slot(&self, p: &AttentionProblem) -> Option<usize> {
        let widened = if self.widens {
            let (le, se, sev) = (
                p.l.checked_mul(p.e)?,
                p.s.checked_mul(p.e)?,
                p.s.checked_mul(p.ev)?,
            );
            le.checked_add(se)?
                .checked_add(sev)?
                .checked_mul(2)?
                .checked_add(p.l.checked_mul(p.ev)?)?
        } else {
            0
        };
        self.q_block
            .checked_mul(self.kv_block)?
            .checked_mul(2)?
            .checked_add(p.l)?
            .checked_add(widened)
    }

    /// The whole scratch of `slot` elements per slot, `None` when it overflows.
    pub(crate) fn scratch(&self, slot: Option<usize>) -> Option<usize> {
        slot?.checked_mul(self.slots)
    }
}

/// [`super::Backend::attention_forward`]: the output `[B, heads, L, Ev]` and each row's
/// log-sum-exp `[B, heads, L]` of `softmax(q·kᵀ·scale + mask)·v`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttentionArgs<'a> {
    /// The dtype of `q`, `k`, `v` and the output.
    pub(crate) dtype: DType,
    /// The problem.
    pub(crate) problem: &'a AttentionProblem,
    /// The tiles, from [`AttentionTiles::forward`].
    pub(crate) tiles: AttentionTiles,
    /// The queries.
    pub(crate) q: HeadOperand,
    /// The keys.
    pub(crate) k: HeadOperand,
    /// The values.
    pub(crate) v: HeadOperand,
    /// The mask, if any.
    pub(crate) mask: Option<MaskOperand>,
    /// The output `[B, heads, L, Ev]` of `dtype`, laid out with
    /// [`AttentionProblem::out_strides`], written.
    pub(crate) out: *mut u8,
    /// Each row's log-sum-exp: contiguous `[B, heads, L]` of the compute dtype, written
    /// (`-inf` for a row that attends nothing).
    pub(crate) lse: *mut u8,
    /// `slots · forward_slot` elements of the compute dtype.
    pub(crate) scratch: *mut u8,
}

/// [`super::Backend::attention_backward`]: the gradients of `q`, `k` and `v` from the
/// output's gradient, recomputing the probabilities block by block from the saved
/// log-sum-exp.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttentionBackwardArgs<'a> {
    /// The forward's arguments, with its output and log-sum-exp now read; its scratch
    /// pointer is ignored.
    pub(crate) forward: AttentionArgs<'a>,
    /// The gradient of the output.
    pub(crate) grad: HeadOperand,
    /// The queries' gradient, of the queries' shape and `dtype`.
    pub(crate) dq: GradOperand,
    /// The keys' gradient `[B, kv_heads, S, E]`.
    pub(crate) dk: GradOperand,
    /// The values' gradient `[B, kv_heads, S, Ev]`.
    pub(crate) dv: GradOperand,
    /// The tiles, from [`AttentionTiles::backward`].
    pub(crate) tiles: AttentionTiles,
    /// `slots · backward_slot` elements of the compute dtype.
    pub(crate) scratch: *mut u8,
}
