//! strata's own thread pool: kernels run here, never on the caller's pool.

use std::sync::OnceLock;

/// Elements below which a loop runs on the calling thread (PyTorch's grain size).
pub const GRAIN_SIZE: usize = 32 * 1024;

/// The pool kernels run on. Its size is `STRATA_NUM_THREADS` when set to a positive number,
/// else the machine's available parallelism.
pub fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::env::var("STRATA_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("strata-kernel-{i}"))
            .build()
            .or_else(|_| rayon::ThreadPoolBuilder::new().num_threads(1).build())
            .expect("a one-thread pool can always be built")
    })
}

/// Number of threads kernels use.
pub fn num_threads() -> usize {
    pool().current_num_threads()
}
