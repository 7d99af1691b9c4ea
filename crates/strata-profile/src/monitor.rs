//! Memory sampled on a background thread, for the shape of a run over time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use strata_core::{memory, Device};

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorSample {
    /// Time since the monitor started.
    pub elapsed: Duration,
    /// Allocated bytes.
    pub allocated: usize,
    /// Reserved bytes.
    pub reserved: usize,
}

/// Samples a device's allocated and reserved memory every `interval` on a thread of its own
/// until stopped (the guides' `MemoryMonitor`).
///
/// ```
/// use std::time::Duration;
/// use strata_profile::MemoryMonitor;
/// use strata_core::Device;
/// let monitor = MemoryMonitor::start(Device::Cpu, Duration::from_millis(1))?;
/// std::thread::sleep(Duration::from_millis(20));
/// let samples = monitor.stop();
/// assert!(!samples.is_empty());
/// # Ok::<(), strata_profile::ProfileError>(())
/// ```
pub struct MemoryMonitor {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<MonitorSample>>>,
    thread: Option<JoinHandle<()>>,
}

fn sample(device: Device, origin: Instant) -> Option<MonitorSample> {
    Some(MonitorSample {
        elapsed: origin.elapsed(),
        allocated: memory::memory_allocated(device).ok()?,
        reserved: memory::memory_reserved(device).ok()?,
    })
}

impl MemoryMonitor {
    /// Starts sampling `device` every `interval` (a first sample is taken at once).
    pub fn start(device: Device, interval: Duration) -> crate::Result<MemoryMonitor> {
        let origin = Instant::now();
        let first = sample(device, origin);
        memory::memory_allocated(device)?;
        let samples = Arc::new(Mutex::new(first.into_iter().collect::<Vec<_>>()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Acquire) {
                std::thread::sleep(interval);
                if let Some(x) = sample(device, origin) {
                    s.lock().unwrap_or_else(|p| p.into_inner()).push(x);
                }
            }
        });
        Ok(MemoryMonitor {
            stop,
            samples,
            thread: Some(thread),
        })
    }

    /// The samples so far.
    pub fn samples(&self) -> Vec<MonitorSample> {
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The largest allocated bytes sampled so far.
    pub fn peak_allocated(&self) -> usize {
        self.samples()
            .iter()
            .map(|s| s.allocated)
            .max()
            .unwrap_or(0)
    }

    /// Stops sampling and gives every sample.
    pub fn stop(mut self) -> Vec<MonitorSample> {
        self.halt();
        self.samples()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MemoryMonitor {
    fn drop(&mut self) {
        self.halt();
    }
}
