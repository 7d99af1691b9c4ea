//! strata's own thread pool: kernels run here, never on the caller's pool.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Runs `piece(0..pieces)`, each exactly once, on the calling thread together with the
/// pool's workers as they come free, and returns when all have run.
///
/// The calling thread never waits for a worker to wake up: it claims pieces itself from
/// the first one, and a worker that starts late finds fewer (or none) left. So a loop of a
/// few microseconds runs in no more than the caller's own time plus the cost of posting the
/// workers' jobs, and in a share of it when the workers are awake; a pool hand-off that
/// blocks the caller until sleeping workers have woken costs more than such a loop.
pub(crate) fn spread(pieces: usize, piece: &(dyn Fn(usize) + Sync)) {
    let helpers = num_threads()
        .saturating_sub(1)
        .min(pieces.saturating_sub(1));
    if helpers == 0 {
        (0..pieces).for_each(piece);
        return;
    }
    let shared = std::sync::Arc::new(Spread {
        next: AtomicUsize::new(0),
        // Pieces are claimed a few at a time: eight claims per thread balance the load,
        // and tiny pieces (a pooled plane) do not make every claim a contended one.
        claim: pieces.div_ceil((helpers + 1) * 8),
        done: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
        pieces,
        piece: erase(piece),
    });
    for _ in 0..helpers {
        let shared = shared.clone();
        pool().spawn(move || shared.work());
    }
    shared.work();
    // Pieces still running on workers were claimed moments ago and are short: spin.
    while shared.done.load(Ordering::Acquire) < pieces {
        std::hint::spin_loop();
    }
    if shared.panicked.load(Ordering::Relaxed) {
        panic!("a kernel panicked on strata's thread pool");
    }
}

/// The closure's pointer without its lifetime, for the workers' `'static` jobs.
fn erase<'a>(piece: &'a (dyn Fn(usize) + Sync)) -> *const (dyn Fn(usize) + Sync + 'static) {
    let p: *const (dyn Fn(usize) + Sync + 'a) = piece;
    // SAFETY: only the lifetime changes (same pointer and vtable). The pointer is
    // dereferenced only by a thread that claimed a piece, and `spread` returns only once
    // every claimed piece has finished, so the closure outlives every use.
    unsafe { std::mem::transmute(p) }
}

/// The state [`spread`] shares with the workers it posts jobs to.
struct Spread {
    /// The next unclaimed piece.
    next: AtomicUsize,
    /// Pieces taken per claim.
    claim: usize,
    /// Pieces finished.
    done: AtomicUsize,
    /// Whether a piece panicked on a worker.
    panicked: AtomicBool,
    pieces: usize,
    piece: *const (dyn Fn(usize) + Sync),
}

// SAFETY: `piece` points to a `Sync` closure, called only while `spread` waits for it.
unsafe impl Send for Spread {}
// SAFETY: as above; the counters are atomics.
unsafe impl Sync for Spread {}

impl Spread {
    /// Claims and runs pieces, [`Spread::claim`] at a time, until none is left.
    fn work(&self) {
        loop {
            let first = self.next.fetch_add(self.claim, Ordering::Relaxed);
            if first >= self.pieces {
                return;
            }
            let claimed = first..(first + self.claim).min(self.pieces);
            let count = claimed.len();
            // SAFETY: these pieces were claimed, so `spread` is still waiting and the
            // closure lives.
            let piece = unsafe { &*self.piece };
            let run = std::panic::AssertUnwindSafe(|| claimed.for_each(piece));
            if std::panic::catch_unwind(run).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(count, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{pool, spread};

    /// Every piece runs exactly once, whatever the count, from the caller and from inside
    /// the pool (where the caller is itself a worker).
    #[test]
    fn every_piece_runs_once() {
        for pieces in [0, 1, 2, 3, 7, 64, 1000, 4099] {
            let hits: Vec<AtomicUsize> = (0..pieces).map(|_| AtomicUsize::new(0)).collect();
            spread(pieces, &|k| {
                hits[k].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{pieces}"
            );
            pool().install(|| {
                spread(pieces, &|k| {
                    hits[k].fetch_add(1, Ordering::Relaxed);
                })
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 2),
                "{pieces}"
            );
        }
    }

    /// A piece that panics makes the call panic, once every claimed piece has finished
    /// (the pieces claimed with it are skipped), instead of leaving it waiting.
    #[test]
    fn a_panicking_piece_panics_the_caller() {
        let ran = AtomicUsize::new(0);
        let result = std::panic::catch_unwind(|| {
            spread(64, &|k| {
                ran.fetch_add(1, Ordering::Relaxed);
                assert_ne!(k, 63, "piece 63 fails");
            })
        });
        assert!(result.is_err());
        assert!(ran.load(Ordering::Relaxed) >= 1);
    }
}
