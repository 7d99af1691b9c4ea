//! A soak run: the mlp trained for thousands of steps (about a minute) while the allocator's
//! allocated and reserved bytes and the process's resident memory are sampled after every
//! step. After the first epoch (warm-up) nothing may grow: allocated and reserved bytes stay
//! exactly where they are, the leak and graph watches find nothing, and resident memory
//! grows by at most 16 MiB over the rest of the run.

use std::path::PathBuf;

use strata::core::{memory, Device};
use strata_cli::train::{train, ModelKind, Progress, TrainOptions};

/// What is sampled after each step, from the second epoch on.
#[derive(Default)]
struct Samples {
    epoch: usize,
    allocated: Vec<usize>,
    reserved: Vec<usize>,
    resident: Vec<usize>,
}

/// The process's resident bytes (the second field of `/proc/self/statm`, in pages).
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm's resident pages");
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * usize::try_from(page).expect("a page size")
}

impl Progress for Samples {
    fn epoch_started(&mut self, epoch: usize, _: usize, _: usize) {
        self.epoch = epoch;
    }
    fn batch_done(&mut self, _: Option<f32>, _: f64, allocated: usize, _: usize) {
        if self.epoch < 2 {
            return;
        }
        self.allocated.push(allocated);
        let reserved = memory::memory_reserved(Device::Cpu).expect("reserved bytes");
        self.reserved.push(reserved);
        self.resident.push(resident_bytes());
    }
}

fn span(v: &[usize]) -> (usize, usize) {
    (
        v.iter().copied().min().unwrap_or(0),
        v.iter().copied().max().unwrap_or(0),
    )
}

#[test]
fn thousands_of_steps_leave_memory_flat_after_warm_up() {
    let o = TrainOptions {
        model: ModelKind::Mlp,
        epochs: 20,
        batch_size: 32,
        workers: 0,
        prefetch: None,
        data_dir: PathBuf::from("/usr/share/datasets/fashion-mnist"),
        train_samples: Some(8192),
        test_samples: Some(512),
        ..TrainOptions::default()
    };
    let mut samples = Samples::default();
    let report = train(&o, &mut samples).expect("the soak run trains");
    let steps = samples.allocated.len();
    assert_eq!(
        steps,
        19 * 256,
        "every step after the first epoch is sampled"
    );
    let (allocated, reserved) = (span(&samples.allocated), span(&samples.reserved));
    let first = samples.resident[0];
    let last_max = span(&samples.resident).1;
    println!(
        "{steps} steps after warm-up: allocated {allocated:?}, reserved {reserved:?}, resident \
         {first} at the start and at most {last_max} after"
    );
    assert_eq!(
        allocated.0, allocated.1,
        "allocated bytes moved: {allocated:?}"
    );
    assert_eq!(reserved.0, reserved.1, "reserved bytes moved: {reserved:?}");
    assert!(
        report.watch_findings.is_empty(),
        "the watches found: {:?}",
        report.watch_findings
    );
    assert!(
        last_max <= first + (16 << 20),
        "resident memory grew from {first} to {last_max} bytes"
    );
}
