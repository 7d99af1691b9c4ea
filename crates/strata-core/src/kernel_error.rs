//! Errors that kernels and device waits meet where nothing can return them (the `Backend`
//! methods and storage locking cannot fail): the first one of the thread is kept here, and
//! the op that ran the kernel or took the lock takes it ([`take`]) and returns it, so it is
//! never lost and never surfaces in a later, unrelated op.

use std::cell::RefCell;

use crate::{Error, Result};

thread_local! {
    /// The first error of this thread that no op has reported yet.
    static FAILED: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// Keeps `e` for the op to report, unless an earlier error is still waiting.
pub(crate) fn fail(e: Error) {
    FAILED.with(|f| {
        f.borrow_mut().get_or_insert(e);
    });
}

/// Hands this thread's waiting error to the op, if there is one.
pub(crate) fn take() -> Result<()> {
    match FAILED.with(|f| f.borrow_mut().take()) {
        Some(e) => Err(e),
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
