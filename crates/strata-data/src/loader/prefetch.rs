//! Staging batches ahead of the step: double buffering (depth 1) or triple (depth 2).
//!
//! A [`Prefetch`] keeps up to `depth` batches staged beyond the one it hands out: when batch
//! `k` is handed out, batches `k+1 ..= k+depth` have already gone through the [`Stage`] (a
//! copy to the device, say). [`DeviceCopy`] is the seeds' double buffering on a GPU: each
//! batch is copied to a CUDA device without waiting (`non_blocking`) on a side stream, so
//! the copy of batch `k+1` overlaps the step on batch `k`; the pinned blocks it reads are
//! held until the copy completes, and when a batch is handed out the consumer's current
//! stream waits for its copy and takes over its memory (`record_stream`). On the CPU alone,
//! the stage is whatever the caller makes it (the identity, a dtype conversion).

use std::collections::VecDeque;

use super::Batch;
use crate::error::{DataError, Result};

/// What a [`Prefetch`] does to each batch: [`Stage::stage`] when it is staged, ahead of the
/// consumer, and [`Stage::ready`] when it is handed out. Any `FnMut(Batch) -> Result<Batch>`
/// is a stage with nothing to do at hand-out.
pub trait Stage {
    /// Prepares a batch ahead of its use (a non-blocking copy to a device).
    fn stage(&mut self, batch: Batch) -> Result<Batch>;

    /// Makes a staged batch safe to use now, as it is handed out (waits for its copy).
    fn ready(&mut self, batch: &Batch) -> Result<()> {
        let _ = batch;
        Ok(())
    }
}

impl<F: FnMut(Batch) -> Result<Batch>> Stage for F {
    fn stage(&mut self, batch: Batch) -> Result<Batch> {
        self(batch)
    }
}

#[cfg(feature = "cuda")]
pub use device_copy::DeviceCopy;

#[cfg(feature = "cuda")]
mod device_copy {
    use std::collections::VecDeque;

    use strata_core::cuda::{self, Event, Stream};
    use strata_core::Device;

    use super::{Batch, Stage};
    use crate::error::Result;

    /// Copies batches to CUDA device `index` on a side stream of their own, without
    /// waiting (see the module docs): PyTorch's `pin_memory=True` loader with
    /// `non_blocking=True` copies under `torch.cuda.stream(side)`, then
    /// `current_stream().wait_stream(side)` and `record_stream` at use. Batches from a
    /// loader with `pin_memory` copy asynchronously; pageable ones copy synchronously.
    pub struct DeviceCopy {
        index: usize,
        side: Stream,
        /// The event after each staged batch's copies, in staging order.
        copied: VecDeque<Event>,
    }

    impl DeviceCopy {
        /// A stage copying to CUDA device `index` on a new side stream; an error without a
        /// driver or such a device.
        pub fn new(index: usize) -> Result<DeviceCopy> {
            Ok(DeviceCopy {
                index,
                side: Stream::new(index)?,
                copied: VecDeque::new(),
            })
        }

        /// The side stream the copies run on.
        pub fn stream(&self) -> &Stream {
            &self.side
        }
    }

    impl Stage for DeviceCopy {
        fn stage(&mut self, mut batch: Batch) -> Result<Batch> {
            let device = Device::Cuda(self.index);
            batch.tensors = cuda::with_stream(&self.side, || {
                batch
                    .tensors
                    .iter()
                    .map(|t| t.to_device_non_blocking(device))
                    .collect::<strata_core::Result<Vec<_>>>()
            })?;
            self.copied.push_back(self.side.record_event()?);
            Ok(batch)
        }

        fn ready(&mut self, batch: &Batch) -> Result<()> {
            let Some(copied) = self.copied.pop_front() else {
                return Ok(());
            };
            let current = cuda::current_stream(self.index)?;
            copied.wait(&current)?;
            // The batch's memory came from the side stream's pool; the consumer's stream
            // uses it now, so its blocks are not reused before that work is done.
            for t in &batch.tensors {
                t.record_stream(&current)?;
            }
            Ok(())
        }
    }
}

/// An iterator of staged batches, `depth` ahead of the consumer (see the module docs).
pub struct Prefetch<I, S> {
    inner: I,
    stage: S,
    depth: usize,
    staged: VecDeque<Result<Batch>>,
    done: bool,
}

impl<I, S> Prefetch<I, S>
where
    I: Iterator<Item = Result<Batch>>,
    S: Stage,
{
    /// Stages the batches of `inner` with `stage` (a [`Stage`], such as a closure or a
    /// [`DeviceCopy`]), `depth` (1 or 2) ahead.
    pub fn new(inner: I, depth: usize, stage: S) -> Result<Self> {
        if !(1..=2).contains(&depth) {
            return Err(DataError::argument(
                "Prefetch::new",
                format!("depth must be 1 (double buffering) or 2 (triple), not {depth}"),
            ));
        }
        Ok(Prefetch {
            inner,
            stage,
            depth,
            staged: VecDeque::with_capacity(depth + 1),
            done: false,
        })
    }

    /// The stage, once the caller is done with the batches.
    pub fn into_stage(self) -> S {
        self.stage
    }

    /// Batches staged and not yet handed out.
    pub fn staged(&self) -> usize {
        self.staged.len()
    }

    /// Stages batches until `want` are waiting or the inner iterator ends.
    fn fill(&mut self, want: usize) {
        while !self.done && self.staged.len() < want {
            match self.inner.next() {
                Some(b) => {
                    let staged = b.and_then(|b| self.stage.stage(b));
                    self.staged.push_back(staged);
                }
                None => self.done = true,
            }
        }
    }
}

impl<I, S> Iterator for Prefetch<I, S>
where
    I: Iterator<Item = Result<Batch>>,
    S: Stage,
{
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        self.fill(1);
        let out = self
            .staged
            .pop_front()?
            .and_then(|b| self.stage.ready(&b).map(|()| b));
        // Stage the next ones before the caller's step runs on this one.
        self.fill(self.depth);
        Some(out)
    }
}
