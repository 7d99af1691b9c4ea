//! Errors that kernels and device waits meet where nothing can return them (the `Backend`
//! methods and storage locking cannot fail): the first one of the thread is kept here, and
//! the op that ran the kernel or took the lock takes it ([`take`]) and returns it, so it is
//! never lost and never surfaces in a later, unrelated op.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{Error, Result};

thread_local! {
    /// The first error of this thread that no op has reported yet.
    static FAILED: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// How many threads have an error waiting: while none has (always, on the CPU), [`take`]
/// is one load, which every op pays.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Keeps `e` for the op to report, unless an earlier error is still waiting.
pub(crate) fn fail(e: Error) {
    FAILED.with(|f| {
        let mut f = f.borrow_mut();
        if f.is_none() {
            *f = Some(e);
            WAITING.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Hands this thread's waiting error to the op, if there is one.
#[inline]
pub(crate) fn take() -> Result<()> {
    // A thread sees its own `fail` in the count (coherence of one atomic), so zero means
    // that this thread has nothing waiting.
    if WAITING.load(Ordering::Relaxed) == 0 {
        return Ok(());
    }
    take_waiting()
}

#[cold]
fn take_waiting() -> Result<()> {
    match FAILED.with(|f| f.borrow_mut().take()) {
        Some(e) => {
            WAITING.fetch_sub(1, Ordering::Relaxed);
            Err(e)
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_error_waits_for_the_op_and_is_taken_once() {
        assert!(take().is_ok());
        fail(Error::Unsupported {
            op: "first",
            message: String::new(),
        });
        fail(Error::Unsupported {
            op: "second",
            message: String::new(),
        });
        let e = take().unwrap_err().to_string();
        assert!(e.starts_with("first:"), "{e}");
        assert!(take().is_ok());
    }
}
