//! Running a test of this binary on two ranks: the outer test starts `mpirun -np 2` on this
//! same executable, filtered to the same test; inside, the test finds itself a rank and runs
//! its body.

use std::time::Duration;

use strata_dist::launch::{mpirun, run_bounded};

/// Whether this process is a rank started by `mpirun` (Open MPI tells each its rank).
pub fn is_rank() -> bool {
    std::env::var_os("OMPI_COMM_WORLD_RANK").is_some()
}

/// Runs test `name` of this binary on `np` ranks and fails with their output unless every
/// rank passed within `bound`.
pub fn run_ranks(name: &str, np: usize, bound: Duration) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = mpirun(np);
    cmd.arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"]);
    let out = run_bounded(&mut cmd, bound).expect("starting mpirun (is Open MPI installed?)");
    let passed = out.status.is_some_and(|s| s.success());
    assert!(
        passed,
        "{name} on {np} ranks {} after {:.1} s\n--- stdout\n{}\n--- stderr\n{}",
        match out.status {
            Some(s) => format!("ended with {s}"),
            None => "was killed: it ran past its bound".to_string(),
        },
        out.elapsed.as_secs_f64(),
        out.stdout,
        out.stderr
    );
    let ran = out.stdout.matches("1 passed").count();
    assert_eq!(
        ran, np,
        "every rank must have run the test:\n{}",
        out.stdout
    );
}
