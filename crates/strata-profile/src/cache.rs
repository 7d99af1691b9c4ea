//! `empty_cache` called in a loop.

use std::sync::Mutex;

use strata_core::Device;

use crate::finding::{Finding, FindingKind};
use crate::format::bytes;
use crate::hub::{Listener, Listening};

#[derive(Debug, Clone, Copy)]
struct Call {
    released: usize,
    reserved_after: usize,
}

struct Recorder(Mutex<Vec<(Device, Call)>>);

impl Listener for Recorder {
    fn cache_emptied(&self, device: Device, released: usize, reserved_after: usize) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push((
            device,
            Call {
                released,
                reserved_after,
            },
        ));
    }
}

/// Watches calls to `empty_cache`. Emptying the cache inside a training loop frees nothing
/// for good: the next step reserves the same segments again, paying the system allocator
/// each time. The report says how much was reserved again after each call.
///
/// ```
/// use strata_profile::EmptyCacheWatch;
/// use strata_core::{memory, DType, Device, Tensor};
/// let watch = EmptyCacheWatch::start();
/// for _ in 0..4 {
///     let x = Tensor::on(Device::Meta).zeros(&[1 << 20], DType::F32)?;
///     drop(x);
///     memory::empty_cache(Device::Meta)?;
/// }
/// assert!(watch.report().is_some());
/// # Ok::<(), strata_core::Error>(())
/// ```
pub struct EmptyCacheWatch(Listening<Recorder>);

impl EmptyCacheWatch {
    /// Starts watching.
    pub fn start() -> EmptyCacheWatch {
        EmptyCacheWatch(Listening::start(Recorder(Mutex::new(Vec::new()))))
    }

    /// Bytes reserved again between consecutive calls on each device (one entry per call
    /// after the first).
    pub fn reserved_again(&self) -> Vec<(Device, usize)> {
        let calls = self.0.listener.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for (i, (d, c)) in calls.iter().enumerate() {
            if let Some((_, prev)) = calls[..i].iter().rev().find(|(pd, _)| pd == d) {
                let before = c.released + c.reserved_after;
                out.push((*d, before.saturating_sub(prev.reserved_after)));
            }
        }
        out
    }

    /// A finding when `empty_cache` ran at least 3 times and the cache was filled again
    /// after every call but the last.
    pub fn report(&self) -> Option<Finding> {
        let again = self.reserved_again();
        let calls = again.len() + 1;
        if calls < 3 || again.iter().any(|(_, b)| *b == 0) {
            return None;
        }
        let total: usize = again.iter().map(|(_, b)| b).sum();
        let avg = total / again.len();
        Some(Finding::new(
            FindingKind::EmptyCacheInLoop,
            format!(
                "empty_cache was called {calls} times, and after each call {} on average was \
                 reserved again before the next ({} in all): the cache refills every step, so \
                 each call only makes the next step ask the system for memory again. Remove \
                 the call from the loop (call it once after, if another program needs the \
                 memory)",
                bytes(avg),
                bytes(total)
            ),
        ))
    }
}
