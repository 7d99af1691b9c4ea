//! The loader: batches in sampler order for any worker count, the same random draws for any
//! worker count, failures in their place, bounded input memory with a lagging consumer, and
//! everything freed when an epoch is left early.

use std::sync::Arc;
use std::time::Duration;

use strata_alloc::{AllocatorConfig, CachingAllocator, Category, DeviceAllocator, HostBacking};
use strata_core::{with_allocator, DType, Tensor};
use strata_data::{
    DataError, DataLoader, Dataset, Field, LoaderOptions, RandomSampler, SampleContext,
    TensorDataset,
};

type Caching = CachingAllocator<HostBacking>;

fn caching() -> (Arc<Caching>, Arc<dyn DeviceAllocator>) {
    let c = Arc::new(CachingAllocator::with_config(
        HostBacking::new(),
        AllocatorConfig::default(),
    ));
    let a: Arc<dyn DeviceAllocator> = c.clone();
    (c, a)
}

fn input_bytes(c: &Caching) -> usize {
    c.memory_stats().category_bytes.get(Category::Input).current as usize
}

/// 103 samples: an i64 index and three f32 features derived from it.
fn numbers() -> Arc<dyn Dataset> {
    let ids = Tensor::arange(103, DType::I64).unwrap();
    let feats = Tensor::arange(309, DType::F32)
        .unwrap()
        .view(&[103, 3])
        .unwrap();
    Arc::new(TensorDataset::new(vec![ids, feats]).unwrap())
}

fn options(workers: usize) -> LoaderOptions {
    LoaderOptions {
        batch_size: 8,
        shuffle: true,
        seed: 5,
        num_workers: workers,
        ..LoaderOptions::default()
    }
}

/// Every batch of one epoch as (indices, ids, features).
fn epoch_of(loader: &mut DataLoader) -> Vec<(Vec<usize>, Vec<i64>, Vec<f32>)> {
    loader
        .epoch()
        .unwrap()
        .map(|b| {
            let b = b.unwrap();
            let ids = b.tensors[0].to_vec::<i64>().unwrap();
            let feats = b.tensors[1].to_vec::<f32>().unwrap();
            (b.indices, ids, feats)
        })
        .collect()
}

#[test]
fn batches_come_in_sampler_order_for_any_worker_count() {
    let want_order: Vec<usize> = {
        use strata_data::Sampler;
        RandomSampler::new(103, 5).indices(0)
    };
    let mut runs = Vec::new();
    for workers in [0, 1, 3] {
        let mut loader = DataLoader::new(numbers(), options(workers)).unwrap();
        assert_eq!(loader.len(), 13);
        let batches = epoch_of(&mut loader);
        let order: Vec<usize> = batches.iter().flat_map(|b| b.0.clone()).collect();
        assert_eq!(order, want_order, "{workers} workers");
        for (indices, ids, feats) in &batches {
            let as_ids: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
            assert_eq!(ids, &as_ids);
            let want: Vec<f32> = indices
                .iter()
                .flat_map(|&i| (0..3).map(move |k| (3 * i + k) as f32))
                .collect();
            assert_eq!(feats, &want);
        }
        runs.push(batches);
    }
    assert_eq!(runs[0], runs[1]);
    assert_eq!(runs[0], runs[2]);
}

#[test]
fn epochs_reshuffle_and_persistent_workers_give_the_same_epochs() {
    let mut fresh = DataLoader::new(numbers(), options(2)).unwrap();
    let mut kept = DataLoader::new(
        numbers(),
        LoaderOptions {
            persistent_workers: true,
            ..options(2)
        },
    )
    .unwrap();
    let (a0, a1) = (epoch_of(&mut fresh), epoch_of(&mut fresh));
    let (b0, b1) = (epoch_of(&mut kept), epoch_of(&mut kept));
    assert_ne!(a0, a1);
    assert_eq!((a0, a1), (b0, b1));
}

#[test]
fn an_epoch_started_mid_way_gives_the_batches_an_uninterrupted_run_gives_there() {
    // What a resumed run relies on: epoch 1 from batch 5, in a fresh loader, is the
    // uninterrupted loader's epoch 1 from batch 5, for any worker count.
    let mut whole = DataLoader::new(numbers(), options(2)).unwrap();
    let _ = epoch_of(&mut whole);
    let want = epoch_of(&mut whole);
    for workers in [0, 2] {
        let mut resumed = DataLoader::new(numbers(), options(workers)).unwrap();
        resumed.set_epoch(1);
        assert_eq!(resumed.next_epoch(), 1);
        let rest: Vec<_> = resumed
            .epoch_from(5)
            .unwrap()
            .map(|b| {
                let b = b.unwrap();
                (b.index, b.tensors[0].to_vec::<i64>().unwrap())
            })
            .collect();
        assert_eq!(rest.len(), want.len() - 5, "{workers} workers");
        for (k, (index, ids)) in rest.iter().enumerate() {
            assert_eq!(*index, k + 5);
            assert_eq!(ids, &want[k + 5].1);
        }
        // The epoch after it is epoch 2, as in the uninterrupted run.
        assert_eq!(resumed.next_epoch(), 2);
    }
    let mut loader = DataLoader::new(numbers(), options(0)).unwrap();
    assert_eq!(loader.epoch_from(13).unwrap().count(), 0);
    let err = loader.epoch_from(14).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("past the end")));
}

/// Each sample draws noise from its own generator.
struct Noisy;

impl Dataset for Noisy {
    fn len(&self) -> usize {
        50
    }
    fn fields(&self) -> Vec<Field> {
        vec![Field::new("noise", &[4], DType::F32)]
    }
    fn write(&self, _: usize, out: &[Tensor], ctx: &mut SampleContext) -> strata_data::Result<()> {
        let v: Vec<f32> = (0..4).map(|_| ctx.generator.next_f32()).collect();
        out[0].copy_(&Tensor::from_vec(v, &[4])?)?;
        Ok(())
    }
}

#[test]
fn random_draws_are_the_same_for_any_worker_count() {
    let draws = |workers| {
        let mut loader = DataLoader::new(
            Arc::new(Noisy),
            LoaderOptions {
                batch_size: 3,
                num_workers: workers,
                seed: 11,
                ..LoaderOptions::default()
            },
        )
        .unwrap();
        let mut epochs = Vec::new();
        for _ in 0..2 {
            let e: Vec<Vec<f32>> = loader
                .epoch()
                .unwrap()
                .map(|b| b.unwrap().tensors[0].to_vec::<f32>().unwrap())
                .collect();
            epochs.push(e);
        }
        epochs
    };
    let zero = draws(0);
    assert_ne!(zero[0], zero[1], "each epoch draws anew");
    assert_eq!(zero, draws(1));
    assert_eq!(zero, draws(3));
}

/// Fails at sample 13 with an error and at sample 29 with a panic.
struct Faulty;

impl Dataset for Faulty {
    fn len(&self) -> usize {
        40
    }
    fn fields(&self) -> Vec<Field> {
        vec![Field::new("x", &[], DType::I64)]
    }
    fn write(&self, i: usize, out: &[Tensor], _: &mut SampleContext) -> strata_data::Result<()> {
        match i {
            13 => Err(DataError::Sample {
                index: i,
                message: "unreadable record".into(),
            }),
            29 => panic!("corrupt sample"),
            _ => {
                out[0].fill_(i as i64)?;
                Ok(())
            }
        }
    }
}

#[test]
fn failed_samples_are_errors_in_their_place_and_the_rest_still_come() {
    for workers in [0, 3] {
        let mut loader = DataLoader::new(
            Arc::new(Faulty),
            LoaderOptions {
                batch_size: 4,
                num_workers: workers,
                ..LoaderOptions::default()
            },
        )
        .unwrap();
        let results: Vec<_> = loader.epoch().unwrap().collect();
        assert_eq!(results.len(), 10);
        for (b, r) in results.iter().enumerate() {
            match (b, r) {
                (3, Err(e)) => {
                    let e = e.to_string();
                    assert!(e.contains("sample 13") && e.contains("unreadable"), "{e}");
                }
                (7, Err(e)) => {
                    let e = e.to_string();
                    assert!(
                        e.contains("sample 29") && e.contains("corrupt sample"),
                        "{e}"
                    );
                }
                (_, Ok(batch)) => {
                    let want: Vec<i64> = (4 * b as i64..4 * b as i64 + 4).collect();
                    assert_eq!(batch.tensors[0].to_vec::<i64>().unwrap(), want);
                }
                (_, other) => panic!("{workers} workers, batch {b}: {other:?}"),
            }
        }
    }
}

/// 64 samples of 256 f32 (1 KiB each); batches of 4 are 4 KiB.
struct Rows;

impl Dataset for Rows {
    fn len(&self) -> usize {
        64
    }
    fn fields(&self) -> Vec<Field> {
        vec![Field::new("row", &[256], DType::F32)]
    }
    fn write(&self, i: usize, out: &[Tensor], _: &mut SampleContext) -> strata_data::Result<()> {
        out[0].fill_(i as f64)?;
        Ok(())
    }
}

#[test]
fn a_lagging_consumer_holds_at_most_the_bound_plus_one_batch() {
    const BATCH_BYTES: usize = 4 * 256 * 4;
    let (c, a) = caching();
    let opts = LoaderOptions {
        batch_size: 4,
        num_workers: 2,
        prefetch_factor: Some(2),
        ..LoaderOptions::default()
    };
    let mut loader = DataLoader::new(Arc::new(Rows), opts).unwrap().allocator(a);
    assert_eq!(loader.in_flight_bound(), 4);
    let mut most = 0;
    let mut epoch = loader.epoch().unwrap();
    while let Some(batch) = epoch.next() {
        let batch = batch.unwrap();
        // The consumer lags: the workers fill the bound meanwhile and then wait.
        std::thread::sleep(Duration::from_millis(5));
        assert!(epoch.in_flight() <= 4);
        most = most.max(input_bytes(&c));
        drop(batch);
    }
    assert!(
        most <= (4 + 1) * BATCH_BYTES,
        "{most} input bytes alive at once, the bound is {}",
        5 * BATCH_BYTES
    );
    assert!(
        most > BATCH_BYTES,
        "batches were built ahead ({most} bytes)"
    );
}

#[test]
fn leaving_an_epoch_early_stops_the_workers_and_frees_every_batch() {
    let (c, a) = caching();
    let before = c.memory_allocated();
    {
        let mut loader = DataLoader::new(
            Arc::new(Rows),
            LoaderOptions {
                batch_size: 4,
                num_workers: 3,
                ..LoaderOptions::default()
            },
        )
        .unwrap()
        .allocator(a);
        let mut epoch = loader.epoch().unwrap();
        let first = epoch.next().unwrap().unwrap();
        let second = epoch.next().unwrap().unwrap();
        assert_eq!(second.tensors[0].to_vec::<f32>().unwrap()[0], 4.0);
        drop((first, second));
        drop(epoch);
        // The workers have been joined: nothing of this epoch is left to arrive.
        assert_eq!(input_bytes(&c), 0);
    }
    assert_eq!(c.memory_allocated(), before);
    assert_eq!(input_bytes(&c), 0);
}

#[test]
fn workers_allocate_where_the_epoch_was_started() {
    let (c, a) = caching();
    let mut loader = DataLoader::new(
        Arc::new(Rows),
        LoaderOptions {
            batch_size: 4,
            num_workers: 2,
            ..LoaderOptions::default()
        },
    )
    .unwrap();
    with_allocator(&a, || {
        let _scope = strata_core::scope::enter("data");
        let mut epoch = loader.epoch().unwrap();
        let batch = epoch.next().unwrap().unwrap();
        assert!(input_bytes(&c) >= 4 * 256 * 4);
        // The worker allocated the batch under the scope the epoch was started in.
        let by_scope = c.live_allocations_by(strata_alloc::Grouping::Scope);
        let data = by_scope.iter().find(|g| g.key == "data");
        assert!(data.is_some_and(|g| g.bytes >= 4 * 256 * 4), "{by_scope:?}");
        drop(batch);
    });
    assert_eq!(input_bytes(&c), 0);
}

#[test]
fn settings_pytorch_refuses_are_errors() {
    let bad = |o: LoaderOptions| DataLoader::new(numbers(), o).err().map(|e| e.to_string());
    let prefetch = bad(LoaderOptions {
        prefetch_factor: Some(2),
        ..LoaderOptions::default()
    });
    assert!(prefetch
        .unwrap()
        .contains("prefetch_factor needs worker threads"));
    let persistent = bad(LoaderOptions {
        persistent_workers: true,
        ..LoaderOptions::default()
    });
    assert!(persistent.unwrap().contains("persistent_workers"));
    assert!(bad(LoaderOptions {
        batch_size: 0,
        ..LoaderOptions::default()
    })
    .is_some());
    let with_sampler = DataLoader::with_sampler(
        numbers(),
        Arc::new(RandomSampler::new(103, 0)),
        LoaderOptions {
            shuffle: true,
            ..LoaderOptions::default()
        },
    );
    assert!(with_sampler.is_err());
}

#[test]
fn augmented_epochs_are_the_same_for_any_worker_count() {
    use strata_data::transform::{Compose, RandomCrop, RandomHorizontalFlip, Transformed};
    let images = Tensor::rand(&[30, 1, 6, 6], DType::F32).unwrap();
    let labels = Tensor::arange(30, DType::I64).unwrap();
    let base: Arc<dyn Dataset> = Arc::new(TensorDataset::new(vec![images, labels]).unwrap());
    let augment = Compose(vec![
        Arc::new(RandomCrop { padding: 2 }),
        Arc::new(RandomHorizontalFlip { p: 0.5 }),
    ]);
    let data: Arc<dyn Dataset> =
        Arc::new(Transformed::new(base.clone(), 0, Arc::new(augment)).unwrap());
    assert!(Transformed::new(base, 1, Arc::new(RandomCrop { padding: 1 })).is_err());
    let run = |workers| {
        let mut loader = DataLoader::new(
            data.clone(),
            LoaderOptions {
                batch_size: 4,
                shuffle: true,
                num_workers: workers,
                seed: 9,
                ..LoaderOptions::default()
            },
        )
        .unwrap();
        (0..2)
            .map(|_| {
                loader
                    .epoch()
                    .unwrap()
                    .map(|b| b.unwrap().tensors[0].to_vec::<f32>().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    let zero = run(0);
    assert_ne!(zero[0], zero[1]);
    assert_eq!(zero, run(1));
    assert_eq!(zero, run(3));
}

#[test]
fn pinned_batches_are_built_in_pinned_memory_whose_blocks_are_reused() {
    let mut loader = DataLoader::new(
        Arc::new(Rows),
        LoaderOptions {
            batch_size: 4,
            num_workers: 2,
            prefetch_factor: Some(2),
            pin_memory: true,
            ..LoaderOptions::default()
        },
    )
    .unwrap();
    let mut batches = 0;
    for _ in 0..2 {
        for b in loader.epoch().unwrap() {
            let b = b.unwrap();
            assert!(b.tensors[0].is_pinned());
            batches += 1;
        }
    }
    assert_eq!(batches, 32);
    let s = strata_core::memory::host_memory_stats();
    assert_eq!(s["active_requests.current"], 0, "{s:?}");
    // At most the bound (4) plus the batch held plus one on its way back were alive at once;
    // every other batch reused a cached block.
    assert!(s["allocations.peak"] <= 6, "{s:?}");
    assert_eq!(s["num_host_alloc"], s["allocations.peak"], "{s:?}");
    strata_core::memory::empty_host_cache();
    assert_eq!(
        strata_core::memory::host_memory_stats()["allocations.current"],
        0
    );
}

#[test]
fn prefetch_stages_depth_batches_ahead_of_the_consumer() {
    use std::cell::RefCell;
    use strata_data::Prefetch;
    for depth in [1usize, 2] {
        let mut loader = DataLoader::new(
            Arc::new(Rows),
            LoaderOptions {
                batch_size: 8,
                ..LoaderOptions::default()
            },
        )
        .unwrap();
        let staged = RefCell::new(Vec::new());
        let stage = |b: strata_data::Batch| {
            staged.borrow_mut().push(b.index);
            Ok(b)
        };
        let mut it = Prefetch::new(loader.epoch().unwrap(), depth, stage).unwrap();
        let mut seen = Vec::new();
        while let Some(b) = it.next() {
            let b = b.unwrap();
            // Handed batch k, the prefetcher has staged k+1 ..= k+depth already (8 batches).
            let ahead = *staged.borrow().last().unwrap();
            assert_eq!(ahead, (b.index + depth).min(7), "depth {depth}");
            assert!(it.staged() <= depth);
            seen.push(b.index);
        }
        assert_eq!(seen, (0..8).collect::<Vec<_>>());
    }
    let mut loader = DataLoader::new(Arc::new(Rows), LoaderOptions::default()).unwrap();
    assert!(Prefetch::new(loader.epoch().unwrap(), 3, Ok).is_err());
}

#[test]
fn a_stage_is_told_when_each_batch_is_handed_out_after_staging_it() {
    use strata_data::{Batch, Prefetch, Stage};
    /// Records what happened, in order, as a device copy stage would see it.
    struct Log(Vec<String>);
    impl Stage for Log {
        fn stage(&mut self, b: Batch) -> strata_data::Result<Batch> {
            self.0.push(format!("stage {}", b.index));
            Ok(b)
        }
        fn ready(&mut self, b: &Batch) -> strata_data::Result<()> {
            self.0.push(format!("ready {}", b.index));
            Ok(())
        }
    }
    let mut loader = DataLoader::new(
        Arc::new(Rows),
        LoaderOptions {
            batch_size: 16,
            ..LoaderOptions::default()
        },
    )
    .unwrap();
    let mut it = Prefetch::new(loader.epoch().unwrap(), 1, Log(Vec::new())).unwrap();
    let mut handed = Vec::new();
    for b in it.by_ref() {
        handed.push(b.unwrap().index);
    }
    assert_eq!(handed, [0, 1, 2, 3]);
    // Batch k is made ready as it leaves, and k+1 is staged before the caller's step on k
    // runs: the copy of k+1 overlaps that step.
    let log = it.into_stage().0;
    assert_eq!(
        log,
        ["stage 0", "ready 0", "stage 1", "ready 1", "stage 2", "ready 2", "stage 3", "ready 3"]
    );
}

/// Sleeps 20 ms per sample and counts the samples started.
struct Slow(std::sync::atomic::AtomicUsize);

impl Dataset for Slow {
    fn len(&self) -> usize {
        200
    }
    fn fields(&self) -> Vec<Field> {
        vec![Field::new("x", &[], DType::I64)]
    }
    fn write(&self, i: usize, out: &[Tensor], _: &mut SampleContext) -> strata_data::Result<()> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        out[0].fill_(i as i64)?;
        Ok(())
    }
}

#[test]
fn leaving_an_epoch_stops_workers_between_samples_not_batches() {
    use std::sync::atomic::Ordering::SeqCst;
    let data = Arc::new(Slow(Default::default()));
    let mut loader = DataLoader::new(
        data.clone(),
        LoaderOptions {
            batch_size: 10,
            num_workers: 2,
            prefetch_factor: Some(2),
            ..LoaderOptions::default()
        },
    )
    .unwrap();
    let mut epoch = loader.epoch().unwrap();
    assert_eq!(epoch.next().unwrap().unwrap().indices.len(), 10);
    drop(epoch);
    let started = data.0.load(SeqCst);
    // Four batches (40 samples) were in flight when the epoch was left; the workers stopped
    // after their current samples instead of finishing them all.
    assert!(started < 10 + 40, "{started} samples were started");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(data.0.load(SeqCst), started, "no worker is still running");
}

/// The numbers `0..n`, sharded by position: shard `s` of `k` reads `s, s+k, s+2k, …`.
struct Counting {
    n: i64,
}

impl strata_data::IterableDataset for Counting {
    fn fields(&self) -> Vec<Field> {
        vec![Field::new("x", &[], DType::I64)]
    }
    fn samples(&self, shard: usize, shards: usize, _: u64) -> strata_data::Stream {
        let n = self.n;
        Box::new((shard as i64..n).step_by(shards).map(|i| {
            Ok(vec![Tensor::scalar(i, DType::I64).map_err(DataError::from)?])
        }))
    }
}

#[test]
fn streams_are_sharded_over_workers_and_batches_come_in_turn() {
    use strata_data::IterableLoader;
    let batches = |workers: usize, drop_last: bool| {
        let mut loader = IterableLoader::new(
            Arc::new(Counting { n: 23 }),
            LoaderOptions {
                batch_size: 4,
                num_workers: workers,
                drop_last,
                ..LoaderOptions::default()
            },
        )
        .unwrap();
        loader
            .epoch()
            .unwrap()
            .map(|b| b.unwrap().tensors[0].to_vec::<i64>().unwrap())
            .collect::<Vec<_>>()
    };
    let inline = batches(0, false);
    assert_eq!(inline.len(), 6);
    assert_eq!(inline[5], vec![20, 21, 22]);
    assert_eq!(batches(0, true).len(), 5);
    // Two workers: shard 0 is the even numbers, shard 1 the odd ones; batches alternate.
    let two = batches(2, false);
    assert_eq!(two[0], vec![0, 2, 4, 6]);
    assert_eq!(two[1], vec![1, 3, 5, 7]);
    let mut all: Vec<i64> = two.concat();
    all.sort_unstable();
    assert_eq!(all, (0..23).collect::<Vec<_>>());
    assert!(IterableLoader::new(
        Arc::new(Counting { n: 3 }),
        LoaderOptions {
            shuffle: true,
            ..LoaderOptions::default()
        }
    )
    .is_err());
}
