//! Times `all_reduce` (sum, f32, in place) through strata's MPI process group on each size
//! given, for `scripts/bench-dist`, which alternates it with the same call made by MPI's own
//! Python bindings. Run under `mpirun`; rank 0 prints `<MiB> <seconds>` per timed call.
//!
//! ```sh
//! mpirun -np 2 target/release/examples/allreduce_bench 1 16 64
//! ```

use std::time::Instant;

use strata_core::{DType, Result, Tensor};
use strata_dist::{init_process_group, ProcessGroup, ReduceOp};

/// Untimed calls before the timed one, per size.
const WARMUP: usize = 2;

fn main() -> Result<()> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .map_err(|_| strata_core::Error::from(format!("{a:?} is not a size in MiB")))
        })
        .collect::<Result<_>>()?;
    let group = init_process_group()?;
    for mib in sizes {
        let t = Tensor::ones(&[mib << 18], DType::F32)?;
        for _ in 0..WARMUP {
            group.all_reduce(&t, ReduceOp::Sum)?;
        }
        group.barrier()?;
        let start = Instant::now();
        group.all_reduce(&t, ReduceOp::Sum)?;
        let secs = start.elapsed().as_secs_f64();
        if group.rank() == 0 {
            println!("{mib} {secs:.9}");
        }
    }
    group.barrier()
}
