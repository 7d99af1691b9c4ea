//! N one-element adds in a loop, the program `scripts/count-instructions` runs under
//! cachegrind to count what one op costs (the difference between two counts of N divided by
//! the difference in N, so start-up cancels out). With nothing listening, as in a plain
//! training loop: no watch, profiler or history recording.
//!
//! Run with `cargo run --release --example one_element_adds -- 100000`.

use strata::prelude::*;

fn main() -> strata::Result<()> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|_| strata::Error::from(format!("not a count of adds: {a}")))?,
        None => 100_000,
    };
    let a = Tensor::ones(&[1], DType::F32)?;
    let b = Tensor::ones(&[1], DType::F32)?;
    let mut c = a.add(&b)?;
    for _ in 1..n {
        c = a.add(&b)?;
    }
    assert_eq!(c.item::<f32>()?, 2.0);
    Ok(())
}
