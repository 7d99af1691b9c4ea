//! The `out=` forms of the gathering and joining ops: `index_select_out`, `gather_out`,
//! `scatter_add_out`, `cat_out` and `stack_out`.
//!
//! Each runs the out-of-place op's own kernel with the output as its destination, written
//! through the output's strides: an output of the result's shape is written where it is and
//! nothing is allocated; one of another shape is resized first (contiguous, or channels-last
//! for a `cat` of channels-last inputs, as PyTorch does). As PyTorch, the output may share no
//! memory with the inputs (`scatter_add_out` may write into `self` itself), the indexed ops
//! require the input's dtype, and `cat`/`stack` convert their promoted result to any dtype
//! that can hold it. The output's version goes up by one and the output is returned.

use super::*;
use crate::autograd::record::refuse_out_with_grad;
use crate::ops::binary::check_cast;
use crate::ops::out::{check_memory, expect_dtype, Aliasing};

/// Whether a kernel may split its writes to `out` across threads.
fn parallel_writes(out: &Tensor) -> bool {
    internal_overlap(&out.layout()) == InternalOverlap::No
}

impl Tensor {
    /// [`Tensor::index_select`] into `out`, which must have `self`'s dtype and share no memory
    /// with `self` or `index`. An `out` of another shape is resized (contiguous, keeping its
    /// storage) as PyTorch does; one of the right shape keeps its strides. Returns `out`, whose
    /// version goes up by one.
    #[track_caller]
    pub fn index_select_out(&self, dim: i64, index: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("index_select_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        let sel = IndexSelect::infer(ctx.op(), self, dim, index)?;
        expect_dtype(ctx.op(), out, self.dtype())?;
        check_memory(
            ctx.op(),
            out,
            &sel.shape,
            &[self, index],
            Aliasing::Disjoint,
        )?;
        out.resize_for_out(&ctx, &sel.shape)?;
        sel.execute(self, out, parallel_writes(out));
        out.bump_version();
        Ok(out.clone())
    }

    /// [`Tensor::gather`] into `out`, which must have `self`'s dtype and share no memory with
    /// `self` or `index`. An `out` of the index's shape keeps its strides; one of another
    /// shape is resized. Returns `out`, whose version goes up by one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2., 3., 4.], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![1i64, 1, 0, 1], &[2, 2])?;
    /// let out = Tensor::zeros(&[2, 2], DType::F32)?;
    /// x.gather_out(1, &i, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![2., 2., 3., 4.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn gather_out(&self, dim: i64, index: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("gather_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        let g = Gather::infer(ctx.op(), self, dim, index)?;
        expect_dtype(ctx.op(), out, self.dtype())?;
        check_memory(ctx.op(), out, &g.shape, &[self, index], Aliasing::Disjoint)?;
        out.resize_for_out(&ctx, &g.shape)?;
        g.execute(self, out, parallel_writes(out));
        out.bump_version();
        Ok(out.clone())
    }

    /// [`Tensor::scatter_add`] into `out`: `self` copied into `out`, then `src` added at the
    /// positions `index` names. `out` must have `self`'s dtype; it may be `self` itself (then
    /// nothing is copied: this is `scatter_add_` without autograd), but must share no memory
    /// with `index` or `src`. An `out` of `self`'s shape keeps its strides; one of another
    /// shape is resized. Returns `out`, whose version goes up by one.
    #[track_caller]
    pub fn scatter_add_out(
        &self,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        out: &Tensor,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("scatter_add_out");
        refuse_out_with_grad(ctx.op(), &[self, src], out)?;
        let sc = ScatterAddPlan::infer(ctx.op(), self, dim, index, src)?;
        expect_dtype(ctx.op(), out, self.dtype())?;
        let shape = self.shape();
        check_memory(ctx.op(), out, &shape, &[index, src], Aliasing::Disjoint)?;
        check_memory(ctx.op(), out, &shape, &[self], Aliasing::Exact)?;
        out.resize_for_out(&ctx, &shape)?;
        let is_self = out.storage_id() == self.storage_id() && out.layout() == self.layout();
        sc.execute(self, src, out, !is_self);
        out.bump_version();
        Ok(out.clone())
    }

    /// [`Tensor::cat`] into `out`, whose dtype must be able to hold the promoted result (a
    /// float result cannot go into an integer tensor). `out` must share no memory with the
    /// inputs. An `out` of the result's shape keeps its strides; one of another shape is
    /// resized (channels-last when every input is). Returns `out`, whose version goes up by
    /// one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let a = Tensor::ones(&[1, 2], DType::I32)?;
    /// let out = Tensor::zeros(&[0], DType::F32)?;
    /// Tensor::cat_out(&[&a, &a], 0, &out)?;
    /// assert_eq!(out.shape(), vec![2, 2]);
    /// assert_eq!(out.to_vec::<f32>()?, vec![1.0; 4]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn cat_out(tensors: &[&Tensor], dim: i64, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("cat_out");
        refuse_out_with_grad(ctx.op(), tensors, out)?;
        let c = Cat::infer(ctx.op(), tensors, dim)?;
        check_cast(ctx.op(), c.dtype, out.dtype())?;
        check_memory(ctx.op(), out, &c.sizes, tensors, Aliasing::Disjoint)?;
        let resized = out.shape() != c.sizes;
        out.resize_for_out(&ctx, &c.sizes)?;
        if resized && c.strides != contiguous_strides(&c.sizes) {
            // The resize left a dense tensor at the same offset: restride it as PyTorch does.
            let offset = out.storage_offset();
            out.set_layout(Layout::new(c.sizes.clone(), c.strides.clone(), offset));
        }
        copy_regions(
            tensors,
            out,
            &c.regions(&out.stride()),
            parallel_writes(out),
        );
        out.bump_version();
        Ok(out.clone())
    }

    /// [`Tensor::stack`] into `out`, with the dtype rule of [`Tensor::cat_out`]: each input is
    /// copied into its slice of `out` along the new dimension `dim`. `out` must share no
    /// memory with the inputs. An `out` of the result's shape keeps its strides; one of
    /// another shape is resized. Returns `out`, whose version goes up by one.
    #[track_caller]
    pub fn stack_out(tensors: &[&Tensor], dim: i64, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("stack_out");
        refuse_out_with_grad(ctx.op(), tensors, out)?;
        let (shape, d) = check_stack(ctx.op(), tensors, dim)?;
        let dtype = result_type(&tensors.iter().map(|t| Arg::Tensor(t)).collect::<Vec<_>>());
        check_cast(ctx.op(), dtype, out.dtype())?;
        let mut sizes = shape;
        sizes.insert(d, tensors.len());
        check_addressable(ctx.op(), &sizes, dtype)?;
        check_memory(ctx.op(), out, &sizes, tensors, Aliasing::Disjoint)?;
        out.resize_for_out(&ctx, &sizes)?;
        let mut strides = out.stride();
        let step = strides.remove(d);
        let regions: Vec<(usize, usize, Vec<usize>)> = (0..tensors.len())
            .map(|i| (i, i * step, strides.clone()))
            .collect();
        copy_regions(tensors, out, &regions, parallel_writes(out));
        out.bump_version();
        Ok(out.clone())
    }
}

#[cfg(test)]
#[path = "joining_out_tests.rs"]
mod tests;
