//! The handle of an asynchronous collective: wait for it, or ask whether it has finished
//! (c10d's `Work`).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use strata_core::Result;

#[derive(Default)]
struct State {
    outcome: Mutex<Option<Result<()>>>,
    elapsed: Mutex<Option<Duration>>,
    done: Condvar,
}

/// A collective that was handed to the communication thread. Dropping the handle does not
/// cancel it: the operation still runs, in order, and its buffers stay locked until it has.
#[derive(Clone)]
pub struct Work {
    state: Arc<State>,
}

/// The side of a [`Work`] that the communication thread completes.
pub(crate) struct Completion {
    state: Option<Arc<State>>,
}

impl Work {
    /// A pending handle and the completion that finishes it.
    pub(crate) fn pending() -> (Work, Completion) {
        let state = Arc::new(State::default());
        (
            Work {
                state: state.clone(),
            },
            Completion { state: Some(state) },
        )
    }

    /// A handle that has already finished with `outcome`.
    pub fn completed(outcome: Result<()>) -> Work {
        let (w, c) = Work::pending();
        c.finish(outcome, Duration::ZERO);
        w
    }

    /// Blocks until the operation has finished; its error, if it failed (every wait on the
    /// same operation returns the same result).
    pub fn wait(&self) -> Result<()> {
        let mut outcome = self.state.outcome.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = outcome.as_ref() {
                return r.clone();
            }
            outcome = self
                .state
                .done
                .wait(outcome)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// How long the operation itself ran (on the communication thread, from its start to its
    /// end, not counting the time it waited in the queue); `None` until it has finished.
    pub fn elapsed(&self) -> Option<Duration> {
        *self.state.elapsed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the operation has finished (successfully or not), without blocking.
    pub fn is_completed(&self) -> bool {
        self.state
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("completed", &self.is_completed())
            .finish()
    }
}

impl Completion {
    /// Records the outcome and how long the operation ran, and wakes every waiter.
    pub(crate) fn finish(mut self, outcome: Result<()>, elapsed: Duration) {
        if let Some(state) = self.state.take() {
            *state.elapsed.lock().unwrap_or_else(|p| p.into_inner()) = Some(elapsed);
            *state.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
            state.done.notify_all();
        }
    }
}

impl Drop for Completion {
    /// An operation dropped before it ran (its thread stopped) fails rather than leaving
    /// its waiters blocked forever.
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            *state.outcome.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Err(strata_core::Error::from(
                    "the communication thread stopped before this operation ran".to_string(),
                )));
            state.done.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_on_another_thread_sees_the_outcome() {
        let (w, c) = Work::pending();
        assert!(!w.is_completed());
        let waiter = {
            let w = w.clone();
            std::thread::spawn(move || w.wait())
        };
        c.finish(
            Err(strata_core::Error::from("broken".to_string())),
            Duration::from_millis(3),
        );
        assert!(waiter.join().unwrap().is_err());
        assert!(w.is_completed());
        assert_eq!(w.elapsed(), Some(Duration::from_millis(3)));
        assert!(w.wait().is_err(), "every wait returns the same outcome");
    }

    #[test]
    fn an_operation_that_never_ran_fails_instead_of_hanging() {
        let (w, c) = Work::pending();
        drop(c);
        assert!(w.wait().is_err());
    }
}
