//! N one-element adds in a loop, the program `scripts/count-instructions` runs under
//! cachegrind to count what one op costs (the difference between two counts of N divided by
//! the difference in N, so start-up cancels out). With nothing listening, as in a plain
//! training loop: no watch, profiler or history recording.
//!
//! Two patterns, which the allocator serves differently:
//! - `dropped` (the default): each sum is dropped before the next add, so its block is the
//!   one the next add gets back;
//! - `replaced`: `c = a + b` replaces a sum that is still alive while the next is made, so
//!   two blocks alternate.
//!
//! Run with `cargo run --release --example one_element_adds -- 100000 [dropped|replaced]`.

use strata::prelude::*;

fn main() -> strata::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = match args.next() {
        Some(a) => a
            .parse()
            .map_err(|_| strata::Error::from(format!("not a count of adds: {a}")))?,
        None => 100_000,
    };
    let replaced = match args.next().as_deref() {
        None | Some("dropped") => false,
        Some("replaced") => true,
        Some(other) => {
            return Err(strata::Error::from(format!(
                "unknown pattern {other}: use dropped or replaced"
            )))
        }
    };
    let a = Tensor::ones(&[1], DType::F32)?;
    let b = Tensor::ones(&[1], DType::F32)?;
    let mut c = a.add(&b)?;
    for _ in 1..n {
        if replaced {
            c = a.add(&b)?;
        } else {
            drop(c);
            c = a.add(&b)?;
        }
    }
    assert_eq!(c.item::<f32>()?, 2.0);
    Ok(())
}
