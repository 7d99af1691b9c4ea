//! Deterministic allocation traces of a training loop, and their replay on a
//! [`CachingAllocator`].
//!
//! A [`Trace`] is the sequence of allocator calls a program makes, with every buffer named by
//! an index. [`MlpTraining`] synthesises the trace of training a multi-layer perceptron with
//! Adam the way PyTorch's eager mode allocates: parameters once, the optimizer state on the
//! first step, then per step the input batch, the forward activations (kept for backward),
//! the backward gradients (freeing each saved activation once its gradient is done), the
//! optimizer's temporaries, and `zero_grad(set_to_none=True)`. Batch sizes vary from step to
//! step, as with a last partial batch or variable-length inputs, which is what fragments a
//! caching allocator's segments.
//!
//! [`replay`] runs a trace on an allocator and reports its peak allocated and reserved bytes;
//! over a [`VirtualBacking`](crate::VirtualBacking) this is an exact, cheap simulation of the
//! allocator's memory footprint for that program.
//!
//! ```
//! use strata_alloc::trace::{replay, MlpTraining};
//! use strata_alloc::{AllocatorConfig, CachingAllocator, DeviceAllocator, VirtualBacking};
//! let trace = MlpTraining::default().trace();
//! let conf = AllocatorConfig::parse("expandable_segments:True").unwrap();
//! let a = CachingAllocator::with_config(VirtualBacking::new(1 << 34), conf);
//! let report = replay(&a, &trace, |_, _| {}).unwrap();
//! assert!(report.peak_reserved >= report.peak_allocated);
//! assert_eq!(a.memory_allocated(), 0); // replay returns every block it still holds
//! ```

use crate::{AllocError, Backing, Block, CachingAllocator, DeviceAllocator, Site};

/// One allocator call of a [`Trace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate `size` bytes as buffer `id`.
    Alloc {
        /// Index of the buffer (unique over the whole trace).
        id: usize,
        /// Requested bytes.
        size: usize,
    },
    /// Free buffer `id`.
    Free {
        /// Index of a buffer allocated earlier and not yet freed.
        id: usize,
    },
}

/// A sequence of allocations and frees, divided into steps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// The calls, in order.
    pub ops: Vec<TraceOp>,
    /// For each step, the index in `ops` one past its last call. Calls before the first
    /// step's start (the parameters) belong to step 0.
    pub step_ends: Vec<usize>,
    /// How many buffer ids the trace uses (ids are `0..buffers`).
    pub buffers: usize,
}

impl Trace {
    /// Number of steps.
    pub fn steps(&self) -> usize {
        self.step_ends.len()
    }

    /// The most requested (un-rounded) bytes live at once.
    pub fn peak_requested(&self) -> usize {
        let mut sizes = vec![0; self.buffers];
        let (mut live, mut peak) = (0usize, 0usize);
        for op in &self.ops {
            match *op {
                TraceOp::Alloc { id, size } => {
                    sizes[id] = size;
                    live += size;
                    peak = peak.max(live);
                }
                TraceOp::Free { id } => live -= sizes[id],
            }
        }
        peak
    }

    /// Checks that every id is allocated once, freed at most once and only after its
    /// allocation, and that `step_ends` is increasing and ends at `ops.len()`.
    pub fn validate(&self) -> Result<(), String> {
        #[derive(Clone, Copy, PartialEq)]
        enum S {
            Unused,
            Live,
            Freed,
        }
        let mut state = vec![S::Unused; self.buffers];
        for (i, op) in self.ops.iter().enumerate() {
            match *op {
                TraceOp::Alloc { id, size } => {
                    let s = state
                        .get_mut(id)
                        .ok_or(format!("op {i}: id {id} out of range"))?;
                    if *s != S::Unused || size == 0 {
                        return Err(format!("op {i}: id {id} allocated twice or with 0 bytes"));
                    }
                    *s = S::Live;
                }
                TraceOp::Free { id } => {
                    let s = state
                        .get_mut(id)
                        .ok_or(format!("op {i}: id {id} out of range"))?;
                    if *s != S::Live {
                        return Err(format!("op {i}: id {id} freed while not live"));
                    }
                    *s = S::Freed;
                }
            }
        }
        if self.step_ends.windows(2).any(|w| w[0] > w[1])
            || self.step_ends.last().copied().unwrap_or(0) != self.ops.len()
        {
            return Err("step ends are not increasing up to the number of ops".into());
        }
        Ok(())
    }
}

/// The training loop [`MlpTraining::trace`] synthesises: an MLP of `Linear` layers with ReLU
/// between them, log-softmax + NLL loss, and Adam.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlpTraining {
    /// Feature counts, input first: `[784, 1024, 1024, 10]` is three `Linear` layers.
    pub layers: Vec<usize>,
    /// Batch size of each step, used in turn (cycled when there are more steps).
    pub batch_sizes: Vec<usize>,
    /// Number of training steps.
    pub steps: usize,
    /// Bytes per element of parameters and activations (4 for `f32`).
    pub elem_bytes: usize,
}

impl Default for MlpTraining {
    /// An MNIST-shaped deep MLP, 784→1024 (six hidden layers)→10 in `f32`, trained for 12
    /// steps with full batches of 512 and partial batches of 320 to 448 in between.
    fn default() -> Self {
        let mut layers = vec![784];
        layers.extend([1024; 6]);
        layers.push(10);
        MlpTraining {
            layers,
            batch_sizes: vec![512, 448, 512, 384, 512, 320],
            steps: 12,
            elem_bytes: 4,
        }
    }
}

/// Builds a trace, handing out buffer ids.
#[derive(Debug, Default)]
struct Builder {
    trace: Trace,
}

impl Builder {
    fn alloc(&mut self, size: usize) -> usize {
        let id = self.trace.buffers;
        self.trace.buffers += 1;
        self.trace.ops.push(TraceOp::Alloc {
            id,
            size: size.max(1),
        });
        id
    }

    fn free(&mut self, id: usize) {
        self.trace.ops.push(TraceOp::Free { id });
    }

    fn end_step(&mut self) {
        self.trace.step_ends.push(self.trace.ops.len());
    }
}

impl MlpTraining {
    /// The small MNIST MLP, 784→1024→1024→10 in `f32`, with batches of 128 and 64 for 12
    /// steps. Its peak (about 36 MiB) is under two 20 MiB large-pool pages, so page rounding
    /// alone dominates its reserved-over-allocated overhead.
    pub fn small() -> Self {
        MlpTraining {
            layers: vec![784, 1024, 1024, 10],
            batch_sizes: vec![128, 64],
            steps: 12,
            elem_bytes: 4,
        }
    }

    /// The allocation trace of `steps` training steps (deterministic: the same settings give
    /// the same trace). Parameters and optimizer state stay live at the end, as in a program
    /// that goes on training.
    pub fn trace(&self) -> Trace {
        assert!(self.layers.len() >= 2, "an MLP needs at least one layer");
        assert!(!self.batch_sizes.is_empty(), "no batch sizes");
        let e = self.elem_bytes;
        let n = self.layers.len() - 1;
        let mut t = Builder::default();
        const SCALAR: usize = 4;
        const INDEX: usize = 8; // int64 class labels and argmax results

        // Parameters: weight [out, in] and bias [out] of each layer.
        let params: Vec<(usize, usize)> = (0..n)
            .flat_map(|i| {
                let (fan_in, fan_out) = (self.layers[i], self.layers[i + 1]);
                [fan_out * fan_in * e, fan_out * e]
            })
            .map(|size| (t.alloc(size), size))
            .collect();
        let mut adam_state: Option<Vec<usize>> = None;

        for step in 0..self.steps {
            let batch = self.batch_sizes[step % self.batch_sizes.len()];
            let width = |i: usize| batch * self.layers[i] * e;

            // Data: the input batch and its labels, copied to the device.
            let x = t.alloc(width(0));
            let target = t.alloc(batch * INDEX);

            // Forward. `saved[i]` is the input of layer i, kept for its weight gradient (and,
            // for i > 0, as the ReLU output its backward needs).
            let mut saved = vec![x];
            let mut logits = 0;
            for i in 0..n {
                let h = t.alloc(width(i + 1)); // addmm
                if i + 1 < n {
                    let a = t.alloc(width(i + 1)); // relu (not in place)
                    t.free(h);
                    saved.push(a);
                } else {
                    logits = h;
                }
            }
            let logp = t.alloc(width(n)); // log_softmax, saved
            t.free(logits);
            let loss = t.alloc(SCALAR); // nll_loss
            let total_weight = t.alloc(SCALAR);

            // Accuracy bookkeeping: argmax, comparison, count.
            let pred = t.alloc(batch * INDEX);
            let correct = t.alloc(batch);
            let count = t.alloc(SCALAR);
            t.free(correct);
            t.free(pred);

            // Backward.
            let grad_loss = t.alloc(SCALAR);
            let grad_logp = t.alloc(width(n));
            t.free(grad_loss);
            let mut grad_out = t.alloc(width(n)); // log_softmax_backward
            t.free(grad_logp);
            t.free(logp);
            t.free(total_weight);
            t.free(target);
            let mut grads = vec![0; 2 * n];
            for i in (0..n).rev() {
                grads[2 * i] = t.alloc(params[2 * i].1); // grad_out^T @ input
                grads[2 * i + 1] = t.alloc(params[2 * i + 1].1); // sum over the batch
                if i > 0 {
                    let grad_in = t.alloc(width(i)); // grad_out @ weight
                    t.free(grad_out);
                    let grad_h = t.alloc(width(i)); // threshold_backward
                    t.free(grad_in);
                    t.free(saved[i]);
                    grad_out = grad_h;
                } else {
                    t.free(grad_out);
                    t.free(saved[0]);
                }
            }

            // Adam (foreach): state on the first step, then one temporary per parameter
            // (the denominator), freed together.
            if adam_state.is_none() {
                let state = params
                    .iter()
                    .flat_map(|&(_, size)| [size, size]) // exp_avg, exp_avg_sq
                    .map(|size| t.alloc(size))
                    .collect();
                adam_state = Some(state);
            }
            let denoms: Vec<usize> = params.iter().map(|&(_, size)| t.alloc(size)).collect();
            for d in denoms {
                t.free(d);
            }
            // zero_grad(set_to_none=True), then the loop drops the loss and the count.
            for g in grads {
                t.free(g);
            }
            t.free(count);
            t.free(loss);
            t.end_step();
        }
        t.trace
    }
}

/// What [`replay`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayReport {
    /// Highest `memory_allocated` seen after any call.
    pub peak_allocated: usize,
    /// Highest `memory_reserved` seen after any call.
    pub peak_reserved: usize,
    /// `memory_reserved` after the last call (before replay returned the blocks it held).
    pub final_reserved: usize,
}

impl ReplayReport {
    /// Peak reserved bytes over peak allocated bytes: 1.0 is no overhead at all.
    pub fn overhead(&self) -> f64 {
        self.peak_reserved as f64 / self.peak_allocated.max(1) as f64
    }
}

/// Replays `trace` on `alloc`, calling `observe(op_index, alloc)` after each call, then returns
/// every block still held. The peaks are measured from the replay's own observations, so the
/// allocator's peak statistics need not be fresh.
///
/// Blocks are never read or written, so any backing works, including one whose addresses are
/// not memory.
///
/// # Panics
/// If the trace is malformed (see [`Trace::validate`]).
pub fn replay<B: Backing>(
    alloc: &CachingAllocator<B>,
    trace: &Trace,
    mut observe: impl FnMut(usize, &CachingAllocator<B>),
) -> Result<ReplayReport, AllocError> {
    let site = Site::unknown("trace replay");
    let mut live: Vec<Option<Block>> = (0..trace.buffers).map(|_| None).collect();
    let mut report = ReplayReport {
        peak_allocated: 0,
        peak_reserved: 0,
        final_reserved: 0,
    };
    let mut outcome = Ok(());
    for (i, op) in trace.ops.iter().enumerate() {
        match *op {
            TraceOp::Alloc { id, size } => match alloc.allocate(size, &site) {
                Ok(block) => {
                    assert!(
                        live[id].replace(block).is_none(),
                        "buffer {id} allocated twice"
                    );
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            },
            TraceOp::Free { id } => {
                let block = live[id]
                    .take()
                    .expect("trace frees a buffer that is not live");
                // SAFETY: the block came from `alloc` and replay never dereferences it.
                unsafe { alloc.deallocate(block) };
            }
        }
        report.peak_allocated = report.peak_allocated.max(alloc.memory_allocated());
        report.peak_reserved = report.peak_reserved.max(alloc.memory_reserved());
        observe(i, alloc);
    }
    report.final_reserved = alloc.memory_reserved();
    for block in live.into_iter().flatten() {
        // SAFETY: as above.
        unsafe { alloc.deallocate(block) };
    }
    outcome.map(|()| report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_trace_is_valid_and_deterministic() {
        let t = MlpTraining::default().trace();
        t.validate().unwrap();
        assert_eq!(t.steps(), 12);
        assert_eq!(t, MlpTraining::default().trace());
        assert!(t.peak_requested() > 100 << 20);
        MlpTraining::small().trace().validate().unwrap();
    }
}
