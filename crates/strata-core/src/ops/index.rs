//! Masked and indexed writes: `masked_fill` (also in place and into a given tensor),
//! `index_add_`.

use crate::autograd::formulas::index::{overwrite_begin, overwrite_finish, Overwrite};
use crate::autograd::record::refuse_out_with_grad;
use crate::backend::cpu::{kernels, Plan};
use crate::dtype::{cast, dispatch, DTypeFn, Element};
use crate::op::OpContext;
use crate::ops::binary::{binary_inplace, BinaryOp, Other};
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::ops::out::expect_dtype;
use crate::ops::views::dim_arg;
use crate::tensor::{read_elements, ViewCreation};
use crate::{DType, Error, Result, Scalar, Tensor};

struct MaskedFill<'a>(&'a Plan, Scalar);

impl DTypeFn for MaskedFill<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        let v: T = self.1.to();
        // Operands: (out, self, mask); the mask is read converted to T (0 or 1).
        // SAFETY: `plan` comes from `Prepared::execute`, which holds the locks.
        unsafe { kernels::map2::<T, T>(self.0, move |x, m| if m != T::ZERO { v } else { x }) }
    }
}

fn check_mask(op: &'static str, mask: &Tensor) -> Result<()> {
    if mask.dtype() != DType::Bool {
        return Err(Error::dtype(
            op,
            format!("the mask must be a bool tensor, got {}", mask.dtype()),
            Some("build the mask with a comparison (x.gt(0)) or convert with .to(DType::Bool)"),
        ));
    }
    Ok(())
}

/// The integer indices of an index tensor, checked against a dimension's size.
fn indices(op: &'static str, index: &Tensor, dim: usize, size: usize) -> Result<Vec<usize>> {
    if !matches!(index.dtype(), DType::I64 | DType::I32) {
        return Err(Error::dtype(
            op,
            format!("indices must be i64 or i32, got {}", index.dtype()),
            Some("convert the index with .to(DType::I64)"),
        ));
    }
    if index.dim() > 1 {
        return Err(Error::shape(
            op,
            format!(
                "the index must be 0-d or 1-d, got shape {:?}",
                index.shape()
            ),
            vec![index.shape()],
        ));
    }
    read_elements::<i64>(index)
        .into_iter()
        .map(|i| {
            // As PyTorch, negative indices do not count from the end here.
            let j = i;
            if j < 0 || j >= size as i64 {
                Err(Error::Index {
                    op,
                    index: i,
                    dim,
                    size,
                })
            } else {
                Ok(j as usize)
            }
        })
        .collect()
}

impl Tensor {
    /// A copy of `self` with `value` where `mask` is true (`mask` broadcasts to `self`).
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        let ctx = OpContext::enter("masked_fill");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            check_mask(ctx.op(), mask)?;
            let value = value.into();
            value.check_fits(ctx.op(), self.dtype())?;
            // As PyTorch: broadcast both, copy self contiguously, then fill in place (an internal write:
            // the result's version stays 0, as in PyTorch).
            let shape = crate::layout::broadcast::broadcast_shapes(&self.shape(), &mask.shape())
                .map_err(|m| {
                    Error::shape(ctx.op(), m.describe(), vec![self.shape(), mask.shape()])
                })?;
            let shape: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
            let result = self.expand(&shape)?.contiguous_copy(&ctx)?;
            ElementwiseSpec::new(Output::Existing(&result), vec![&result, mask])
                .infer(ctx.op())?
                .without_version_bump()
                .execute(&ctx, |plan| dispatch(self.dtype(), MaskedFill(plan, value)))
        })?;
        crate::autograd::formulas::index::masked_fill(&ctx, self, mask, &out)?;
        Ok(out)
    }

    /// [`Tensor::masked_fill`] written into `out`, which must have `self`'s dtype: `self`
    /// where `mask` is false, `value` where it is true, both broadcast. An `out` of the
    /// broadcast shape is written where it is, in one pass; one of another shape is resized.
    /// `out` may be `self` itself. Returns `out`, whose version goes up by one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2., 3.], &[3])?;
    /// let out = Tensor::zeros(&[3], DType::F32)?;
    /// x.masked_fill_out(&x.gt(1.5)?, -1.0, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![1., -1., -1.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn masked_fill_out(
        &self,
        mask: &Tensor,
        value: impl Into<Scalar>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("masked_fill_out");
        check_mask(ctx.op(), mask)?;
        expect_dtype(ctx.op(), out, self.dtype())?;
        let value = value.into();
        let prepared = ElementwiseSpec::new(Output::Out(out), vec![self, mask]).infer(ctx.op())?;
        refuse_out_with_grad(ctx.op(), &[self, mask], out)?;
        prepared.execute(&ctx, |plan| dispatch(self.dtype(), MaskedFill(plan, value)))
    }

    /// Writes `value` where `mask` is true, in place.
    #[track_caller]
    pub fn masked_fill_(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        let ctx = OpContext::enter("masked_fill_");
        check_mask(ctx.op(), mask)?;
        let value = value.into();
        value.check_fits(ctx.op(), self.dtype())?;
        // As PyTorch, an expanded (self-overlapping) tensor may be filled: the elements
        // sharing memory are written in order.
        let prepared =
            ElementwiseSpec::new(Output::Existing(self), vec![self, mask]).infer_fill(ctx.op())?;
        let rec = overwrite_begin(&ctx, self, &Overwrite::MaskedFill(mask))?;
        let out = prepared.execute(&ctx, |plan| dispatch(self.dtype(), MaskedFill(plan, value)))?;
        if let Some(rec) = rec {
            overwrite_finish(rec, Overwrite::MaskedFill(mask))?;
        }
        Ok(out)
    }

    /// Adds `alpha * source[i]` to `self[index[i]]` along `dim`, in place; repeated indices
    /// accumulate.
    #[track_caller]
    pub fn index_add_(
        &self,
        dim: i64,
        index: &Tensor,
        source: &Tensor,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("index_add_");
        let op = ctx.op();
        let alpha = alpha.into();
        let ndim = self.dim();
        let d = dim_arg(op, dim, ndim)?;
        if source.dtype() != self.dtype() {
            return Err(Error::dtype(
                op,
                format!("self is {} but source is {}", self.dtype(), source.dtype()),
                Some("convert source with .to(self.dtype())"),
            ));
        }
        let (shape, src_shape) = (self.shape(), source.shape());
        let self_size = if ndim == 0 { 1 } else { shape[d] };
        let idx = indices(op, index, d, self_size)?;
        let src_len = if src_shape.is_empty() {
            1
        } else {
            src_shape[d.min(src_shape.len() - 1)]
        };
        let same_rank = src_shape.len() == ndim || (ndim <= 1 && src_shape.len() <= 1);
        let others_match = (0..ndim).all(|k| k == d || src_shape.get(k) == shape.get(k));
        if !same_rank || !others_match || src_len != idx.len() {
            return Err(Error::shape(
                op,
                format!(
                    "source of shape {src_shape:?} does not fit self of shape {shape:?} with {} \
                     indices along dimension {d}",
                    idx.len()
                ),
                vec![shape.clone(), src_shape.clone()],
            )
            .with_hint("source must match self in every dimension except dim, where its size is the number of indices"));
        }
        if !alpha_fits(alpha, self.dtype()) {
            return Err(Error::dtype(
                op,
                format!(
                    "alpha {} does not fit dtype {}",
                    alpha.to_f64(),
                    self.dtype()
                ),
                Some("use an integer alpha for integer tensors"),
            ));
        }
        // Validate the destination once (overlap) before writing anything.
        ElementwiseSpec::new(Output::Existing(self), vec![]).infer(op)?;
        let write = Overwrite::IndexAdd(dim, index, source, alpha);
        let rec = overwrite_begin(&ctx, self, &write)?;
        crate::mode::internal(|| self.index_add_rows(&ctx, d, &idx, source, alpha))?;
        // One op, one version step, however many rows were written.
        self.bump_version();
        if let Some(rec) = rec {
            overwrite_finish(rec, write)?;
        }
        Ok(self.clone())
    }

    fn index_add_rows(
        &self,
        ctx: &OpContext,
        d: usize,
        idx: &[usize],
        source: &Tensor,
        alpha: Scalar,
    ) -> Result<()> {
        let (op, ndim) = (ctx.op(), self.dim());
        for (i, &j) in idx.iter().enumerate() {
            let (dst, src) = if ndim == 0 {
                (self.clone(), source.clone())
            } else {
                let dst_l = self.layout();
                let src_l = source.layout();
                (
                    self.make_view(op, select_layout(&dst_l, d, j), ViewCreation::Plain),
                    source.make_view(op, select_layout(&src_l, d, i), ViewCreation::Plain),
                )
            };
            binary_inplace(ctx, &dst, Other::Tensor(&src), BinaryOp::Add(alpha), false)?;
        }
        Ok(())
    }
}

fn alpha_fits(alpha: Scalar, dtype: DType) -> bool {
    dtype.is_floating() || !matches!(alpha, Scalar::Float(f) if cast::<f64, i64>(f) as f64 != f)
}

fn select_layout(l: &crate::layout::Layout, d: usize, i: usize) -> crate::layout::Layout {
    let mut sizes = l.sizes().to_vec();
    let mut strides = l.strides().to_vec();
    let offset = l.offset() + i * strides[d];
    sizes.remove(d);
    strides.remove(d);
    crate::layout::Layout::new(sizes, strides, offset)
}
