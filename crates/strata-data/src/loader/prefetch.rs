//! Staging batches ahead of the step: double buffering (depth 1) or triple (depth 2).
//!
//! A [`Prefetch`] keeps up to `depth` batches staged beyond the one it hands out: when batch
//! `k` is handed out, batches `k+1 ..= k+depth` have already gone through `stage` (a copy to
//! the device, say). With a device backend the copy is issued without waiting
//! (`non_blocking`), so staging batch `k+1` overlaps the step on batch `k`; the pinned block
//! it reads carries an event ([`strata_alloc::PinnedHostAllocator::record_event`]) so that it
//! is not reused before the copy completes. On the CPU alone, `stage` is whatever the
//! caller makes it (the identity, a dtype conversion).

use std::collections::VecDeque;

use super::Batch;
use crate::error::{DataError, Result};

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
    S: FnMut(Batch) -> Result<Batch>,
{
    /// Stages the batches of `inner` with `stage`, `depth` (1 or 2) ahead.
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

    /// Batches staged and not yet handed out.
    pub fn staged(&self) -> usize {
        self.staged.len()
    }

    /// Stages batches until `want` are waiting or the inner iterator ends.
    fn fill(&mut self, want: usize) {
        while !self.done && self.staged.len() < want {
            match self.inner.next() {
                Some(b) => {
                    let staged = b.and_then(&mut self.stage);
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
    S: FnMut(Batch) -> Result<Batch>,
{
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        self.fill(1);
        let out = self.staged.pop_front()?;
        // Stage the next ones before the caller's step runs on this one.
        self.fill(self.depth);
        Some(out)
    }
}
