//! DistributedDataParallel on two ranks: k steps with per-rank batch B/2 equal k steps of one
//! process with batch B visiting the same samples, for an MLP and an LSTM, with and without
//! bucket views, with `no_sync` accumulation; and its misuse errors.
#![cfg(feature = "mpi")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use strata_core::autocast::autocast;
use strata_core::autograd::checkpoint;
use strata_core::nn::functional::{cross_entropy, Reduction};
use strata_core::{manual_seed, DType, Result, Tensor};
use strata_data::{DistributedSampler, Sampler};
use strata_dist::{
    init_process_group, DdpOptions, DistributedDataParallel, ProcessGroup, ZeroRedundancyOptimizer,
};
use strata_nn::amp::GradScaler;
use strata_nn::module::shared;
use strata_nn::optim::{Adam, Optimizer, Sgd};
use strata_nn::{Linear, Module, ModuleCore, ReLU, RnnConfig, Sequential, LSTM};

const SAMPLES: usize = 37;
const FEATURES: usize = 12;
const CLASSES: usize = 3;
const BATCH: usize = 8;
/// Micro-batches in all: 4 global batches of 8 stay inside the 37 samples.
const MICRO_BATCHES: usize = 4;

fn mlp() -> Arc<dyn Module> {
    let m = Sequential::new()
        .append(Linear::new(FEATURES, 16, true).unwrap())
        .unwrap()
        .append(ReLU::new())
        .unwrap()
        .append(Linear::new(16, CLASSES, true).unwrap())
        .unwrap();
    shared(m)
}

/// Each sample as 4 steps of 3 features through LSTM(3, 8), the last output into a head.
struct Recurrent {
    core: ModuleCore,
    lstm: LSTM,
    head: Linear,
}

impl Module for Recurrent {
    fn core(&self) -> &ModuleCore {
        &self.core
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let b = x.shape()[0] as i64;
        let out = self.lstm.call(&x.reshape(&[b, 4, 3])?)?;
        self.head.call(&out.select(1, 3)?)
    }
}

/// A model with a layer its forward never uses.
struct WithUnused {
    core: ModuleCore,
    used: Linear,
}

impl Module for WithUnused {
    fn core(&self) -> &ModuleCore {
        &self.core
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.used.call(x)
    }
}

/// The mlp with its forward checkpointed: only the input is kept, the rest recomputed in
/// backward.
struct Checkpointed {
    core: ModuleCore,
    inner: Arc<dyn Module>,
}

impl Module for Checkpointed {
    fn core(&self) -> &ModuleCore {
        &self.core
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let inner = self.inner.clone();
        let out = checkpoint(
            move |xs| Ok(vec![inner.forward(&xs[0])?]),
            std::slice::from_ref(x),
        )?;
        Ok(out.into_iter().next().expect("one output"))
    }
}

fn checkpointed_mlp() -> Arc<dyn Module> {
    let core = ModuleCore::new("Checkpointed");
    let inner = mlp();
    core.register_dyn("inner", inner.clone()).unwrap();
    shared(Checkpointed { core, inner })
}

fn lstm() -> Arc<dyn Module> {
    let core = ModuleCore::new("Recurrent");
    let config = RnnConfig {
        batch_first: true,
        ..RnnConfig::default()
    };
    let lstm = LSTM::with_config(3, 8, config).unwrap();
    let head = Linear::new(8, CLASSES, true).unwrap();
    core.register_module("lstm", &lstm).unwrap();
    core.register_module("head", &head).unwrap();
    shared(Recurrent { core, lstm, head })
}

fn dataset() -> (Tensor, Tensor) {
    let x: Vec<f32> = (0..SAMPLES * FEATURES)
        .map(|i| ((i * 37 % 101) as f32 / 50.0 - 1.0) * if i % 3 == 0 { -1.0 } else { 1.0 })
        .collect();
    let y: Vec<i64> = (0..SAMPLES).map(|i| (i * 7 % CLASSES) as i64).collect();
    (
        Tensor::from_vec(x, &[SAMPLES, FEATURES]).unwrap(),
        Tensor::from_vec(y, &[SAMPLES]).unwrap(),
    )
}

fn rows(t: &Tensor, idx: &[usize]) -> Tensor {
    let i: Vec<i64> = idx.iter().map(|&i| i as i64).collect();
    t.index_select(0, &Tensor::from_vec(i, &[idx.len()]).unwrap())
        .unwrap()
}

fn loss(model: &dyn Module, data: &(Tensor, Tensor), idx: &[usize]) -> Tensor {
    let logits = model.call(&rows(&data.0, idx)).unwrap();
    cross_entropy(&logits, &rows(&data.1, idx), Reduction::Mean).unwrap()
}

fn sgd(model: &dyn Module) -> Optimizer {
    let config = Sgd {
        lr: 0.1,
        momentum: 0.9,
        ..Sgd::default()
    };
    Optimizer::sgd(model.parameters(), config).unwrap()
}

fn adam(params: Vec<Tensor>) -> Result<Optimizer> {
    let config = Adam {
        lr: 0.01,
        ..Adam::default()
    };
    Optimizer::adam(params, config)
}

/// The replica's optimizer: a plain one, or Adam sharded over the ranks.
enum Stepper {
    Plain(Optimizer),
    Zero(ZeroRedundancyOptimizer),
}

impl Stepper {
    fn step(&mut self) {
        match self {
            Stepper::Plain(o) => o.step().unwrap(),
            Stepper::Zero(z) => z.step().unwrap(),
        }
    }
    fn zero_grad(&mut self) {
        match self {
            Stepper::Plain(o) => o.zero_grad(true).unwrap(),
            Stepper::Zero(z) => z.zero_grad(true).unwrap(),
        }
    }
}

fn max_difference(a: &dyn Module, b: &dyn Module) -> f64 {
    a.parameters()
        .iter()
        .zip(b.parameters())
        .flat_map(|(p, q)| {
            let (p, q) = (p.to_vec::<f64>().unwrap(), q.to_vec::<f64>().unwrap());
            p.into_iter().zip(q).map(|(x, y)| (x - y).abs())
        })
        .fold(0.0, f64::max)
}

/// Trains a DDP replica and a one-process reference side by side for steps of
/// `micro` accumulated micro-batches; returns the largest parameter difference.
fn train_both(
    pg: &Arc<dyn ProcessGroup>,
    build: fn() -> Arc<dyn Module>,
    options: DdpOptions,
    micro: usize,
    zero: bool,
) -> f64 {
    let (rank, world) = (pg.rank(), pg.world_size());
    let data = dataset();
    manual_seed(100 + rank as u64); // each rank starts elsewhere: the broadcast must fix it
    let ddp = DistributedDataParallel::with_options(build(), pg.clone(), options).unwrap();
    manual_seed(100); // rank 0's start
    let reference = build();
    assert_eq!(
        max_difference(&ddp, reference.as_ref()),
        0.0,
        "rank 0's parameters everywhere"
    );
    let (mut opt, mut ref_opt) = if zero {
        let z = ZeroRedundancyOptimizer::new(ddp.parameters(), pg.clone(), adam).unwrap();
        let r = adam(reference.parameters()).unwrap();
        (Stepper::Zero(z), r)
    } else {
        (Stepper::Plain(sgd(&ddp)), sgd(reference.as_ref()))
    };
    let mine = DistributedSampler::new(SAMPLES, world, rank, true, 5, false)
        .unwrap()
        .indices(0);
    let all = DistributedSampler::new(SAMPLES, 1, 0, true, 5, false)
        .unwrap()
        .indices(0);
    let per_rank = BATCH / world;
    for step in 0..MICRO_BATCHES / micro {
        for m in 0..micro {
            let k = step * micro + m;
            let l = loss(&ddp, &data, &mine[k * per_rank..(k + 1) * per_rank]);
            if m + 1 < micro {
                let _local = ddp.no_sync();
                l.backward().unwrap();
            } else {
                l.backward().unwrap();
            }
            loss(reference.as_ref(), &data, &all[k * BATCH..(k + 1) * BATCH])
                .backward()
                .unwrap();
        }
        opt.step();
        ref_opt.step().unwrap();
        opt.zero_grad();
        ref_opt.zero_grad(true).unwrap();
    }
    if let Stepper::Zero(z) = &mut opt {
        check_shards(pg, z, &ddp, &ref_opt);
    }
    if options.gradient_as_bucket_view {
        // The next forward points every gradient back into its bucket.
        let _ = loss(&ddp, &data, &mine[..per_rank]);
        let params = ddp.parameters();
        assert!(params.iter().all(|p| p.grad().is_some()));
        let bytes: usize = params.iter().map(|p| p.nbytes()).sum();
        assert_eq!(
            ddp.bucket_bytes(),
            bytes,
            "the buckets are all the gradient memory"
        );
    }
    max_difference(&ddp, reference.as_ref())
}

/// Each rank holds Adam's state for exactly its own parameters; the state gathered on rank 0
/// is the one-process optimizer's, and that loads back sharded.
fn check_shards(
    pg: &Arc<dyn ProcessGroup>,
    z: &mut ZeroRedundancyOptimizer,
    ddp: &DistributedDataParallel,
    reference: &Optimizer,
) {
    let params = ddp.parameters();
    let own: usize = params
        .iter()
        .zip(z.owners())
        .filter(|(_, &r)| r == pg.rank())
        .map(|(p, _)| p.nbytes())
        .sum();
    assert_eq!(
        z.state_bytes(),
        2 * own,
        "exp_avg and exp_avg_sq of the owned parameters"
    );
    let whole = reference.state_dict();
    let gathered = z.consolidated_state_dict().unwrap();
    assert_eq!(gathered.is_some(), pg.rank() == 0);
    if let Some(g) = gathered {
        assert_eq!(g.keys(), whole.keys());
        assert_eq!(g.metadata("state"), whole.metadata("state"));
        for k in whole.keys() {
            let a = g.get(&k).unwrap().to_vec::<f64>().unwrap();
            let b = whole.get(&k).unwrap().to_vec::<f64>().unwrap();
            let d = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f64::max);
            assert!(d < 1e-5, "{k} differs by {d}");
        }
    }
    z.load_state_dict(&whole).unwrap();
    assert_eq!(z.state_bytes(), 2 * own);
}

#[test]
fn ddp_on_two_ranks_equals_one_process_with_the_whole_batch() {
    if !support::is_rank() {
        return support::run_ranks(
            "ddp_on_two_ranks_equals_one_process_with_the_whole_batch",
            2,
            Duration::from_secs(180),
        );
    }
    let pg: Arc<dyn ProcessGroup> = init_process_group().unwrap();
    let small_buckets = DdpOptions {
        bucket_cap_bytes: 300,
        ..DdpOptions::default()
    };
    for (name, build) in [("mlp", mlp as fn() -> Arc<dyn Module>), ("lstm", lstm)] {
        for as_view in [true, false] {
            for (options, micro) in [
                (DdpOptions::default(), 1),
                (small_buckets, 1),
                (small_buckets, 2),
            ] {
                let options = DdpOptions {
                    gradient_as_bucket_view: as_view,
                    ..options
                };
                let d = train_both(&pg, build, options, micro, false);
                assert!(
                    d < 1e-5,
                    "{name}, bucket views {as_view}, cap {} B, {micro} micro-batches: \
                     parameters differ by {d}",
                    options.bucket_cap_bytes
                );
            }
        }
    }

    // Activation checkpointing: the recomputed forward's gradients are averaged alike.
    let d = train_both(&pg, checkpointed_mlp, DdpOptions::default(), 2, false);
    assert!(d < 1e-5, "checkpointed mlp: parameters differ by {d}");

    // ZeRO: Adam's state sharded over the two ranks, the same training as one process.
    for (name, build) in [("mlp", mlp as fn() -> Arc<dyn Module>), ("lstm", lstm)] {
        let d = train_both(&pg, build, DdpOptions::default(), 1, true);
        assert!(d < 1e-5, "{name} with ZeRO: parameters differ by {d}");
    }

    // Inside no_sync the ranks' gradients stay their own; the next backward averages.
    let data = dataset();
    let ddp = DistributedDataParallel::new(mlp(), pg.clone()).unwrap();
    let first = |ddp: &DistributedDataParallel| {
        let g = ddp.parameters()[0].grad().unwrap().reshape(&[-1]).unwrap();
        let both = Tensor::zeros(&[2 * g.numel()], g.dtype()).unwrap();
        pg.all_gather_into_tensor(&both, &g).unwrap();
        let v = both.to_vec::<f32>().unwrap();
        let (a, b) = v.split_at(g.numel());
        (a.to_vec(), b.to_vec())
    };
    let mine: Vec<usize> = (pg.rank() * 4..pg.rank() * 4 + 4).collect();
    {
        let _local = ddp.no_sync();
        loss(&ddp, &data, &mine).backward().unwrap();
    }
    let (a, b) = first(&ddp);
    assert_ne!(a, b, "no_sync must not average");
    loss(&ddp, &data, &mine).backward().unwrap();
    let (a, b) = first(&ddp);
    assert_eq!(
        a, b,
        "a synchronised backward averages everything accumulated"
    );

    // GradScaler: an overflow on one rank reaches every rank through the average, so every
    // rank's scaler skips the same step and lowers its scale alike.
    let ddp = DistributedDataParallel::new(mlp(), pg.clone()).unwrap();
    let mut opt = sgd(&ddp);
    let mut scaler = GradScaler::new();
    let before: Vec<Vec<f32>> = ddp
        .parameters()
        .iter()
        .map(|p| p.to_vec().unwrap())
        .collect();
    let l = loss(&ddp, &data, &mine);
    let l = if pg.rank() == 1 {
        l.mul(f64::INFINITY).unwrap()
    } else {
        l
    };
    scaler.scale(&l).unwrap().backward().unwrap();
    assert!(
        !scaler.step(&mut opt).unwrap(),
        "rank {} stepped",
        pg.rank()
    );
    scaler.update().unwrap();
    let after: Vec<Vec<f32>> = ddp
        .parameters()
        .iter()
        .map(|p| p.to_vec().unwrap())
        .collect();
    assert_eq!(before, after);
    assert_eq!(scaler.get_scale(), 32768.0);
    opt.zero_grad(true).unwrap();

    // Autocast: a bf16 step leaves the ranks' parameters equal.
    {
        let _bf16 = autocast(DType::BF16).unwrap();
        loss(&ddp, &data, &mine).backward().unwrap();
    }
    opt.step().unwrap();
    let w = ddp.parameters()[0].reshape(&[-1]).unwrap();
    let both = Tensor::zeros(&[2 * w.numel()], w.dtype()).unwrap();
    pg.all_gather_into_tensor(&both, &w).unwrap();
    let v = both.to_vec::<f32>().unwrap();
    assert_eq!(v[..w.numel()], v[w.numel()..], "the replicas stay equal");
    assert_ne!(v[..w.numel()].to_vec(), before[0], "and they did step");

    // Buckets: reverse registration order, capped (12 + 192 + 64 bytes fit in 300, the
    // 768-byte first weight does not).
    let ddp = DistributedDataParallel::with_options(mlp(), pg.clone(), small_buckets).unwrap();
    assert_eq!(
        ddp.bucket_assignment(),
        vec![vec!["2.bias", "2.weight", "0.bias"], vec!["0.weight"]]
    );

    // A parameter that gets no gradient is named at the next forward.
    let core = ModuleCore::new("WithUnused");
    let used = Linear::new(FEATURES, CLASSES, true).unwrap();
    core.register_module("used", &used).unwrap();
    core.register_module("unused", &Linear::new(2, 2, true).unwrap())
        .unwrap();
    let ddp = DistributedDataParallel::new(shared(WithUnused { core, used }), pg.clone()).unwrap();
    let data = dataset();
    loss(&ddp, &data, &[0, 1]).backward().unwrap();
    let e = ddp.call(&rows(&data.0, &[0])).unwrap_err().to_string();
    assert!(
        e.contains("unused.weight") && e.contains("unused.bias"),
        "{e}"
    );
    pg.barrier().unwrap();
}
