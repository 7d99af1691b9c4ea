//! The communication thread: Open MPI's non-blocking collectives progress only inside MPI
//! calls, so, as PyTorch's `ProcessGroupMPI`, one thread per process initialises MPI and
//! then runs the collectives handed to it, blocking, in the order they were handed over.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;

use mpi::topology::Communicator;
use mpi::Threading;
use strata_core::{Error, Result};

use super::ffi;
use crate::error::DistError;
use crate::work::{Completion, Work};

type Job = Box<dyn FnOnce() -> Result<()> + Send>;

/// The thread and its queue. Dropping it finishes the queued collectives, then finalises MPI
/// on the thread that initialised it.
pub(crate) struct CommThread {
    jobs: Mutex<Option<Sender<(Job, Completion)>>>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

/// Rank and world size as MPI reported them.
pub(crate) struct Membership {
    pub rank: usize,
    pub world_size: usize,
}

impl CommThread {
    /// Starts the thread, which initialises MPI; the membership MPI reports.
    pub(crate) fn start() -> Result<(CommThread, Membership)> {
        let (jobs_tx, jobs_rx) = channel::<(Job, Completion)>();
        let (ready_tx, ready_rx) = channel::<std::result::Result<Membership, DistError>>();
        let handle = std::thread::Builder::new()
            .name("strata-mpi".into())
            .spawn(move || {
                let Some((universe, provided)) =
                    mpi::initialize_with_threading(Threading::Funneled)
                else {
                    let _ = ready_tx.send(Err(DistError::Group {
                        op: "init_process_group",
                        message: "MPI was already initialised in this process, and it can \
                                  be initialised only once. Hint: create one process group \
                                  at the start of the program and share it"
                            .into(),
                    }));
                    return;
                };
                if provided < Threading::Funneled {
                    let _ = ready_tx.send(Err(DistError::Group {
                        op: "init_process_group",
                        message: format!(
                            "this MPI library provides only the thread level {provided:?}; \
                             strata runs collectives on a thread of their own and needs \
                             Funneled"
                        ),
                    }));
                    return;
                }
                if let Err(e) = ffi::return_errors() {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
                let world = universe.world();
                let membership = Membership {
                    rank: usize::try_from(world.rank()).unwrap_or(0),
                    world_size: usize::try_from(world.size()).unwrap_or(1),
                };
                if ready_tx.send(Ok(membership)).is_err() {
                    return;
                }
                while let Ok((job, done)) = jobs_rx.recv() {
                    let started = std::time::Instant::now();
                    let outcome = catch_unwind(AssertUnwindSafe(job)).unwrap_or_else(|_| {
                        Err(Error::from(
                            "a collective panicked on the communication thread".to_string(),
                        ))
                    });
                    done.finish(outcome, started.elapsed());
                }
                drop(universe);
            })
            .map_err(|e| DistError::Group {
                op: "init_process_group",
                message: format!("could not start the communication thread: {e}"),
            })?;
        let membership = ready_rx.recv().map_err(|_| DistError::Group {
            op: "init_process_group",
            message: "the communication thread stopped while initialising MPI".into(),
        });
        let membership = match membership {
            Ok(Ok(m)) => m,
            Ok(Err(e)) | Err(e) => {
                let _ = handle.join();
                return Err(e.into());
            }
        };
        Ok((
            CommThread {
                jobs: Mutex::new(Some(jobs_tx)),
                handle: Mutex::new(Some(handle)),
            },
            membership,
        ))
    }

    /// Queues `job` behind every collective queued before it.
    pub(crate) fn submit(
        &self,
        op: &'static str,
        job: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Result<Work> {
        let (work, done) = Work::pending();
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let sent = jobs
            .as_ref()
            .map(|tx| tx.send((Box::new(job), done)).is_ok())
            .unwrap_or(false);
        if !sent {
            return Err(DistError::Group {
                op,
                message: "the communication thread has stopped (the process group was shut \
                          down or a collective before this one failed fatally)"
                    .into(),
            }
            .into());
        }
        Ok(work)
    }
}

impl Drop for CommThread {
    fn drop(&mut self) {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
    }
}
