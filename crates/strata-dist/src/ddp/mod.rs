//! `DistributedDataParallel`: a module replicated on every rank whose gradients are averaged
//! across ranks during backward, bucket by bucket, so that communication overlaps the rest
//! of backward and every rank steps with the same gradients.

mod buckets;
mod reducer;

use std::sync::Arc;

use strata_core::autograd::HookHandle;
use strata_core::{Result, Tensor};
use strata_nn::{Module, ModuleCore};

use crate::group::ProcessGroup;
pub use reducer::CommunicationStats;
use reducer::Reducer;

/// How [`DistributedDataParallel`] buckets and broadcasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DdpOptions {
    /// The most bytes of gradients one bucket holds (PyTorch's `bucket_cap_mb`, 25 MiB); a
    /// gradient larger than this gets a bucket of its own.
    pub bucket_cap_bytes: usize,
    /// Each `.grad` is a view into its bucket, so gradients take no memory beyond the
    /// buckets and need no copy in or out. On by default here; PyTorch's default is off.
    pub gradient_as_bucket_view: bool,
    /// Copies rank 0's buffers (BatchNorm's running statistics) to every rank before each
    /// forward, as PyTorch's default does; off, each rank keeps its own.
    pub broadcast_buffers: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            bucket_cap_bytes: 25 << 20,
            gradient_as_bucket_view: true,
            broadcast_buffers: true,
        }
    }
}

/// A module (shared, as `strata_nn::module::shared` makes it) trained data-parallel: each rank runs it on its own share of the batch, and
/// backward averages the gradients over the ranks (PyTorch's `DistributedDataParallel`).
///
/// At construction rank 0's parameters and buffers are copied to every rank. The gradients
/// of parameters that require grad are assigned to buckets of at most
/// [`DdpOptions::bucket_cap_bytes`], in reverse registration order (roughly the order
/// backward produces them); a bucket's all-reduce starts as soon as its last gradient is
/// accumulated, on the process group's communication thread, while backward goes on; the
/// last gradient of backward waits for them all, so when `backward()` returns every rank has
/// the same averaged gradients. Buckets keep their assignment for the life of the wrapper
/// (PyTorch rebuilds them after the first iteration), so each rank's memory is fixed from
/// the start.
///
/// Every parameter that requires grad must receive a gradient in every synchronised
/// backward (an unused one is reported at the next forward). State dicts are the inner
/// module's, without PyTorch's `module.` prefix, so a checkpoint loads with or without the
/// wrapper. BatchNorm normalises with each rank's own batch statistics (there is no
/// `SyncBatchNorm`).
pub struct DistributedDataParallel {
    module: Arc<dyn Module>,
    group: Arc<dyn ProcessGroup>,
    reducer: Arc<Reducer>,
    hooks: Vec<HookHandle>,
    options: DdpOptions,
}

/// While alive, backward accumulates gradients locally without averaging them (gradient
/// accumulation); the first backward after it drops averages everything accumulated. Made
/// by [`DistributedDataParallel::no_sync`].
pub struct NoSync<'a> {
    reducer: &'a Reducer,
    previous: bool,
}

impl Drop for NoSync<'_> {
    fn drop(&mut self) {
        self.reducer.set_sync(self.previous);
    }
}

impl DistributedDataParallel {
    /// Wraps `module` with the default options.
    pub fn new(module: Arc<dyn Module>, group: Arc<dyn ProcessGroup>) -> Result<Self> {
        Self::with_options(module, group, DdpOptions::default())
    }

    /// Wraps `module`: broadcasts rank 0's parameters and buffers, assigns the buckets and
    /// allocates them (counted as gradient memory), and hooks every parameter that requires
    /// grad.
    ///
    /// # Errors
    ///
    /// When a parameter or buffer cannot be sent (not contiguous, not on the CPU), or a
    /// bucket cannot be allocated.
    pub fn with_options(
        module: Arc<dyn Module>,
        group: Arc<dyn ProcessGroup>,
        options: DdpOptions,
    ) -> Result<Self> {
        let _no_grad = strata_core::autograd::GradModeGuard::no_grad();
        for (_, p) in module.named_parameters() {
            group.broadcast(&p, 0)?;
        }
        for (_, b) in module.named_buffers() {
            group.broadcast(&b, 0)?;
        }
        let (names, params): (Vec<String>, Vec<Tensor>) = module
            .named_parameters()
            .into_iter()
            .filter(|(_, p)| p.requires_grad())
            .unzip();
        let sizes: Vec<_> = params.iter().map(|p| (p.numel(), p.dtype())).collect();
        let assignment = buckets::assign(&sizes, options.bucket_cap_bytes.max(1));
        let reducer = Arc::new(Reducer::new(
            group.clone(),
            names,
            params.clone(),
            assignment,
            options.gradient_as_bucket_view,
        )?);
        let mut hooks = Vec::with_capacity(params.len());
        for (index, p) in params.iter().enumerate() {
            let weak = Arc::downgrade(&reducer);
            hooks.push(
                p.register_post_accumulate_grad_hook(move |_| match weak.upgrade() {
                    Some(r) => r.mark_ready(index),
                    None => Ok(()),
                })?,
            );
        }
        reducer.prepare_for_forward()?;
        Ok(DistributedDataParallel {
            module,
            group,
            reducer,
            hooks,
            options,
        })
    }

    /// The wrapped module.
    pub fn module(&self) -> &Arc<dyn Module> {
        &self.module
    }

    /// The process group gradients are averaged over.
    pub fn group(&self) -> &Arc<dyn ProcessGroup> {
        &self.group
    }

    /// The options it was made with.
    pub fn options(&self) -> DdpOptions {
        self.options
    }

    /// Bytes of all gradient buckets (with bucket views, all the gradient memory there is).
    pub fn bucket_bytes(&self) -> usize {
        self.reducer.bucket_bytes()
    }

    /// The time gradient averaging has taken so far, and how much of it backward waited for.
    pub fn communication(&self) -> CommunicationStats {
        self.reducer.stats()
    }

    /// Each bucket's parameter names, in the order the buckets are reduced.
    pub fn bucket_assignment(&self) -> Vec<Vec<String>> {
        self.reducer.bucket_names()
    }

    /// Turns gradient averaging off until the returned guard drops: backward then only
    /// accumulates into each `.grad` (PyTorch's `no_sync()` context), and the next
    /// backward outside it averages the sum.
    pub fn no_sync(&self) -> NoSync<'_> {
        NoSync {
            previous: self.reducer.set_sync(false),
            reducer: &self.reducer,
        }
    }
}

impl Drop for DistributedDataParallel {
    fn drop(&mut self) {
        for h in self.hooks.drain(..) {
            h.remove();
        }
    }
}

impl Module for DistributedDataParallel {
    fn core(&self) -> &ModuleCore {
        self.module.core()
    }

    /// Checks the last backward averaged every bucket, points each `.grad` at its bucket
    /// view, broadcasts rank 0's buffers (by default), then runs the module.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.reducer.prepare_for_forward()?;
        if self.options.broadcast_buffers && self.group.world_size() > 1 {
            let _no_grad = strata_core::autograd::GradModeGuard::no_grad();
            for (_, b) in self.module.named_buffers() {
                self.group.broadcast(&b, 0)?;
            }
        }
        self.module.forward(x)
    }
}
