//! Tensors shared between threads: opposite-direction copies must not deadlock or tear, and
//! concurrent in-place writes must not lose updates.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::Duration;

use strata_core::{DType, Tensor};

/// `Tensor` can be moved to and shared between threads.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tensor>();
    assert_send_sync::<strata_core::storage::Storage>();
};

const N: usize = 4096;

/// Runs `f` on another thread and fails the test if it does not finish within `secs`
/// (a deadlock shows up as a timeout instead of a hung test run).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => handle.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The worker panicked: re-raise its panic.
            match handle.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not finish within {secs}s: deadlock?")
        }
    }
}

fn pattern(n: usize, seed: i64) -> Vec<i64> {
    (0..n as i64)
        .map(|i| seed * 1_000_000 + i * 7 + 3)
        .collect()
}

/// Which pattern every element of `v` holds, if all hold the same one.
fn classify(v: &[i64], a: &[i64], b: &[i64]) -> Option<char> {
    if v == a {
        Some('a')
    } else if v == b {
        Some('b')
    } else {
        None
    }
}

fn describe_torn(v: &[i64], a: &[i64], b: &[i64]) -> String {
    let from_a = v.iter().zip(a).filter(|(x, y)| x == y).count();
    let from_b = v.iter().zip(b).filter(|(x, y)| x == y).count();
    format!(
        "torn tensor: {from_a} elements from a's pattern, {from_b} from b's, {} from neither",
        v.len() - from_a - from_b
    )
}

/// Two writers copy in opposite directions (`a.copy_(&b)` and `b.copy_(&a)`), each also
/// resetting its own tensor to its original pattern every other iteration so the contents
/// keep changing; a reader checks that neither tensor is ever seen half-copied.
fn opposite_copies(a: Tensor, b: Tensor, iters: usize) {
    let n = a.numel();
    let (pa, pb) = (pattern(n, 1), pattern(n, 2));
    let shape = a.shape();
    let src_a = Tensor::from_vec(pa.clone(), &shape).unwrap();
    let src_b = Tensor::from_vec(pb.clone(), &shape).unwrap();
    a.copy_(&src_a).unwrap();
    b.copy_(&src_b).unwrap();
    let v0 = (a.version(), b.version());

    let barrier = Arc::new(Barrier::new(3));
    let done = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicUsize::new(0));

    // Each writer returns how many writes it made: at least `iters` iterations, and on until
    // the reader has finished one check, so that the reader always reads while copies run
    // (on a busy machine large copies could otherwise all finish before its first pass).
    let writer = |dst: Tensor, other: Tensor, own: Tensor| {
        let (barrier, checks) = (barrier.clone(), checks.clone());
        thread::spawn(move || {
            barrier.wait();
            let mut writes = 0u32;
            let mut i = 0;
            while i < iters || checks.load(Ordering::Relaxed) == 0 {
                dst.copy_(&other).unwrap();
                writes += 1;
                if i % 2 == 1 {
                    dst.copy_(&own).unwrap();
                    writes += 1;
                }
                i += 1;
            }
            writes
        })
    };
    let w1 = writer(a.clone(), b.clone(), src_a.clone());
    let w2 = writer(b.clone(), a.clone(), src_b.clone());
    let reader = {
        let (a, b, pa, pb) = (a.clone(), b.clone(), pa.clone(), pb.clone());
        let (barrier, done, checks) = (barrier.clone(), done.clone(), checks.clone());
        thread::spawn(move || {
            barrier.wait();
            while !done.load(Ordering::Acquire) {
                for t in [&a, &b] {
                    let v = t.to_vec::<i64>().unwrap();
                    assert!(
                        classify(&v, &pa, &pb).is_some(),
                        "{}",
                        describe_torn(&v, &pa, &pb)
                    );
                }
                checks.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let writes_a = w1.join().unwrap();
    let writes_b = w2.join().unwrap();
    done.store(true, Ordering::Release);
    reader.join().unwrap();

    for t in [&a, &b] {
        let v = t.to_vec::<i64>().unwrap();
        assert!(
            classify(&v, &pa, &pb).is_some(),
            "{}",
            describe_torn(&v, &pa, &pb)
        );
    }
    // Every copy counts as one write of its destination.
    if a.shares_storage(&b) {
        assert_eq!(a.version(), v0.0 + writes_a + writes_b);
        assert_eq!(b.version(), a.version());
    } else {
        assert_eq!(a.version(), v0.0 + writes_a);
        assert_eq!(b.version(), v0.1 + writes_b);
    }
    assert!(checks.load(Ordering::Relaxed) > 0);
}

#[test]
fn opposite_direction_copies_between_two_storages_finish_untorn() {
    within(120, "opposite copies", || {
        let a = Tensor::zeros(&[N], DType::I64).unwrap();
        let b = Tensor::zeros(&[N], DType::I64).unwrap();
        opposite_copies(a, b, 3000);
    });
}

#[test]
fn opposite_direction_copies_with_conversion_finish_untorn() {
    // 2-d, one side transposed and the other f64: the copies go through the strided,
    // converting path.
    within(120, "opposite strided converting copies", || {
        let a = Tensor::zeros(&[64, 64], DType::I64).unwrap().t().unwrap();
        let b = Tensor::zeros(&[64, 64], DType::F64).unwrap();
        opposite_copies(a, b, 2000);
    });
}

#[test]
fn opposite_direction_copies_between_disjoint_halves_of_one_storage() {
    within(120, "opposite copies within one storage", || {
        let s = Tensor::zeros(&[2 * N], DType::I64).unwrap();
        let a = s.narrow(0, 0, N).unwrap();
        let b = s.narrow(0, N as i64, N).unwrap();
        opposite_copies(a, b, 3000);
    });
}

#[test]
fn opposite_direction_copies_between_interleaved_views_of_one_storage() {
    // Even and odd elements: disjoint but not dense, so overlap cannot be ruled out cheaply.
    within(120, "opposite copies between interleaved views", || {
        let s = Tensor::zeros(&[2 * N], DType::I64).unwrap();
        let a = s.slice(0, Some(0), None, 2).unwrap();
        let b = s.slice(0, Some(1), None, 2).unwrap();
        assert_eq!((a.numel(), b.numel()), (N, N));
        opposite_copies(a, b, 3000);
    });
}

#[test]
fn opposite_direction_copies_of_large_tensors_use_the_pool_without_deadlock() {
    // Above the grain size the kernel runs on strata's pool; two callers at once must not
    // wait on each other.
    within(240, "large opposite copies", || {
        let a = Tensor::zeros(&[1 << 16], DType::I64).unwrap();
        let b = Tensor::zeros(&[1 << 16], DType::I64).unwrap();
        opposite_copies(a, b, 60);
    });
}

#[test]
fn concurrent_add_on_disjoint_views_loses_no_update() {
    within(120, "disjoint add_", || {
        const THREADS: usize = 8;
        const ITERS: usize = 500;
        let s = Tensor::zeros(&[THREADS, 512], DType::I64).unwrap();
        let rows: Vec<Tensor> = (0..THREADS)
            .map(|k| s.select(0, k as i64).unwrap())
            .collect();
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = rows
            .into_iter()
            .enumerate()
            .map(|(k, row)| {
                let barrier = barrier.clone();
                thread::spawn(move || {
                    let inc = Tensor::full(&[512], (k + 1) as i64, DType::I64).unwrap();
                    barrier.wait();
                    for _ in 0..ITERS {
                        row.add_(&inc).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let v = s.to_vec::<i64>().unwrap();
        for k in 0..THREADS {
            let want = ((k + 1) * ITERS) as i64;
            assert!(
                v[k * 512..(k + 1) * 512].iter().all(|&x| x == want),
                "row {k}: expected {want}, got {:?}",
                &v[k * 512..k * 512 + 8]
            );
        }
        assert_eq!(s.version() as usize, THREADS * ITERS);
    });
}

#[test]
fn concurrent_add_on_interleaved_views_loses_no_update() {
    within(120, "interleaved add_", || {
        const THREADS: usize = 6;
        const ITERS: usize = 400;
        let s = Tensor::zeros(&[THREADS * 700], DType::I64).unwrap();
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|k| {
                let view = s.slice(0, Some(k as i64), None, THREADS).unwrap();
                let barrier = barrier.clone();
                thread::spawn(move || {
                    barrier.wait();
                    for _ in 0..ITERS {
                        view.add_scalar_((k + 1) as i64).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let v = s.to_vec::<i64>().unwrap();
        for (i, &x) in v.iter().enumerate() {
            assert_eq!(x, ((i % THREADS + 1) * ITERS) as i64, "element {i}");
        }
        assert_eq!(s.version() as usize, THREADS * ITERS);
    });
}

#[test]
fn concurrent_add_on_one_shared_tensor_is_exact() {
    // Every thread adds to the same tensor; each add_ is a read-modify-write that must not
    // interleave with another.
    within(120, "shared add_", || {
        const THREADS: usize = 8;
        const ITERS: usize = 300;
        let s = Tensor::zeros(&[N], DType::I64).unwrap();
        let src = Tensor::arange(N, DType::I64).unwrap();
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (s, src, barrier) = (s.clone(), src.clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    for _ in 0..ITERS {
                        s.add_(&src).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let total = (THREADS * ITERS) as i64;
        let v = s.to_vec::<i64>().unwrap();
        for (i, &x) in v.iter().enumerate() {
            assert_eq!(x, i as i64 * total, "element {i}");
        }
        assert_eq!(s.version() as usize, THREADS * ITERS);
        assert_eq!(src.version(), 0, "reading does not count as a write");
    });
}

#[test]
fn views_can_be_made_and_dropped_on_many_threads() {
    // Handles are cloned, viewed and dropped concurrently; the storage stays alive while any
    // view does and the data stays intact.
    within(120, "view churn", || {
        let s = Tensor::arange(N, DType::I64)
            .unwrap()
            .view(&[64, 64])
            .unwrap();
        let handles: Vec<_> = (0..8)
            .map(|k| {
                let s = s.clone();
                thread::spawn(move || {
                    let mut kept = Vec::new();
                    for i in 0..500usize {
                        let v = s.t().unwrap().select(0, ((i + k) % 64) as i64).unwrap();
                        let got = v.to_vec::<i64>().unwrap();
                        let col = ((i + k) % 64) as i64;
                        assert!(got
                            .iter()
                            .enumerate()
                            .all(|(r, &x)| x == r as i64 * 64 + col));
                        if i % 50 == 0 {
                            kept.push(v);
                        }
                    }
                    kept
                })
            })
            .collect();
        drop(s);
        let kept: Vec<Tensor> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        for v in &kept {
            assert_eq!(v.numel(), 64);
            let base = v.base().expect("a view remembers its base");
            assert_eq!(
                base.to_vec::<i64>().unwrap(),
                (0..N as i64).collect::<Vec<_>>()
            );
        }
    });
}
