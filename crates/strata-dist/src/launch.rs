//! Starting ranks on one machine: the `mpirun` command line strata's two-process tests and
//! `scripts/train --nproc` use, and a wait that gives up after a bound instead of hanging.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `mpirun -np <np>` with the options a container on one machine needs (Debian 12's Open
/// MPI 4.1): more ranks than cores allowed (`--oversubscribe`), no core binding (each rank
/// runs its own compute threads), root allowed, shared memory without the cross-memory
/// attach that containers forbid, and loopback only for the runtime's own traffic. Append
/// the program and its arguments.
pub fn mpirun(np: usize) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.arg("-np")
        .arg(np.to_string())
        .args(["--oversubscribe", "--bind-to", "none"])
        .args(MPIRUN_ENV.iter().flat_map(|(name, _)| ["-x", name]))
        .envs(MPIRUN_ENV.iter().copied());
    cmd
}

/// The environment [`mpirun`] sets, and passes on to every rank.
pub const MPIRUN_ENV: [(&str, &str); 6] = [
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    ("OMPI_MCA_btl_vader_single_copy_mechanism", "none"),
    ("OMPI_MCA_btl", "self,vader,tcp"),
    ("OMPI_MCA_btl_tcp_if_include", "lo"),
    ("OMPI_MCA_oob_tcp_if_include", "lo"),
];

/// What a bounded run printed and how it ended.
#[derive(Debug)]
pub struct BoundedOutput {
    /// The exit status; `None` when the run was killed for taking longer than its bound.
    pub status: Option<ExitStatus>,
    /// Everything written to standard output.
    pub stdout: String,
    /// Everything written to standard error.
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

/// Runs `cmd` to its end, or kills it once `bound` has passed (so a job whose rank hangs in
/// a collective fails instead of hanging its caller).
pub fn run_bounded(cmd: &mut Command, bound: Duration) -> std::io::Result<BoundedOutput> {
    let start = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let out_reader = drain(child.stdout.take());
    let err_reader = drain(child.stderr.take());
    let status = wait_until(&mut child, start + bound)?;
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(BoundedOutput {
        status,
        stdout,
        stderr,
        elapsed: start.elapsed(),
    })
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut p) = pipe {
            let mut bytes = Vec::new();
            let _ = p.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

fn wait_until(child: &mut Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
