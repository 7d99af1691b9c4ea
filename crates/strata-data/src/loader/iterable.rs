//! Streams of samples (PyTorch's `IterableDataset`) and their loader: each worker reads its
//! own shard of the stream and batches it; batches come from the workers in turn (worker 0's
//! first, worker 1's first, …), as PyTorch delivers them, each worker at most
//! `prefetch_factor` batches ahead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use strata_alloc::DeviceAllocator;
use strata_core::routing::current_allocator;
use strata_core::{allocating_as, scope, with_allocator, Category, Device, Tensor};

use super::workers::spawn_in;
use super::{check, Batch, LoaderOptions};
use crate::dataset::Field;
use crate::error::{DataError, Result};

/// A dataset read as a stream (PyTorch's `IterableDataset`).
pub trait IterableDataset: Send + Sync {
    /// The fields every sample has, in order.
    fn fields(&self) -> Vec<Field>;

    /// The samples of shard `shard` of `shards` in `epoch` (shard 0 of 1 is the whole
    /// stream): each one tensor per field, read as the iterator is advanced (it owns what it
    /// needs: keep the data in an `Arc`). Workers read disjoint shards; a dataset that
    /// ignores the shard is read once per worker, as in PyTorch.
    fn samples(&self, shard: usize, shards: usize, epoch: u64) -> Stream;
}

/// The samples of one shard, as [`IterableDataset::samples`] gives them.
pub type Stream = Box<dyn Iterator<Item = Result<Vec<Tensor>>> + Send>;

/// Loads an [`IterableDataset`] in batches.
pub struct IterableLoader {
    dataset: Arc<dyn IterableDataset>,
    options: LoaderOptions,
    next_epoch: u64,
}

impl IterableLoader {
    /// A loader over `dataset`; `shuffle` must be off (a stream has no indices to shuffle,
    /// as PyTorch says too).
    pub fn new(dataset: Arc<dyn IterableDataset>, options: LoaderOptions) -> Result<Self> {
        check(&options)?;
        if options.shuffle {
            return Err(DataError::argument(
                "IterableLoader",
                "a stream cannot be shuffled by the loader; shuffle inside the dataset",
            ));
        }
        Ok(IterableLoader {
            dataset,
            options,
            next_epoch: 0,
        })
    }

    /// Starts the next epoch.
    pub fn epoch(&mut self) -> Result<IterableEpoch> {
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        let allocator = current_allocator(Device::Cpu)?;
        let o = &self.options;
        if o.num_workers == 0 {
            let dataset = self.dataset.clone();
            return Ok(IterableEpoch {
                source: Source::Inline(Inline {
                    dataset,
                    batch_size: o.batch_size,
                    drop_last: o.drop_last,
                    epoch,
                    stream: None,
                    done: false,
                }),
                allocator,
                next: 0,
                delivered: 0,
            });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::with_capacity(o.num_workers);
        for w in 0..o.num_workers {
            let (tx, rx) = sync_channel::<Result<Vec<Tensor>>>(o.prefetch_factor.unwrap_or(2));
            let (dataset, stop, allocator) =
                (self.dataset.clone(), stop.clone(), allocator.clone());
            let (shards, size, drop_last) = (o.num_workers, o.batch_size, o.drop_last);
            let path = scope::current();
            let handle = spawn_in(
                format!("strata-data-stream-{w}"),
                allocator,
                path,
                move || {
                    let fields = dataset.fields();
                    let mut stream = dataset.samples(w, shards, epoch);
                    while !stop.load(Ordering::Relaxed) {
                        match next_batch(&mut *stream, &fields, size, drop_last) {
                            Some(b) => {
                                if tx.send(b).is_err() {
                                    break;
                                }
                            }
                            None => break,
                        }
                    }
                },
            )?;
            workers.push((Some(rx), Some(handle)));
        }
        Ok(IterableEpoch {
            source: Source::Workers {
                workers,
                turn: 0,
                stop,
            },
            allocator,
            next: 0,
            delivered: 0,
        })
    }
}

/// Up to `size` samples of `stream` written into one batch (`None` at the end of the
/// stream, or for a short last batch with `drop_last`).
fn next_batch(
    stream: &mut dyn Iterator<Item = Result<Vec<Tensor>>>,
    fields: &[Field],
    size: usize,
    drop_last: bool,
) -> Option<Result<Vec<Tensor>>> {
    let mut samples = Vec::with_capacity(size);
    for s in &mut *stream {
        match s {
            Ok(s) => samples.push(s),
            Err(e) => return Some(Err(e)),
        }
        if samples.len() == size {
            break;
        }
    }
    if samples.is_empty() || (drop_last && samples.len() < size) {
        return None;
    }
    Some(write_batch(&samples, fields))
}

/// One `[n, field…]` input tensor per field, each sample copied into its row.
fn write_batch(samples: &[Vec<Tensor>], fields: &[Field]) -> Result<Vec<Tensor>> {
    fields
        .iter()
        .enumerate()
        .map(|(k, f)| {
            let mut shape = vec![samples.len()];
            shape.extend_from_slice(&f.shape);
            let batch = allocating_as(Category::Input, || Tensor::empty(&shape, f.dtype))?;
            for (row, s) in samples.iter().enumerate() {
                let value = s.get(k).ok_or_else(|| {
                    DataError::argument(
                        "IterableDataset",
                        format!(
                            "a sample has {} tensors, the fields are {}",
                            s.len(),
                            fields.len()
                        ),
                    )
                })?;
                batch.select(0, row as i64)?.copy_(value)?;
            }
            Ok(batch)
        })
        .collect()
}

/// Batches built on the caller's thread.
struct Inline {
    dataset: Arc<dyn IterableDataset>,
    batch_size: usize,
    drop_last: bool,
    epoch: u64,
    stream: Option<Stream>,
    done: bool,
}

/// One stream worker: its batches and its thread, each taken when it has finished.
type StreamWorker = (
    Option<Receiver<Result<Vec<Tensor>>>>,
    Option<JoinHandle<()>>,
);

/// Where an epoch's batches come from.
enum Source {
    Inline(Inline),
    Workers {
        /// Each worker's batches and thread (taken when it is finished).
        workers: Vec<StreamWorker>,
        /// The worker whose batch comes next.
        turn: usize,
        stop: Arc<AtomicBool>,
    },
}

/// One pass over a stream: yields `Result<Batch>` (a batch's `indices` are its samples'
/// positions in the order delivered).
pub struct IterableEpoch {
    source: Source,
    allocator: Arc<dyn DeviceAllocator>,
    next: usize,
    /// Samples handed out so far.
    delivered: usize,
}

impl Iterator for IterableEpoch {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        let tensors = match &mut self.source {
            Source::Inline(inline) => {
                if inline.done {
                    return None;
                }
                let dataset = inline.dataset.clone();
                let fields = dataset.fields();
                let (size, drop_last, epoch) = (inline.batch_size, inline.drop_last, inline.epoch);
                let batch = with_allocator(&self.allocator, || {
                    let stream = inline
                        .stream
                        .get_or_insert_with(|| dataset.samples(0, 1, epoch));
                    next_batch(&mut **stream, &fields, size, drop_last)
                });
                if batch.is_none() {
                    inline.done = true;
                }
                batch?
            }
            Source::Workers { workers, turn, .. } => loop {
                if workers.iter().all(|(rx, _)| rx.is_none()) {
                    return None;
                }
                let w = *turn % workers.len();
                *turn += 1;
                let Some(rx) = &workers[w].0 else { continue };
                match rx.recv() {
                    Ok(b) => break b,
                    Err(_) => {
                        // Worker `w` has finished its shard.
                        workers[w].0 = None;
                        if let Some(h) = workers[w].1.take() {
                            let _ = h.join();
                        }
                    }
                }
            },
        };
        let index = self.next;
        self.next += 1;
        Some(tensors.map(|tensors| {
            let n = tensors
                .first()
                .map_or(0, |t| t.shape().first().copied().unwrap_or(0));
            let start = self.delivered;
            self.delivered += n;
            Batch {
                index,
                indices: (start..start + n).collect(),
                tensors,
            }
        }))
    }
}

impl Drop for IterableEpoch {
    fn drop(&mut self) {
        if let Source::Workers { workers, stop, .. } = &mut self.source {
            stop.store(true, Ordering::Relaxed);
            for (rx, handle) in workers.iter_mut() {
                // Dropping the receiver wakes a worker blocked on a full queue.
                drop(rx.take());
                if let Some(h) = handle.take() {
                    let _ = h.join();
                }
            }
        }
    }
}
