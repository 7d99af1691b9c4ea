//! What the diagnostics' tests share: a small model, and one test at a time.

use std::sync::{Mutex, MutexGuard};

use strata_nn::module::shared;
use strata_nn::{Linear, ReLU, Sequential};

/// The observer, live memory and the live graph are process-wide: one test at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Linear(inputs, hidden), ReLU, Linear(hidden, outputs).
pub fn mlp(inputs: usize, hidden: usize, outputs: usize) -> strata_core::Result<Sequential> {
    let m = Sequential::new();
    m.push(shared(Linear::new(inputs, hidden, true)?))?;
    m.push(shared(ReLU::new()))?;
    m.push(shared(Linear::new(hidden, outputs, true)?))?;
    Ok(m)
}

/// The line of `source` (a test file's `include_str!`) that contains `marker`, 1-based;
/// lines that call this function are skipped.
#[allow(dead_code)] // used by the tests that check a finding's source line
pub fn line_of(source: &str, marker: &str) -> usize {
    source
        .lines()
        .position(|l| l.contains(marker) && !l.contains("line_of("))
        .map_or(0, |i| i + 1)
}
