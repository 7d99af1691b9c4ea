//! The loader's worker threads: each takes batches from its own queue, builds them on the
//! allocator and under the scope of the thread that started them, and sends them back with
//! their batch number; the loader puts them back in order.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use strata_alloc::DeviceAllocator;
use strata_core::{scope, with_allocator, Tensor};

use super::collate::{panic_message, Collate};
use super::stop::watch_stop;
use crate::dataset::Dataset;
use crate::error::{DataError, Result};

/// One batch to build.
pub(super) struct Task {
    pub epoch: u64,
    pub batch: usize,
    pub indices: Vec<usize>,
}

/// One batch built (or why not).
pub(super) struct Done {
    pub epoch: u64,
    pub batch: usize,
    pub result: Result<Vec<Tensor>>,
}

/// What every worker shares.
pub(super) struct Shared {
    pub dataset: Arc<dyn Dataset>,
    pub collate: Arc<dyn Collate>,
    pub allocator: Arc<dyn DeviceAllocator>,
    pub scope: &'static str,
    pub seed: u64,
}

/// A pool of worker threads; dropping it stops them after the sample each is building (the
/// default collate checks between samples) and waits for them.
pub(super) struct Workers {
    tasks: Vec<Sender<Task>>,
    pub done: Receiver<Done>,
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts `n` workers.
    pub fn spawn(n: usize, shared: Shared) -> Result<Workers> {
        let shared = Arc::new(shared);
        let stop = Arc::new(AtomicBool::new(false));
        let (done_tx, done) = channel();
        let mut tasks = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        for w in 0..n {
            let (tx, rx) = channel::<Task>();
            let (shared, stop, done_tx) = (shared.clone(), stop.clone(), done_tx.clone());
            let (allocator, path) = (shared.allocator.clone(), shared.scope);
            let handle = spawn_in(
                format!("strata-data-worker-{w}"),
                allocator,
                path,
                move || {
                    watch_stop(stop.clone());
                    work(&shared, &rx, &done_tx, &stop)
                },
            )?;
            tasks.push(tx);
            handles.push(handle);
        }
        Ok(Workers {
            tasks,
            done,
            stop,
            handles,
        })
    }

    /// Hands `task` to worker `batch % n`, as PyTorch assigns batches.
    pub fn dispatch(&self, task: Task) -> Result<()> {
        let w = task.batch % self.tasks.len();
        self.tasks[w]
            .send(task)
            .map_err(|_| DataError::argument("DataLoader", format!("worker {w} has stopped")))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Closing the queues wakes idle workers; busy ones see `stop` after their batch.
        self.tasks.clear();
        for h in self.handles.drain(..) {
            // A worker's panics are caught per batch; a join error has nothing left to free.
            let _ = h.join();
        }
    }
}

/// Starts the thread `name` running `body` with every host allocation on `allocator` and
/// under the scope path `scope` (those of the thread that started the epoch).
pub(super) fn spawn_in(
    name: String,
    allocator: Arc<dyn DeviceAllocator>,
    scope: &'static str,
    body: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            with_allocator(&allocator, || {
                let _scope = (!scope.is_empty()).then(|| scope::enter(scope));
                body()
            })
        })
        .map_err(|e| DataError::argument("DataLoader", format!("cannot start {name}: {e}")))
}

/// A worker's loop: build each queued batch until the queue closes or the pool stops.
fn work(shared: &Shared, tasks: &Receiver<Task>, done: &Sender<Done>, stop: &AtomicBool) {
    while let Ok(task) = tasks.recv() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let built = catch_unwind(AssertUnwindSafe(|| {
            shared
                .collate
                .collate(&*shared.dataset, &task.indices, shared.seed, task.epoch)
        }));
        let result = built.unwrap_or_else(|panic| {
            Err(DataError::argument(
                "collate",
                format!("batch {} panicked: {}", task.batch, panic_message(&*panic)),
            ))
        });
        let reply = Done {
            epoch: task.epoch,
            batch: task.batch,
            result,
        };
        if done.send(reply).is_err() {
            break;
        }
    }
}
