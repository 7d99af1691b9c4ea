//! Setting up element-wise loops for ops: broadcasting, overlap checks, output layout, and
//! locking — the *infer* half is [`ElementwiseSpec::infer`], the *execute* half
//! [`Prepared::execute`].

use smallvec::SmallVec;

use crate::backend::{Dims, Plan};
use crate::layout::broadcast::{broadcast_shapes, broadcast_strides};
use crate::layout::order::{dense_copy_strides, iteration_order, output_strides, OrderOperand};
use crate::layout::overlap::{internal_overlap, overlap, InternalOverlap, Overlap};
use crate::layout::Layout;
use crate::op::OpContext;
use crate::ops::out::{Aliasing, OutDType, OutTarget};
use crate::storage::{lock_storages, Access};
use crate::tensor::Body;
use crate::{DType, Device, Error, Result, Tensor};

/// Where an element-wise op writes.
pub(crate) enum Output<'a> {
    /// A new tensor of this dtype, laid out in the inputs' stride order.
    New(DType),
    /// A new tensor with exactly this layout (dense, offset 0, the broadcast shape).
    NewWithLayout(DType, Layout),
    /// An existing tensor (in-place ops, `copy_`), which must already have the broadcast
    /// shape.
    Existing(&'a Tensor),
    /// The output of an `out=` op: resized to the broadcast shape when it has another.
    Out(&'a Tensor),
}

/// An element-wise op's operands, before validation.
pub(crate) struct ElementwiseSpec<'a> {
    output: Output<'a>,
    inputs: Vec<&'a Tensor>,
    /// A number takes part as an operand (it counts as a 0-d operand for layout decisions).
    scalar_operand: bool,
    /// The dtype each input is converted to before the loop (empty: none is).
    input_dtypes: Inputs<DType>,
}

impl<'a> ElementwiseSpec<'a> {
    /// An op writing `output` from `inputs`.
    pub fn new(output: Output<'a>, inputs: Vec<&'a Tensor>) -> Self {
        ElementwiseSpec {
            output,
            inputs,
            scalar_operand: false,
            input_dtypes: Inputs::new(),
        }
    }

    /// Marks that a number is also an operand (`x + 2`): as in PyTorch it is a 0-d operand,
    /// so the operands no longer all have the same shape and the output layout follows the
    /// stride order rather than the fast same-shape rule.
    pub fn with_scalar_operand(mut self, yes: bool) -> Self {
        self.scalar_operand = yes;
        self
    }

    /// The dtype each input is computed in. On the CPU PyTorch first converts an input of
    /// another dtype with `to()`, and a new output is laid out after that copy, which is dense
    /// in the input's memory order: for an input that is not dense (broadcast, gapped, or
    /// with ties between size-1 and other dimensions) the output's strides can differ from
    /// those the input itself would give. Nothing is converted here; only the layout follows.
    pub fn with_input_dtypes(mut self, dtypes: &[DType]) -> Self {
        self.input_dtypes = Inputs::from_slice(dtypes);
        self
    }

    /// The inputs' layouts as PyTorch sees them when it lays out a new output: an input it
    /// converts to another dtype first, and that is not already dense, as its dense copy.
    /// `None` when no layout changes (the common case).
    fn converted_layouts(&self, bodies: &[Body]) -> Option<Inputs<Layout>> {
        let converted = |i: usize, b: &Body| {
            self.input_dtypes
                .get(i)
                .is_some_and(|&d| d != self.inputs[i].dtype())
                && !b.layout.is_non_overlapping_and_dense()
        };
        if !bodies.iter().enumerate().any(|(i, b)| converted(i, b)) {
            return None;
        }
        let layouts = bodies.iter().enumerate().map(|(i, b)| {
            if converted(i, b) {
                Layout::new(b.layout.sizes().to_vec(), dense_copy_strides(&b.layout), 0)
            } else {
                b.layout.clone()
            }
        });
        Some(layouts.collect())
    }
}

/// PyTorch's "fast setup" for a new output when every operand has the same shape: a
/// contiguous result if all are contiguous, channels-last if all are, the strides of the last
/// input if all are dense with identical strides; `None` to fall back to the stride order.
fn fast_setup_strides(layouts: &[&Layout], scalar_operand: bool) -> Option<Dims> {
    let first = layouts.first()?;
    if scalar_operand || layouts.iter().any(|l| l.sizes() != first.sizes()) {
        return None;
    }
    if layouts.iter().all(|l| l.is_contiguous()) {
        return Some(Dims::from_slice(
            Layout::contiguous(first.sizes(), 0).strides(),
        ));
    }
    if layouts.iter().all(|l| l.is_channels_last_contiguous()) {
        return Some(crate::layout::channels_last_strides(first.sizes()).into());
    }
    let last = layouts.last()?;
    if layouts
        .iter()
        .all(|l| l.is_non_overlapping_and_dense() && l.strides() == last.strides())
    {
        return Some(Dims::from_slice(last.strides()));
    }
    None
}

/// Strides for a new output of `shape` computed from inputs laid out as `layouts`: the fast
/// setup's, else dense in the inputs' stride order (broadcast as over `shape`).
fn new_output_strides(shape: &[usize], layouts: &[&Layout], scalar_operand: bool) -> Dims {
    fast_setup_strides(layouts, scalar_operand).unwrap_or_else(|| {
        let strides: Inputs<Vec<usize>> = layouts
            .iter()
            .map(|l| broadcast_strides(l.sizes(), l.strides(), shape))
            .collect();
        let order: Inputs<OrderOperand<'_>> = strides
            .iter()
            .map(|s| OrderOperand {
                strides: s,
                is_reduction_output: false,
            })
            .collect();
        output_strides(shape, &iteration_order(shape, &order))
    })
}

/// Inputs stored inline (up to three).
type Inputs<T> = SmallVec<[T; 3]>;

/// A validated element-wise op: nothing allocated or written yet.
pub(crate) struct Prepared {
    shape: Dims,
    out: OutPlan,
    /// Each input with its dtype and its strides over `shape` (unused when `linear`).
    inputs: Inputs<(Body, DType, Dims)>,
    perm: Dims,
    parallel: bool,
    bump_version: bool,
    /// Every operand, the output included, stores its elements densely in the same order:
    /// the loop is one run over all of them ([`Plan::linear`]).
    linear: bool,
}

/// Whether `layouts` (all of the same sizes) hold their elements densely and in the same
/// memory order: each is non-overlapping and dense, and their strides agree on every
/// dimension of size > 1. Then element `k` in memory order is the same logical element for
/// all of them, counted from each one's first element.
fn same_dense_order<'a>(first: &Layout, mut layouts: impl Iterator<Item = &'a Layout>) -> bool {
    if !first.is_non_overlapping_and_dense() {
        return false;
    }
    let contiguous = first.is_contiguous();
    layouts.all(|l| {
        if contiguous && l.is_contiguous() {
            return true;
        }
        l.is_non_overlapping_and_dense()
            && l.sizes()
                .iter()
                .zip(l.strides().iter().zip(first.strides()))
                .all(|(&n, (a, b))| n < 2 || a == b)
    })
}

enum OutPlan {
    New(DType, Layout),
    Existing(Tensor, Body),
    /// An `out=` tensor to resize to the shape, then write as an existing output.
    Resize(Resize),
}

/// An `out=` tensor checked and to be resized, with what decides its new strides: the op's
/// operands.
struct Resize {
    target: OutTarget,
    inputs: Vec<Tensor>,
    scalar_operand: bool,
    input_dtypes: Inputs<DType>,
}

impl Resize {
    /// Resizes the output to its new shape with the strides a new output of these operands
    /// would have, as PyTorch's TensorIterator does. Returns the output and the inputs.
    fn apply(self, ctx: &OpContext) -> Result<(Tensor, Vec<Tensor>)> {
        let Resize {
            target,
            inputs,
            scalar_operand,
            input_dtypes,
        } = self;
        let planned = ElementwiseSpec::new(Output::New(target.dtype()), inputs.iter().collect())
            .with_scalar_operand(scalar_operand)
            .with_input_dtypes(&input_dtypes)
            .infer(ctx.op())?;
        let strides = match &planned.out {
            OutPlan::New(_, layout) => layout.strides().to_vec(),
            _ => crate::layout::contiguous_strides(target.shape()),
        };
        drop(planned);
        let out = target.resize_strided(ctx, strides)?;
        Ok((out, inputs))
    }
}

fn shape_error(op: &'static str, a: &[usize], b: &[usize], mismatch: String) -> Error {
    Error::shape(op, mismatch, vec![a.to_vec(), b.to_vec()]).with_hint(
        "shapes broadcast when, aligned from the right, each pair of sizes is equal or one of \
         them is 1",
    )
}

impl ElementwiseSpec<'_> {
    /// Validates shapes and overlap and decides the output layout and loop order.
    pub fn infer(self, op: &'static str) -> Result<Prepared> {
        self.infer_checked(op, true)
    }

    /// As [`ElementwiseSpec::infer`] for a fill, which PyTorch allows on a self-overlapping
    /// (expanded) tensor: every element gets the same value whatever the order.
    pub fn infer_fill(self, op: &'static str) -> Result<Prepared> {
        self.infer_checked(op, false)
    }

    fn infer_checked(self, op: &'static str, refuse_self_overlap: bool) -> Result<Prepared> {
        if let Output::Out(out) = self.output {
            return self.infer_out(op, out);
        }
        if let Some(prepared) = self.infer_linear() {
            return Ok(prepared);
        }
        self.infer_general(op, refuse_self_overlap)
    }

    /// Any shapes and layouts: broadcasting, overlap checks, the iteration order.
    fn infer_general(self, op: &'static str, refuse_self_overlap: bool) -> Result<Prepared> {
        let out_body = match &self.output {
            Output::Existing(t) => Some(t.body()),
            Output::Out(_) => None,
            Output::New(_) | Output::NewWithLayout(..) => None,
        };
        let bodies: Inputs<Body> = self.inputs.iter().map(|t| t.body()).collect();
        // Broadcast every operand, the existing output included, as PyTorch does.
        let mut shape: Vec<usize> = match (&out_body, &self.output) {
            (Some(b), _) => b.layout.sizes().to_vec(),
            (None, Output::NewWithLayout(_, l)) => l.sizes().to_vec(),
            (None, _) => bodies
                .first()
                .map(|b| b.layout.sizes().to_vec())
                .unwrap_or_default(),
        };
        for b in &bodies {
            shape = broadcast_shapes(&shape, b.layout.sizes())
                .map_err(|m| shape_error(op, &shape, b.layout.sizes(), m.describe()))?;
        }
        if let Some(ob) = &out_body {
            if ob.layout.sizes() != shape.as_slice() {
                return Err(Error::shape(
                    op,
                    format!(
                        "the output has shape {:?} but the inputs broadcast to {shape:?}",
                        ob.layout.sizes()
                    ),
                    vec![ob.layout.sizes().to_vec(), shape.clone()],
                )
                .with_hint("an in-place op cannot change the shape of the tensor it writes; use the out-of-place op"));
            }
        }
        let mut parallel = true;
        if let Some(ob) = &out_body {
            match internal_overlap(&ob.layout) {
                InternalOverlap::Yes if !refuse_self_overlap => parallel = false,
                InternalOverlap::Yes => {
                    return Err(Error::Overlap {
                        op,
                        message: "more than one element of the written-to tensor refers to the \
                                  same memory location"
                            .into(),
                        hint: Some(
                            "the tensor is expanded or otherwise self-overlapping; write to a \
                             copy (deep_clone()) instead"
                                .into(),
                        ),
                    })
                }
                InternalOverlap::TooHard => parallel = false,
                InternalOverlap::No => {}
            }
            for b in &bodies {
                if b.storage.id() != ob.storage.id() {
                    continue;
                }
                match overlap(&ob.layout, &b.layout) {
                    Overlap::Partial => {
                        return Err(Error::Overlap {
                            op,
                            message: "some elements of an input and of the written-to tensor \
                                      refer to the same memory location at different positions"
                                .into(),
                            hint: Some(
                                "pass a copy of the input (deep_clone()) or write to a new tensor"
                                    .into(),
                            ),
                        })
                    }
                    Overlap::TooHard => parallel = false,
                    Overlap::Full | Overlap::No => {}
                }
            }
        }
        let input_strides: Inputs<Dims> = bodies
            .iter()
            .map(|b| broadcast_strides(b.layout.sizes(), b.layout.strides(), &shape).into())
            .collect();
        let out_strides_existing = out_body.as_ref().map(|b| b.layout.strides().to_vec());
        let mut order_ops: SmallVec<[OrderOperand<'_>; 4]> = SmallVec::new();
        if let Some(s) = &out_strides_existing {
            order_ops.push(OrderOperand {
                strides: s,
                is_reduction_output: false,
            });
        }
        for s in &input_strides {
            order_ops.push(OrderOperand {
                strides: s,
                is_reduction_output: false,
            });
        }
        let perm = iteration_order(&shape, &order_ops);
        drop(order_ops);
        let converted = match self.output {
            Output::New(_) => self.converted_layouts(&bodies),
            _ => None,
        };
        let out = match (self.output, out_body) {
            (Output::Existing(t), Some(b)) => OutPlan::Existing(t.clone(), b),
            (Output::NewWithLayout(dtype, layout), _) => {
                if layout.sizes() != shape.as_slice() {
                    return Err(Error::shape(
                        op,
                        format!(
                            "the inputs broadcast to {shape:?}, not the requested {:?}",
                            layout.sizes()
                        ),
                        vec![layout.sizes().to_vec(), shape.clone()],
                    ));
                }
                OutPlan::New(dtype, layout)
            }
            (Output::New(dtype), _) => {
                let strides = match &converted {
                    None => {
                        let layouts: Inputs<&Layout> = bodies.iter().map(|b| &b.layout).collect();
                        fast_setup_strides(&layouts, self.scalar_operand)
                            .unwrap_or_else(|| output_strides(&shape, &perm))
                    }
                    Some(c) => {
                        let layouts: Inputs<&Layout> = c.iter().collect();
                        new_output_strides(&shape, &layouts, self.scalar_operand)
                    }
                };
                let layout = Layout::from_slices(&shape, &strides, 0);
                if layout.validate(dtype.size()).is_none() {
                    return Err(Error::shape(
                        op,
                        format!("the result of shape {shape:?} is too large to address"),
                        vec![shape.clone()],
                    ));
                }
                OutPlan::New(dtype, layout)
            }
            (Output::Existing(_) | Output::Out(_), _) => {
                return Err(Error::Unsupported {
                    op,
                    message: "internal: an existing output without a body".into(),
                })
            }
        };
        let inputs = bodies
            .into_iter()
            .zip(&self.inputs)
            .zip(input_strides)
            .map(|((b, t), s)| (b, t.dtype(), s))
            .collect();
        Ok(Prepared {
            shape: shape.into(),
            out,
            inputs,
            perm,
            parallel,
            bump_version: true,
            linear: false,
        })
    }

    /// The fast setup for the common case: every operand has the same shape and they all
    /// store their elements densely in the same order (for instance all contiguous). The
    /// loop is then one run over memory, with nothing to broadcast, order or coalesce, and
    /// nothing is allocated. Decides exactly as the general path would; `None` leaves every
    /// other case (and every error) to it.
    fn infer_linear(&self) -> Option<Prepared> {
        let out_body = match &self.output {
            Output::Existing(t) => Some(t.body()),
            Output::New(_) | Output::NewWithLayout(..) => None,
            Output::Out(_) => return None,
        };
        let bodies: Inputs<Body> = self.inputs.iter().map(|t| t.body()).collect();
        let shape = Dims::from_slice(match (&out_body, &self.output) {
            (Some(b), _) => b.layout.sizes(),
            (None, Output::NewWithLayout(_, l)) => l.sizes(),
            (None, _) => bodies.first()?.layout.sizes(),
        });
        let sizes = &shape[..];
        if bodies.iter().any(|b| b.layout.sizes() != sizes) {
            return None;
        }
        let out = match (&self.output, out_body) {
            (Output::Existing(t), Some(ob)) => {
                // A dense output has no internal overlap; an input on the same storage must
                // be the output itself or disjoint from it (else the general path decides).
                if !ob.layout.is_non_overlapping_and_dense()
                    || bodies.iter().any(|b| {
                        b.storage.id() == ob.storage.id()
                            && !matches!(
                                overlap(&ob.layout, &b.layout),
                                Overlap::Full | Overlap::No
                            )
                    })
                {
                    return None;
                }
                OutPlan::Existing((*t).clone(), ob)
            }
            (Output::NewWithLayout(dtype, layout), _) => OutPlan::New(*dtype, layout.clone()),
            (Output::New(dtype), _) => {
                // The general path's rule, with the inputs' own strides (nothing broadcasts).
                let layouts: Inputs<&Layout> = bodies.iter().map(|b| &b.layout).collect();
                let strides =
                    fast_setup_strides(&layouts, self.scalar_operand).unwrap_or_else(|| {
                        let order: SmallVec<[OrderOperand<'_>; 4]> = layouts
                            .iter()
                            .map(|l| OrderOperand {
                                strides: l.strides(),
                                is_reduction_output: false,
                            })
                            .collect();
                        output_strides(sizes, &iteration_order(sizes, &order))
                    });
                let layout = Layout::from_slices(sizes, &strides, 0);
                layout.validate(dtype.size())?;
                OutPlan::New(*dtype, layout)
            }
            _ => return None,
        };
        let out_layout = match &out {
            OutPlan::New(_, l) => l,
            OutPlan::Existing(_, b) => &b.layout,
            OutPlan::Resize(..) => return None,
        };
        if !same_dense_order(out_layout, bodies.iter().map(|b| &b.layout)) {
            return None;
        }
        let inputs = bodies
            .into_iter()
            .zip(&self.inputs)
            .map(|(b, t)| (b, t.dtype(), Dims::new()))
            .collect();
        Some(Prepared {
            shape,
            out,
            inputs,
            perm: Dims::new(),
            parallel: true,
            bump_version: true,
            linear: true,
        })
    }
}

impl ElementwiseSpec<'_> {
    /// An `out=` op: the output is checked ([`OutTarget::check`]: not self-overlapping, and
    /// an input only exactly, before and after a resize), then planned as an in-place write
    /// when it has the broadcast shape; else the resize happens in `execute`.
    fn infer_out(self, op: &'static str, out: &Tensor) -> Result<Prepared> {
        let mut shape = self
            .inputs
            .first()
            .map(|t| t.layout().sizes().to_vec())
            .unwrap_or_default();
        for t in &self.inputs {
            let l = t.layout();
            shape = broadcast_shapes(&shape, l.sizes())
                .map_err(|m| shape_error(op, &shape, l.sizes(), m.describe()))?;
        }
        let target = OutTarget::check(
            op,
            out,
            &shape,
            OutDType::Any,
            &self.inputs,
            Aliasing::Exact,
        )?;
        if target.keeps_shape() {
            return ElementwiseSpec::new(Output::Existing(out), self.inputs.clone())
                .with_scalar_operand(self.scalar_operand)
                .infer(op);
        }
        Ok(Prepared {
            shape: shape.into(),
            out: OutPlan::Resize(Resize {
                target,
                inputs: self.inputs.iter().map(|t| (*t).clone()).collect(),
                scalar_operand: self.scalar_operand,
                input_dtypes: self.input_dtypes.clone(),
            }),
            inputs: SmallVec::new(),
            perm: Dims::new(),
            parallel: true,
            bump_version: true,
            linear: false,
        })
    }
}

impl Prepared {
    /// The device a new output goes on: the inputs' (a 0-d CPU operand, which may join
    /// tensors of another device, does not decide it).
    fn device(&self) -> Device {
        self.inputs
            .iter()
            .map(|(b, _, _)| b.storage.device())
            .find(|&d| d != Device::Cpu)
            .unwrap_or(Device::Cpu)
    }

    /// Only resizes an `out=` output that has another shape, as [`Prepared::execute`] would,
    /// for ops that then write it some other way (computing in one dtype and converting into
    /// the output's): its strides come from this op's operands.
    pub fn resize_output(self, ctx: &OpContext) -> Result<()> {
        if let OutPlan::Resize(resize) = self.out {
            resize.apply(ctx)?;
        }
        Ok(())
    }

    /// Leaves an existing output's version alone, for ops that write in several steps and
    /// count as one write.
    pub fn without_version_bump(mut self) -> Self {
        self.bump_version = false;
        self
    }

    /// Allocates the output if needed, locks every storage, and runs `kernel` over the loop
    /// (operand 0 the output, then the inputs in order). An existing output's version is
    /// bumped. Returns the output.
    pub fn execute(self, ctx: &OpContext, kernel: impl FnOnce(&Plan)) -> Result<Tensor> {
        if let OutPlan::Resize(resize) = self.out {
            let (out, inputs) = resize.apply(ctx)?;
            return ElementwiseSpec::new(Output::Existing(&out), inputs.iter().collect())
                .infer(ctx.op())?
                .execute(ctx, kernel);
        }
        let existing = matches!(self.out, OutPlan::Existing(..));
        let device = self.device();
        let (out, out_body, out_dtype) = match self.out {
            OutPlan::New(dtype, layout) => {
                let t = Tensor::uninit_with_layout(ctx, layout, dtype, device)?;
                let b = t.body();
                (t, b, dtype)
            }
            OutPlan::Existing(t, b) => {
                let d = t.dtype();
                (t, b, d)
            }
            OutPlan::Resize(..) => unreachable!("handled above"),
        };
        {
            let mut locks: SmallVec<[_; 4]> = SmallVec::new();
            locks.push((&*out_body.storage, Access::Write));
            locks.extend(
                self.inputs
                    .iter()
                    .map(|(b, _, _)| (&*b.storage, Access::Read)),
            );
            let guards = lock_storages(&locks);
            let out_ptr = guards
                .write_ptr(&out_body.storage)
                .wrapping_add(out_body.layout.offset() * out_dtype.size());
            let input_ptr = |b: &Body, dtype: DType| {
                guards
                    .read_ptr(&b.storage)
                    .wrapping_add(b.layout.offset() * dtype.size()) as *mut u8
            };
            let plan = if self.linear {
                let numel = out_body.layout.numel();
                let inputs = self.inputs.iter().map(|(b, d, _)| (input_ptr(b, *d), *d));
                let operands: SmallVec<[_; 4]> = std::iter::once((out_ptr, out_dtype))
                    .chain(inputs)
                    .collect();
                Plan::linear(numel, &operands, self.parallel)
            } else {
                let out = (out_ptr, out_body.layout.strides(), out_dtype);
                let inputs = self
                    .inputs
                    .iter()
                    .map(|(b, d, s)| (input_ptr(b, *d), &s[..], *d));
                Plan::from_parts(
                    &self.shape,
                    std::iter::once(out).chain(inputs),
                    &self.perm,
                    self.parallel,
                )
            };
            kernel(&plan);
            plan.discard_inline();
        }
        if existing && self.bump_version {
            out.bump_version(ctx.op());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
