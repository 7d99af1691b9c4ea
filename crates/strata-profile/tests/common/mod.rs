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
