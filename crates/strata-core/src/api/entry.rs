//! The op entry: the one function every public op goes through.
//!
//! [`Entry::new`] does, once and in this order, what every op needs before it computes:
//!
//! 1. captures the caller's source location and notifies the op observer, with the input
//!    shapes and dtypes ([`OpContext::enter_described`]);
//! 2. checks that the tensor operands share a device (a 0-d CPU tensor may join any device's
//!    op, as in PyTorch).
//!
//! Then one of the runners finishes the op: [`Entry::run`] (out of place: the forward, then
//! the backward node), [`Entry::run_inplace`] (autograd's in-place refusals before anything
//! is written, then the forward, then the history rewrite) or [`Entry::run_out`] (`out=`
//! forms, refused when autograd would have to record them) or [`Entry::run_update`] (an
//! optimizer's step, outside the graph). The out-of-place runners
//! ([`Entry::run`], [`Entry::run_untracked`], [`Entry::run_composite`]) first let the
//! mixed-precision policy cast the inputs ([`super::autocast`]) and decide whether autograd
//! records the op (grad mode on and an operand requiring grad); in-place ops, `out=` forms
//! and views are never cast. The forward runs with recording off, so the parts of a
//! composite op are not recorded one by one (nor cast again); the op records itself.
//!
//! Every runner but the views' first refuses an op that the operands' device has no kernel
//! for (`backend::refuse_without_kernel`: on a CUDA tensor, anything but copies and fills
//! in this version), and after the forward takes the error the device's kernels met while
//! it ran (`kernel_error::take`: a CUDA driver error becomes the op's error).
//!
//! An op is thus its infer-and-forward function in [`crate::ops`] (running kernels on the
//! operands' backend) and its backward formula in [`crate::autograd::formulas`]; the
//! public method in [`crate::api`] only joins the two through an [`Entry`].

use std::borrow::Cow;

use crate::autograd::record::refuse_out_with_grad;
use crate::autograd::selective::{self, KeptOutputs};
use crate::backend::refuse_without_kernel;
use crate::mode::{internal, is_grad_enabled};
use crate::op::{OpContext, OpInput};
use crate::{Device, Error, Result, Tensor};

/// An op that passed its entry checks, ready to run.
pub(crate) struct Entry<'a> {
    ctx: OpContext,
    inputs: &'a [&'a Tensor],
    /// Every operand is on one device (the common case, which decides the kernel's device
    /// without another look at each).
    one_device: bool,
}

/// An out-of-place op's operands: the inputs, or their mixed-precision casts.
struct Operands<'a> {
    inputs: &'a [&'a Tensor],
    cast: Option<Vec<Tensor>>,
}

impl Operands<'_> {
    /// The operands the op computes with (the inputs themselves, without copying the
    /// list, when nothing was cast).
    fn refs(&self) -> Cow<'_, [&Tensor]> {
        match &self.cast {
            Some(c) => Cow::Owned(c.iter().collect()),
            None => Cow::Borrowed(self.inputs),
        }
    }
}

/// Whether autograd records an op on `operands`: grad mode on and one requires grad.
fn records(operands: &[&Tensor]) -> bool {
    is_grad_enabled() && operands.iter().any(|t| t.requires_grad())
}

impl<'a> Entry<'a> {
    /// Enters op `name` with its tensor operands `inputs` (see the module docs for what is
    /// checked and decided here).
    #[track_caller]
    #[inline(always)]
    pub(crate) fn new(name: &'static str, inputs: &'a [&'a Tensor]) -> Result<Entry<'a>> {
        let ctx = OpContext::enter_described(name, || {
            inputs
                .iter()
                .map(|t| OpInput {
                    shape: t.shape().to_vec(),
                    dtype: t.dtype(),
                })
                .collect()
        });
        let one_device = on_one_device(inputs);
        if !one_device {
            check_mixed_devices(name, inputs)?;
        }
        Ok(Entry {
            ctx,
            inputs,
            one_device,
        })
    }

    /// The operands of an out-of-place op: the inputs as the mixed-precision policy casts
    /// them (see [`super::autocast`]).
    fn cast_operands(&self) -> Result<Operands<'a>> {
        Ok(Operands {
            inputs: self.inputs,
            cast: super::autocast::cast_inputs(self.ctx.op(), self.inputs)?,
        })
    }

    /// The operands of an in-place op, an `out=` form or a view: the inputs themselves,
    /// never cast.
    fn operands(&self) -> &'a [&'a Tensor] {
        self.inputs
    }

    /// The device the op's kernels run on: its operands' (a 0-d CPU operand, which may join
    /// tensors of another device, does not decide it).
    fn kernel_device(&self) -> Option<Device> {
        let first = self.inputs.first()?.device();
        if self.one_device || first != Device::Cpu {
            return Some(first);
        }
        let mut others = self.inputs[1..].iter().map(|t| t.device());
        Some(others.find(|&d| d != Device::Cpu).unwrap_or(first))
    }

    /// Refuses, before anything runs, an op that its device's backend has no kernel for
    /// (on a CUDA tensor, anything but copies and fills in this part). Views are never
    /// refused: they run no kernel, and a view that must copy runs the copy ops.
    fn check_kernel(&self) -> Result<()> {
        match self.kernel_device() {
            Some(d) => refuse_without_kernel(self.ctx.op(), d),
            None => Ok(()),
        }
    }

    /// Runs an out-of-place op: `forward(ctx, inputs)` computes the result with recording
    /// off, then, when the op records, `backward(ctx, inputs, result)` gives the result its
    /// node. Inside a selectively checkpointed region, a recorded op the policy saves keeps
    /// its result in the forward and reuses it, without computing, in the recomputation
    /// ([`crate::autograd::selective`]).
    pub(crate) fn run<T: KeptOutputs>(
        self,
        forward: impl FnOnce(&OpContext, &[&Tensor]) -> Result<T>,
        backward: impl FnOnce(&OpContext, &[&Tensor], &T) -> Result<()>,
    ) -> Result<T> {
        self.check_kernel()?;
        // The common case, nothing to cast and nothing to record, without the general
        // route's operand list and checkpoint lookup.
        if !super::autocast::may_cast() && !records(self.inputs) {
            return reported(internal(|| forward(&self.ctx, self.inputs)));
        }
        self.run_general(forward, backward)
    }

    /// [`Entry::run`] when the inputs may be cast or the op records (kept out of line, so
    /// that the common case stays small).
    #[inline(never)]
    fn run_general<T: KeptOutputs>(
        self,
        forward: impl FnOnce(&OpContext, &[&Tensor]) -> Result<T>,
        backward: impl FnOnce(&OpContext, &[&Tensor], &T) -> Result<()>,
    ) -> Result<T> {
        let operands = self.cast_operands()?;
        let x = operands.refs();
        let records = records(&x);
        let out = reported(if records {
            selective::run_op(self.ctx.op(), || internal(|| forward(&self.ctx, &x)))
        } else {
            internal(|| forward(&self.ctx, &x))
        })?;
        if records {
            backward(&self.ctx, &x, &out)?;
        }
        Ok(out)
    }

    /// Runs an op that has no backward (comparisons, integer results, index outputs): the
    /// forward alone, with recording off.
    pub(crate) fn run_untracked<T>(
        self,
        forward: impl FnOnce(&OpContext, &[&Tensor]) -> Result<T>,
    ) -> Result<T> {
        self.check_kernel()?;
        if !super::autocast::may_cast() {
            return reported(internal(|| forward(&self.ctx, self.inputs)));
        }
        let operands = self.cast_operands()?;
        let x = operands.refs();
        reported(internal(|| forward(&self.ctx, &x)))
    }

    /// Runs an in-place op on `inputs[0]`: `begin` applies autograd's in-place refusals
    /// (always, recorded or not) and prepares the record before anything is written, the
    /// forward writes, and `finish` rewrites the target's history when the op records.
    pub(crate) fn run_inplace<R>(
        self,
        begin: impl FnOnce(&OpContext, &[&Tensor]) -> Result<Option<R>>,
        forward: impl FnOnce(&OpContext, &[&Tensor]) -> Result<Tensor>,
        finish: impl FnOnce(R, &[&Tensor]) -> Result<()>,
    ) -> Result<Tensor> {
        self.check_kernel()?;
        let x = self.operands();
        let rec = begin(&self.ctx, x)?;
        let out = reported(internal(|| forward(&self.ctx, x)))?;
        if let Some(rec) = rec {
            finish(rec, x)?;
        }
        Ok(out)
    }

    /// Runs an `out=` form: refused first when autograd would have to record it (an operand
    /// or `out` requires grad with grad mode on) or when `out` is an inference tensor outside
    /// inference mode; then the forward validates, resizes and writes `out`.
    pub(crate) fn run_out(
        self,
        out: &Tensor,
        forward: impl FnOnce(&OpContext, &[&Tensor]) -> Result<Tensor>,
    ) -> Result<Tensor> {
        check_devices(self.ctx.op(), &[out, self.inputs.first().unwrap_or(&out)])?;
        refuse_without_kernel(self.ctx.op(), out.device())?;
        let x = self.operands();
        refuse_out_with_grad(self.ctx.op(), x, out)?;
        reported(internal(|| forward(&self.ctx, x)))
    }

    /// [`Entry::run_out`] for an op written into several outputs (`max_dim_out`'s values
    /// and indices): each output is refused as `run_out` refuses its one, before anything
    /// is written.
    pub(crate) fn run_outs<T>(
        self,
        outs: &[&Tensor],
        forward: impl FnOnce(&OpContext, &[&Tensor]) -> Result<T>,
    ) -> Result<T> {
        let x = self.operands();
        for &out in outs {
            check_devices(self.ctx.op(), &[out, self.inputs.first().unwrap_or(&out)])?;
            refuse_without_kernel(self.ctx.op(), out.device())?;
            refuse_out_with_grad(self.ctx.op(), x, out)?;
        }
        reported(internal(|| forward(&self.ctx, x)))
    }

    /// Runs an optimizer's update in place on the operands themselves (never cast), outside
    /// the graph as PyTorch's optimizers step under `no_grad`: nothing is refused or
    /// recorded, and the forward bumps the version of every tensor it writes.
    pub(crate) fn run_update<T>(
        self,
        forward: impl FnOnce(&OpContext, &[&Tensor]) -> Result<T>,
    ) -> Result<T> {
        self.check_kernel()?;
        let x = self.operands();
        reported(internal(|| forward(&self.ctx, x)))
    }

    /// Runs a composite op whose parts record themselves (PyTorch's implicitly
    /// differentiable composites, `linear` or `mse_loss`): the forward runs with recording
    /// as the caller has it, and the op adds no node of its own.
    pub(crate) fn run_composite<T>(
        self,
        forward: impl FnOnce(&OpContext, &[&Tensor]) -> Result<T>,
    ) -> Result<T> {
        self.check_kernel()?;
        let operands = self.cast_operands()?;
        let x = operands.refs();
        reported(selective::within_composite(self.ctx.op(), || {
            forward(&self.ctx, &x)
        }))
    }

    /// Runs a view op on `inputs[0]` itself (never on a mixed-precision cast of it: a view
    /// shares its input's memory): `forward` works out the view (its layout, or a copy
    /// where no view can express the result) with recording off, then `make` makes it from
    /// the input, recording how its gradient maps back when autograd records.
    pub(crate) fn run_view<I, T>(
        self,
        forward: impl FnOnce(&OpContext, &Tensor) -> Result<I>,
        make: impl FnOnce(&OpContext, &Tensor, I) -> Result<T>,
    ) -> Result<T> {
        let x = self.inputs[0];
        let view = reported(internal(|| forward(&self.ctx, x)))?;
        make(&self.ctx, x, view)
    }
}

/// `out`, unless the kernels met an error while the op ran (a CUDA driver error), which is
/// then the op's error; the kernels' error is taken either way, so that it is never left for
/// a later op to report.
#[inline(always)]
fn reported<T>(out: Result<T>) -> Result<T> {
    let kernels = crate::kernel_error::take();
    let out = out?;
    kernels.map(|()| out)
}

/// `Err` unless every dimensioned operand is on one device; 0-d CPU tensors join any
/// device's op, as in PyTorch. Operands all on one device (the common case) cost one atomic
/// load each.
#[inline]
pub(crate) fn check_devices(op: &'static str, inputs: &[&Tensor]) -> Result<()> {
    if on_one_device(inputs) {
        return Ok(());
    }
    check_mixed_devices(op, inputs)
}

/// Whether every operand is on one device (true for none).
#[inline]
fn on_one_device(inputs: &[&Tensor]) -> bool {
    match inputs.split_first() {
        Some((head, rest)) => rest.iter().all(|t| t.same_device(head)),
        None => true,
    }
}

/// [`check_devices`] when the operands are not all on one device: `Ok` when the others
/// are 0-d CPU tensors.
#[cold]
fn check_mixed_devices(op: &'static str, inputs: &[&Tensor]) -> Result<()> {
    let mut first: Option<Device> = None;
    for t in inputs {
        let d = t.device();
        if d == Device::Cpu && t.dim() == 0 {
            continue;
        }
        match first {
            None => first = Some(d),
            Some(f) if f != d => {
                return Err(Error::DeviceMismatch {
                    op,
                    first: f,
                    second: d,
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}
