//! Resizing the output of an `out=` op, as PyTorch's `resize_output` does.

use crate::layout::{contiguous_strides, Layout};
use crate::op::OpContext;
use crate::storage::{lock_storages, Access};
use crate::{Error, Result, Tensor};

impl Tensor {
    /// Gives an `out=` tensor the shape `shape`: nothing happens when it already has it;
    /// otherwise it becomes contiguous with that shape at its current storage offset, its
    /// storage growing (keeping its identity and contents) when too small. Resizing a tensor
    /// that held elements prints a warning, as PyTorch does, because it usually means the
    /// wrong `out` was passed.
    pub(crate) fn resize_for_out(&self, ctx: &OpContext, shape: &[usize]) -> Result<()> {
        self.resize_for_out_strided(ctx, shape, contiguous_strides(shape))
    }

    /// [`Tensor::resize_for_out`] to the dense `strides` rather than contiguous ones (an
    /// element-wise `out=` takes the layout a new output would have).
    pub(crate) fn resize_for_out_strided(
        &self,
        ctx: &OpContext,
        shape: &[usize],
        strides: Vec<usize>,
    ) -> Result<()> {
        let body = self.body();
        if body.layout.sizes() == shape {
            return Ok(());
        }
        let layout = Layout::new(shape.to_vec(), strides, body.layout.offset());
        let itemsize = self.element_size();
        let extent = layout.validate(itemsize).ok_or_else(|| {
            Error::shape(
                ctx.op(),
                format!("cannot resize the output to {shape:?}: too large to address"),
                vec![shape.to_vec()],
            )
        })?;
        let needed = extent * itemsize;
        if needed > body.storage.nbytes() {
            let allocator = match body.storage.allocator() {
                Some(a) => a,
                None => ctx.allocator(body.storage.device())?,
            };
            let site = ctx.site();
            let block = allocator
                .allocate(needed, &site)
                .map_err(|source| Error::OutOfMemory {
                    op: ctx.op(),
                    source,
                })?;
            ctx.observe_alloc(site, block.size(), body.storage.device(), None);
            let guards = lock_storages(&[(&body.storage, Access::Write)]);
            if let Err(block) = guards.grow(&body.storage, allocator.clone(), block) {
                // Another thread grew it meanwhile (ours is not needed), or the storage's
                // bytes cannot move (a device storage).
                // SAFETY: the block came from `allocator` just above and was never used.
                unsafe { allocator.deallocate(block) };
                if body.storage.nbytes() < needed {
                    return Err(Error::Unsupported {
                        op: ctx.op(),
                        message: format!(
                            "cannot resize an output on {} in place; pass an output of the \
                             result's shape",
                            body.storage.device()
                        ),
                    });
                }
            }
        }
        if body.layout.numel() > 0 {
            eprintln!(
                "warning: {}: an output with {} elements was resized from shape {:?} to {shape:?}; \
                 pass an output of the right shape, or an empty one, to avoid this",
                ctx.op(),
                body.layout.numel(),
                body.layout.sizes()
            );
        }
        self.set_layout(layout);
        Ok(())
    }
}
