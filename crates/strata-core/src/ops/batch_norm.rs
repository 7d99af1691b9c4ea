//! Batch norm's fused passes ([`crate::backend::Backend::channel_sums`] and
//! [`crate::backend::Backend::channel_affine`]) reached from tensors: a contiguous
//! `[N, C, ...]` input seen as `[n, c, s]`, per-channel operands of `C` contiguous elements,
//! the written ones the caller's own (made by its op and not yet handed out). Nothing here
//! allocates; the op that calls these owns the memory plan.

use crate::backend::args::{ChannelAffineArgs, ChannelSumsArgs};
use crate::backend::for_device;
use crate::storage::StorageGuards;
use crate::tensor::{lock_bodies, Body};
use crate::{DType, Error, Result, Tensor};

/// Whether the fused passes take `x` (`[N, C, ...]`) and the per-channel `params` (each of
/// `x`'s dtype when given): f32 or f64, `x` contiguous, and a backend that has them.
pub(crate) fn fused(x: &Tensor, params: &[Option<&Tensor>]) -> Result<bool> {
    Ok(matches!(x.dtype(), DType::F32 | DType::F64)
        && x.dim() >= 2
        && x.is_contiguous()
        && params.iter().flatten().all(|p| p.dtype() == x.dtype())
        && for_device(x.device())?.fused_batch_norm())
}

/// `[n, c, s]` of a `[N, C, ...]` tensor.
fn ncs(x: &Tensor) -> (usize, usize, usize) {
    let shape = x.shape();
    let (n, c) = (shape[0], shape[1]);
    (n, c, shape[2..].iter().product())
}

/// Writes each channel's mean to `mean` and biased variance to `var` (`C` elements each).
/// The caller has checked [`fused`].
pub(crate) fn moments(x: &Tensor, mean: &Tensor, var: &Tensor) -> Result<()> {
    sums(x, None, mean, var)
}

/// Writes each channel's `Σ grad` to `sum_g` and `Σ grad·(x - mean)` to `dot`. The caller
/// has checked [`fused`].
pub(crate) fn grad_sums(
    grad: &Tensor,
    x: &Tensor,
    mean: &Tensor,
    sum_g: &Tensor,
    dot: &Tensor,
) -> Result<()> {
    sums(x, Some((grad, mean)), sum_g, dot)
}

fn sums(
    x: &Tensor,
    grad: Option<(&Tensor, &Tensor)>,
    first: &Tensor,
    second: &Tensor,
) -> Result<()> {
    let (n, c, s) = ncs(x);
    let mut reads = vec![x];
    if let Some((g, mean)) = grad {
        reads.extend([g, mean]);
    }
    let bodies = Bodies::new(x, &reads, &[first, second])?;
    let guards = bodies.lock();
    let read = |i: usize| bodies.read(&guards, i);
    let args = ChannelSumsArgs {
        dtype: x.dtype(),
        n,
        c,
        s,
        x: read(0),
        grad: grad.map_or(std::ptr::null(), |_| read(1)),
        mean: grad.map_or(std::ptr::null(), |_| read(2)),
        first: bodies.write(&guards, 0),
        second: bodies.write(&guards, 1),
    };
    // SAFETY: every operand was checked by `Bodies::new` (the input and gradient contiguous
    // with x's shape, the per-channel ones C contiguous elements); the written ones are the
    // caller's fresh buffers; every storage is locked until `guards` drops.
    let done = unsafe { for_device(x.device())?.channel_sums(&args) };
    drop(guards);
    declined(done)
}

/// Writes `out = x·a + b`, plus `grad·d` when `grad` is `Some((grad, d))`, per channel
/// (`a`, `b` and `d` of `C` elements). The caller has checked [`fused`].
pub(crate) fn affine(
    x: &Tensor,
    a: &Tensor,
    b: &Tensor,
    grad: Option<(&Tensor, &Tensor)>,
    out: &Tensor,
) -> Result<()> {
    let (n, c, s) = ncs(x);
    let mut reads = vec![x, a, b];
    if let Some((g, d)) = grad {
        reads.extend([g, d]);
    }
    let bodies = Bodies::new(x, &reads, &[out])?;
    let guards = bodies.lock();
    let read = |i: usize| bodies.read(&guards, i);
    let args = ChannelAffineArgs {
        dtype: x.dtype(),
        n,
        c,
        s,
        x: read(0),
        a: read(1),
        b: read(2),
        grad: grad.map_or(std::ptr::null(), |_| read(3)),
        d: grad.map_or(std::ptr::null(), |_| read(4)),
        out: bodies.write(&guards, 0),
    };
    // SAFETY: as for `sums`; `out` is the caller's fresh [N, C, ...] buffer, apart from
    // every input.
    let done = unsafe { for_device(x.device())?.channel_affine(&args) };
    drop(guards);
    declined(done)
}

/// An error when a backend that says it has the fused passes declined one.
fn declined(done: bool) -> Result<()> {
    if done {
        return Ok(());
    }
    Err(Error::dtype(
        "batch_norm",
        "the device's backend declined a fused batch norm pass it says it has",
        Some("this is a bug in the backend: its fused_batch_norm() and its passes disagree"),
    ))
}

/// The bodies of one call's operands, checked.
struct Bodies {
    reads: Vec<Body>,
    writes: Vec<Body>,
    esize: usize,
}

impl Bodies {
    /// Checks that every operand has `x`'s dtype and device and is contiguous, with `x`'s
    /// element count or its channel count.
    fn new(x: &Tensor, reads: &[&Tensor], writes: &[&Tensor]) -> Result<Bodies> {
        let c = x.shape()[1];
        for t in reads.iter().chain(writes) {
            let sized = t.numel() == x.numel() || t.numel() == c;
            if t.dtype() != x.dtype() || t.device() != x.device() || !t.is_contiguous() || !sized {
                return Err(Error::shape(
                    "batch_norm",
                    format!(
                        "a fused pass's operand {:?} ({}) does not fit the input {:?} ({})",
                        t.shape(),
                        t.dtype(),
                        x.shape(),
                        x.dtype()
                    ),
                    vec![t.shape().to_vec(), x.shape().to_vec()],
                ));
            }
        }
        Ok(Bodies {
            reads: reads.iter().map(|t| t.body()).collect(),
            writes: writes.iter().map(|t| t.body()).collect(),
            esize: x.dtype().size(),
        })
    }

    /// Locks every storage: the written ones for writing.
    fn lock(&self) -> StorageGuards<'_> {
        lock_bodies(&self.reads, &self.writes)
    }

    /// The first element of read operand `i`.
    fn read(&self, guards: &StorageGuards<'_>, i: usize) -> *const u8 {
        let b = &self.reads[i];
        guards
            .read_ptr(&b.storage)
            .wrapping_add(b.layout.offset() * self.esize)
    }

    /// The first element of written operand `i`.
    fn write(&self, guards: &StorageGuards<'_>, i: usize) -> *mut u8 {
        let b = &self.writes[i];
        guards
            .write_ptr(&b.storage)
            .wrapping_add(b.layout.offset() * self.esize)
    }
}
