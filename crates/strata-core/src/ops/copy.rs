//! Copies and fills: `copy_`, `deep_clone` (PyTorch's `clone`), `contiguous`, `to`, `fill_`,
//! `zero_`.

use crate::autograd::formulas::index::{overwrite_begin, overwrite_finish, Overwrite};
use crate::backend::cpu::{kernels, Plan};
use crate::dtype::{dispatch, DTypeFn, Element};
use crate::layout::order::infer_dense_strides;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::{DType, Result, Scalar, Tensor};

struct FillWith(Scalar);

impl FillWith {
    fn run(self, plan: &Plan) {
        struct F<'a>(&'a Plan, Scalar);
        impl DTypeFn for F<'_> {
            type Output = ();
            fn call<T: Element>(self) {
                // SAFETY: `plan` comes from `Prepared::execute`, which holds the locks.
                unsafe { kernels::fill::<T>(self.0, self.1.to()) }
            }
        }
        dispatch(plan.dtype(0), F(plan, self.0));
    }
}

impl Tensor {
    /// Copies `src` (broadcast to this tensor's shape, converted to its dtype) into this
    /// tensor, in place. Copying a tensor onto exactly itself does nothing but still counts
    /// as a write (the version goes up).
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("copy_");
        let (a, b) = (self.body(), src.body());
        if a.storage.id() == b.storage.id() && a.layout == b.layout && self.dtype() == src.dtype() {
            self.bump_version();
            return Ok(self.clone());
        }
        let prepared = ElementwiseSpec::new(Output::Existing(self), vec![src]).infer(ctx.op())?;
        let rec = overwrite_begin(&ctx, self, &Overwrite::Copy(src))?;
        // SAFETY: `execute` locks the storages and passes a plan valid for them.
        let out = prepared.execute(&ctx, |plan| unsafe { kernels::copy(plan) })?;
        if let Some(rec) = rec {
            overwrite_finish(rec, Overwrite::Copy(src))?;
        }
        Ok(out)
    }

    /// A new tensor with a copy of the data: PyTorch's `clone()`. (Rust's `.clone()` on a
    /// `Tensor` copies the handle, not the data.) A dense layout keeps its strides; any other
    /// keeps its dimension order with dense strides.
    #[track_caller]
    pub fn deep_clone(&self) -> Result<Tensor> {
        let ctx = OpContext::enter("clone");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            let l = self.layout();
            let strides = if l.is_non_overlapping_and_dense() {
                l.strides().to_vec()
            } else {
                infer_dense_strides(l.sizes(), l.strides())
            };
            self.copy_into_new(
                &ctx,
                Layout::new(l.sizes().to_vec(), strides, 0),
                self.dtype(),
            )
        })?;
        crate::autograd::formulas::copy::copy(&ctx, "CloneBackward0", self, &out)?;
        Ok(out)
    }

    /// This tensor itself when it is already contiguous, else a contiguous copy.
    #[track_caller]
    pub fn contiguous(&self) -> Result<Tensor> {
        let ctx = OpContext::enter("contiguous");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            if self.is_contiguous() {
                return Ok(self.clone());
            }
            self.contiguous_copy(&ctx)
        })?;
        if !out.is_same(self) {
            crate::autograd::formulas::copy::copy(&ctx, "CloneBackward0", self, &out)?;
        }
        Ok(out)
    }

    pub(crate) fn contiguous_copy(&self, ctx: &OpContext) -> Result<Tensor> {
        self.copy_into_new(ctx, Layout::contiguous(&self.shape(), 0), self.dtype())
    }

    /// This tensor converted to `dtype`: itself when the dtype already matches, else a copy
    /// that keeps a dense layout's strides (and any other layout's memory order).
    #[track_caller]
    pub fn to(&self, dtype: DType) -> Result<Tensor> {
        let ctx = OpContext::enter("to");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            if dtype == self.dtype() {
                return Ok(self.clone());
            }
            let l = self.layout();
            // As PyTorch: a dense layout's strides are kept, and any other layout's memory
            // order is kept in dense strides.
            let strides = if l.is_non_overlapping_and_dense() {
                l.strides().to_vec()
            } else {
                infer_dense_strides(l.sizes(), l.strides())
            };
            let layout = Layout::new(l.sizes().to_vec(), strides, 0);
            self.copy_into_new(&ctx, layout, dtype)
        })?;
        if !out.is_same(self) {
            crate::autograd::formulas::copy::copy(&ctx, "ToCopyBackward0", self, &out)?;
        }
        Ok(out)
    }

    pub(crate) fn copy_into_new(
        &self,
        ctx: &OpContext,
        layout: Layout,
        dtype: DType,
    ) -> Result<Tensor> {
        let prepared = ElementwiseSpec::new(Output::NewWithLayout(dtype, layout), vec![self])
            .infer(ctx.op())?;
        // SAFETY: `execute` locks the storages and passes a plan valid for them.
        prepared.execute(ctx, |plan| unsafe { kernels::copy(plan) })
    }

    /// Sets every element to `value` (converted to this tensor's dtype; a value that
    /// overflows it is refused, see [`Scalar::overflows`]).
    #[track_caller]
    pub fn fill_(&self, value: impl Into<Scalar>) -> Result<Tensor> {
        let ctx = OpContext::enter("fill_");
        self.fill_in(&ctx, value.into())
    }

    /// Sets every element to zero.
    #[track_caller]
    pub fn zero_(&self) -> Result<Tensor> {
        let ctx = OpContext::enter("zero_");
        self.fill_in(&ctx, Scalar::Int(0))
    }

    pub(crate) fn fill_in(&self, ctx: &OpContext, value: Scalar) -> Result<Tensor> {
        value.check_fill(ctx.op(), self.dtype(), self.numel())?;
        let prepared = ElementwiseSpec::new(Output::Existing(self), vec![]).infer_fill(ctx.op())?;
        let rec = overwrite_begin(ctx, self, &Overwrite::Fill)?;
        let out = prepared.execute(ctx, |plan| FillWith(value).run(plan))?;
        if let Some(rec) = rec {
            overwrite_finish(rec, Overwrite::Fill)?;
        }
        Ok(out)
    }
}
