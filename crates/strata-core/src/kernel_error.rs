//! Errors that kernels and device waits meet where nothing can return them (the `Backend`
//! methods and storage locking cannot fail): the first one of the thread is kept here, and
//! the op that ran the kernel or took the lock takes it ([`take`]) and returns it, so it is
//! never lost and never surfaces in a later, unrelated op.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{Error, Result};

/// The first error of a thread that no op has reported yet. An error still here when the
/// thread exits leaves [`WAITING`] with it: otherwise the count would stay raised for good, and
/// every op of every thread would look for an error it does not have.
struct Failed(RefCell<Option<Error>>);

impl Drop for Failed {
    fn drop(&mut self) {
        if self.0.get_mut().take().is_some() {
            WAITING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

thread_local! {
    /// This thread's unreported error.
    static FAILED: Failed = const { Failed(RefCell::new(None)) };
}

/// How many threads have an error waiting: while none has (always, on the CPU), [`take`]
/// is one load, which every op pays.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Keeps `e` for the op to report, unless an earlier error is still waiting.
pub(crate) fn fail(e: Error) {
    FAILED.with(|f| {
        let mut f = f.0.borrow_mut();
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
    match FAILED.with(|f| f.0.borrow_mut().take()) {
        Some(e) => {
            WAITING.fetch_sub(1, Ordering::Relaxed);
            Err(e)
        }
        None => Ok(()),
    }
}

/// Serialises the tests that raise [`WAITING`], so that one can read the count while no other
/// has an error waiting.
#[cfg(test)]
pub(crate) static TEST_SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        TEST_SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn an_error_left_on_an_exiting_thread_leaves_the_count() {
        let _serial = serial();
        assert_eq!(WAITING.load(Ordering::Relaxed), 0);
        std::thread::spawn(|| {
            fail(Error::Unsupported {
                op: "left",
                message: String::new(),
            });
            assert_eq!(WAITING.load(Ordering::Relaxed), 1);
        })
        .join()
        .unwrap();
        // The thread's error went with it: ops are back to one load.
        assert_eq!(WAITING.load(Ordering::Relaxed), 0);
        assert!(take().is_ok());
    }

    #[test]
    fn the_first_error_waits_for_the_op_and_is_taken_once() {
        let _serial = serial();
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
