//! The [`DataLoader`]: batches of a dataset in sampler order, built on the caller's thread or
//! ahead of time by worker threads, with a bounded number in flight.
//!
//! With `num_workers` = W and `prefetch_factor` = P, at most W·P batches are dispatched and
//! not yet handed to the caller (being built, built, or waiting for an earlier batch to be
//! delivered first); with the batch the caller holds, at most W·P + 1 batches of input
//! memory are alive because of the loader. Batch `b` goes to worker `b mod W` and batches
//! are delivered in order, so a slow batch holds back the ones after it without letting the
//! others run further ahead.

mod collate;
mod iterable;
mod prefetch;
mod stop;
mod workers;

use std::collections::BTreeMap;
use std::sync::Arc;

use strata_alloc::DeviceAllocator;
use strata_core::routing::{current_allocator, pinned_host_allocator};
use strata_core::{scope, with_allocator, Device, Tensor};

pub use collate::{Collate, IntoBatch};
pub use iterable::{IterableDataset, IterableEpoch, IterableLoader, Stream};
#[cfg(feature = "cuda")]
pub use prefetch::DeviceCopy;
pub use prefetch::{Prefetch, Stage};
use workers::{Shared, Task, Workers};

use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use crate::sampler::{BatchSampler, RandomSampler, Sampler, SequentialSampler};

/// A loader's settings, named and defaulted as PyTorch's `DataLoader` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoaderOptions {
    /// Samples per batch (at least 1). Default 1.
    pub batch_size: usize,
    /// A new random order every epoch (a [`RandomSampler`] seeded with `seed`). Default off.
    pub shuffle: bool,
    /// Drop a last batch shorter than `batch_size`. Default off.
    pub drop_last: bool,
    /// Worker threads building batches ahead; 0 builds each batch on the caller's thread
    /// when it is asked for. Default 0.
    pub num_workers: usize,
    /// Batches each worker may have in flight (default 2 with workers); setting it without
    /// workers is an error, as in PyTorch.
    pub prefetch_factor: Option<usize>,
    /// Keep the workers between epochs (needs workers). Default off.
    pub persistent_workers: bool,
    /// Seeds the shuffle and every sample's generator ([`crate::SampleContext`]). Default 0.
    pub seed: u64,
    /// Build every batch straight in pinned host memory (the process's pinned allocator,
    /// `strata::core::routing::pinned_host_allocator`), ready for copies to a device that
    /// need not wait; no batch is copied to be pinned. Default off.
    pub pin_memory: bool,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            batch_size: 1,
            shuffle: false,
            drop_last: false,
            num_workers: 0,
            prefetch_factor: None,
            persistent_workers: false,
            seed: 0,
            pin_memory: false,
        }
    }
}

/// One batch: its number in the epoch, the dataset indices it holds, and one tensor per
/// field with the batch dimension first.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The batch's number in its epoch, from 0.
    pub index: usize,
    /// The samples' indices in the dataset, in batch order.
    pub indices: Vec<usize>,
    /// One tensor per field (`[batch, field…]`), in the dataset's field order.
    pub tensors: Vec<Tensor>,
}

/// Loads a dataset in batches (PyTorch's `DataLoader`). Call [`DataLoader::epoch`] for each
/// pass over the data.
pub struct DataLoader {
    dataset: Arc<dyn Dataset>,
    batches: BatchSampler,
    options: LoaderOptions,
    collate: Arc<dyn Collate>,
    allocator: Option<Arc<dyn DeviceAllocator>>,
    next_epoch: u64,
    /// The worker pool while an epoch runs, or between epochs with persistent workers.
    workers: Option<Workers>,
}

impl DataLoader {
    /// A loader over `dataset` with the sampler `options` imply (sequential, or random when
    /// `shuffle`).
    pub fn new(dataset: Arc<dyn Dataset>, options: LoaderOptions) -> Result<DataLoader> {
        let sampler: Arc<dyn Sampler> = if options.shuffle {
            Arc::new(RandomSampler::new(dataset.len(), options.seed))
        } else {
            Arc::new(SequentialSampler::new(dataset.len()))
        };
        Self::build(dataset, sampler, options)
    }

    /// A loader over `dataset` in the order `sampler` gives (`shuffle` must be off, as in
    /// PyTorch, where a sampler and `shuffle` exclude each other).
    pub fn with_sampler(
        dataset: Arc<dyn Dataset>,
        sampler: Arc<dyn Sampler>,
        options: LoaderOptions,
    ) -> Result<DataLoader> {
        if options.shuffle {
            return Err(DataError::argument(
                "DataLoader",
                "a sampler and shuffle=true exclude each other; shuffle with a RandomSampler",
            ));
        }
        Self::build(dataset, sampler, options)
    }

    fn build(
        dataset: Arc<dyn Dataset>,
        sampler: Arc<dyn Sampler>,
        options: LoaderOptions,
    ) -> Result<DataLoader> {
        check(&options)?;
        if let Some(bad) = sampler.indices(0).into_iter().find(|&i| i >= dataset.len()) {
            return Err(DataError::argument(
                "DataLoader",
                format!(
                    "the sampler gives index {bad}, the dataset has {} samples",
                    dataset.len()
                ),
            ));
        }
        Ok(DataLoader {
            batches: BatchSampler::new(sampler, options.batch_size, options.drop_last)?,
            dataset,
            options,
            collate: Arc::new(IntoBatch),
            allocator: None,
            next_epoch: 0,
            workers: None,
        })
    }

    /// Builds batches with `collate` instead of [`IntoBatch`].
    pub fn collate(mut self, collate: Arc<dyn Collate>) -> DataLoader {
        self.collate = collate;
        self.workers = None;
        self
    }

    /// Allocates every batch (workers' included) on `allocator` instead of where the thread
    /// that starts an epoch allocates, so that a training step can be measured apart from
    /// its data (`pin_memory` takes precedence: pinned batches come from the pinned
    /// allocator).
    pub fn allocator(mut self, allocator: Arc<dyn DeviceAllocator>) -> DataLoader {
        self.allocator = Some(allocator);
        self.workers = None;
        self
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The loader's settings.
    pub fn options(&self) -> &LoaderOptions {
        &self.options
    }

    /// The most batches dispatched to workers and not yet handed out: `num_workers ×
    /// prefetch_factor` (0 without workers).
    pub fn in_flight_bound(&self) -> usize {
        self.options.num_workers * self.prefetch()
    }

    fn prefetch(&self) -> usize {
        self.options.prefetch_factor.unwrap_or(2)
    }

    /// The dataset the loader reads.
    pub fn dataset(&self) -> &Arc<dyn Dataset> {
        &self.dataset
    }

    /// The number the next [`DataLoader::epoch`] will have (0 for a new loader).
    pub fn next_epoch(&self) -> u64 {
        self.next_epoch
    }

    /// Makes the next epoch epoch `epoch` (PyTorch's `sampler.set_epoch`): its order, and
    /// every sample's generator, are those of that epoch in any run with the same seed, so
    /// a resumed run sees the batches the interrupted one would have seen.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.next_epoch = epoch;
    }

    /// Starts the next epoch (the first is epoch 0): an iterator of its batches in sampler
    /// order. Dropping it before the end stops the workers (unless persistent) after the
    /// batches they are building and frees every batch not handed out.
    pub fn epoch(&mut self) -> Result<Epoch<'_>> {
        self.epoch_from(0)
    }

    /// Starts the next epoch at its batch `start`: the batches before it are neither built
    /// nor handed out (a run resumed in the middle of an epoch). `start` may be the epoch's
    /// length (an epoch with nothing left), not more.
    pub fn epoch_from(&mut self, start: usize) -> Result<Epoch<'_>> {
        if start > self.len() {
            return Err(DataError::argument(
                "DataLoader::epoch_from",
                format!(
                    "batch {start} is past the end of an epoch of {} batches",
                    self.len()
                ),
            ));
        }
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        let allocator: Arc<dyn DeviceAllocator> = match (&self.allocator, self.options.pin_memory) {
            (_, true) => pinned_host_allocator().clone(),
            (Some(a), false) => a.clone(),
            (None, false) => current_allocator(Device::Cpu)?,
        };
        if self.options.num_workers > 0 && self.workers.is_none() {
            self.workers = Some(Workers::spawn(
                self.options.num_workers,
                Shared {
                    dataset: self.dataset.clone(),
                    collate: self.collate.clone(),
                    allocator: allocator.clone(),
                    scope: scope::current(),
                    seed: self.options.seed,
                },
            )?);
        }
        Ok(Epoch {
            batches: self.batches.batches(epoch),
            epoch,
            next: start,
            dispatched: start,
            ready: BTreeMap::new(),
            allocator,
            loader: self,
        })
    }
}

/// Refuses settings PyTorch refuses.
fn check(o: &LoaderOptions) -> Result<()> {
    if o.batch_size == 0 {
        return Err(DataError::argument(
            "DataLoader",
            "batch_size must be at least 1",
        ));
    }
    match (o.num_workers, o.prefetch_factor) {
        (0, Some(_)) => {
            return Err(DataError::argument(
                "DataLoader",
                "prefetch_factor needs worker threads (num_workers > 0); without workers \
                 each batch is built when it is asked for",
            ))
        }
        (_, Some(0)) => {
            return Err(DataError::argument(
                "DataLoader",
                "prefetch_factor must be at least 1",
            ))
        }
        _ => {}
    }
    if o.persistent_workers && o.num_workers == 0 {
        return Err(DataError::argument(
            "DataLoader",
            "persistent_workers needs worker threads (num_workers > 0)",
        ));
    }
    Ok(())
}

/// One pass over the data: yields `Result<Batch>` in sampler order. A batch whose sample
/// failed (an error or a panic) is an `Err` naming the sample, in its place; the batches
/// around it still come.
pub struct Epoch<'a> {
    loader: &'a mut DataLoader,
    batches: Vec<Vec<usize>>,
    epoch: u64,
    /// The next batch to hand out.
    next: usize,
    /// Batches handed to workers so far.
    dispatched: usize,
    /// Built batches waiting for an earlier one.
    ready: BTreeMap<usize, Result<Vec<Tensor>>>,
    allocator: Arc<dyn DeviceAllocator>,
}

impl Epoch<'_> {
    /// The epoch's number, from 0.
    pub fn number(&self) -> u64 {
        self.epoch
    }

    /// Batches dispatched to workers and not yet handed out.
    pub fn in_flight(&self) -> usize {
        self.dispatched - self.next.min(self.dispatched)
    }

    /// Dispatches batches until the bound is reached or none is left.
    fn top_up(&mut self) -> Result<()> {
        let bound = self.loader.in_flight_bound();
        let Some(workers) = &self.loader.workers else {
            return Ok(());
        };
        while self.dispatched < self.batches.len() && self.dispatched - self.next < bound {
            let b = self.dispatched;
            workers.dispatch(Task {
                epoch: self.epoch,
                batch: b,
                indices: self.batches[b].clone(),
            })?;
            self.dispatched += 1;
        }
        Ok(())
    }

    /// Waits for batch `self.next` from the workers.
    fn receive(&mut self) -> Result<Vec<Tensor>> {
        loop {
            if let Some(r) = self.ready.remove(&self.next) {
                return r;
            }
            let Some(workers) = &self.loader.workers else {
                return Err(DataError::argument("DataLoader", "the workers are gone"));
            };
            let done = workers.done.recv().map_err(|_| {
                DataError::argument("DataLoader", "every worker stopped before the epoch ended")
            })?;
            // A persistent pool may still return batches of an epoch left early.
            if done.epoch == self.epoch {
                self.ready.insert(done.batch, done.result);
            }
        }
    }
}

impl Iterator for Epoch<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if self.next >= self.batches.len() {
            return None;
        }
        let b = self.next;
        let tensors = if self.loader.workers.is_some() {
            if let Err(e) = self.top_up() {
                return Some(Err(e));
            }
            self.receive()
        } else {
            let (loader, indices) = (&*self.loader, &self.batches[b]);
            with_allocator(&self.allocator, || {
                loader
                    .collate
                    .collate(&*loader.dataset, indices, loader.options.seed, self.epoch)
            })
        };
        self.next += 1;
        if self.loader.workers.is_some() {
            if let Err(e) = self.top_up() {
                return Some(Err(e));
            }
        }
        Some(tensors.map(|tensors| Batch {
            index: b,
            indices: self.batches[b].clone(),
            tensors,
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.batches.len() - self.next;
        (left, Some(left))
    }
}

impl Drop for Epoch<'_> {
    fn drop(&mut self) {
        if !self.loader.options.persistent_workers {
            // Joins the workers; batches they built and nobody took are dropped with the
            // channel.
            self.loader.workers = None;
        }
    }
}
