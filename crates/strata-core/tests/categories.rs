//! Memory categories at the peak of an MLP training step with Adam: every live byte is
//! counted under what it holds. One test in this file, so no other test's graph is alive in
//! the process while it reads autograd's saved storages.

use std::collections::HashSet;
use std::sync::Arc;

use strata_alloc::{AllocatorConfig, CachingAllocator, Category, DeviceAllocator, HostBacking};
use strata_core::autograd::{no_grad, saved_storages};
use strata_core::nn::functional::{cross_entropy, linear, Reduction};
use strata_core::{with_allocator, DType, Result, Tensor};

/// Every buffer here is under 1 MiB, so the allocator hands out blocks of exactly the
/// request rounded up to 512 bytes.
fn block(bytes: usize) -> i64 {
    bytes.div_ceil(512) as i64 * 512
}

fn blocks<'a>(ts: impl IntoIterator<Item = &'a Tensor>) -> i64 {
    ts.into_iter().map(|t| block(t.storage_nbytes())).sum()
}

struct Adam {
    params: Vec<Tensor>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    t: i32,
}

impl Adam {
    fn new(params: Vec<Tensor>) -> Result<Adam> {
        let state = |p: &Tensor| -> Result<Tensor> {
            let s = Tensor::zeros(&p.shape(), p.dtype())?;
            s.mark_category(Category::OptimizerState);
            Ok(s)
        };
        let m = params.iter().map(state).collect::<Result<_>>()?;
        let v = params.iter().map(state).collect::<Result<_>>()?;
        Ok(Adam { params, m, v, t: 0 })
    }

    fn step(&mut self) -> Result<()> {
        self.t += 1;
        let (b1, b2, lr, eps) = (0.9f64, 0.999f64, 1e-3, 1e-8);
        let (c1, c2) = (1.0 - b1.powi(self.t), 1.0 - b2.powi(self.t));
        no_grad(|| -> Result<()> {
            for ((p, m), v) in self.params.iter().zip(&self.m).zip(&self.v) {
                let Some(g) = p.grad() else { continue };
                m.mul_(b1)?.add_scaled_(&g, 1.0 - b1)?;
                v.mul_(b2)?.add_scaled_(&g.mul(&g)?, 1.0 - b2)?;
                let denom = v.div(c2)?.sqrt()?.add(eps)?;
                p.sub_(&m.div(&denom)?.mul(lr / c1)?)?;
            }
            Ok(())
        })
    }

    fn zero_grad(&self) -> Result<()> {
        self.params.iter().try_for_each(|p| p.zero_grad(false))
    }
}

#[test]
fn every_live_byte_of_a_training_step_is_counted_under_what_it_holds() -> Result<()> {
    let caching = Arc::new(CachingAllocator::with_config(
        HostBacking::new(),
        AllocatorConfig::default(),
    ));
    let allocator: Arc<dyn DeviceAllocator> = caching.clone();
    with_allocator(&allocator, || -> Result<()> {
        let shapes: [&[usize]; 6] = [&[256, 784], &[256], &[128, 256], &[128], &[10, 128], &[10]];
        let params = shapes
            .iter()
            .map(|s| {
                let p = Tensor::randn(s, DType::F32)?
                    .mul(0.05)?
                    .requires_grad_(true)?;
                p.mark_category(Category::Parameter);
                Ok(p)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut adam = Adam::new(params.clone())?;
        let x = Tensor::randn(&[64, 784], DType::F32)?;
        let labels: Vec<i64> = (0..64).map(|i| i % 10).collect();
        let y = Tensor::from_vec(labels, &[64])?;
        x.mark_category(Category::Input);
        y.mark_category(Category::Input);
        let category = |c: Category| caching.memory_stats().category_bytes.get(c).current;

        for step in 0..2 {
            let h1 = linear(&x, &params[0], Some(&params[1]))?.relu()?;
            let h2 = linear(&h1, &params[2], Some(&params[3]))?.relu()?;
            let loss = cross_entropy(
                &linear(&h2, &params[4], Some(&params[5]))?,
                &y,
                Reduction::Mean,
            )?;
            drop((h1, h2));

            // The forward is done and the graph holds every activation: the step's peak.
            let weights = blocks(&params);
            assert_eq!(category(Category::Parameter), weights);
            assert_eq!(category(Category::OptimizerState), 2 * weights);
            let grads: Vec<Tensor> = params.iter().filter_map(Tensor::grad).collect();
            assert_eq!(grads.len(), if step == 0 { 0 } else { params.len() });
            assert_eq!(category(Category::Gradient), blocks(&grads));
            assert_eq!(category(Category::Input), blocks([&x, &y]));
            let marked: HashSet<u64> = params
                .iter()
                .chain([&x, &y])
                .map(Tensor::storage_id)
                .collect();
            let activations: i64 = saved_storages()
                .iter()
                .filter(|s| !marked.contains(&s.storage_id))
                .map(|s| block(s.bytes))
                .sum();
            assert!(activations > 0);
            assert_eq!(category(Category::Activation), activations, "step {step}");
            // Everything else alive is the loss and the scratch of nothing: a temporary.
            assert_eq!(category(Category::Temporary), block(loss.storage_nbytes()));
            let total: i64 = Category::ALL.iter().map(|&c| category(c)).sum();
            assert_eq!(total, caching.memory_stats().allocated_bytes.all.current);

            loss.backward()?;
            // Backward freed the graph: no activations are left, the gradients are counted.
            assert_eq!(category(Category::Activation), 0);
            let grads: Vec<Tensor> = params.iter().filter_map(Tensor::grad).collect();
            assert_eq!(category(Category::Gradient), blocks(&grads));
            drop(loss);
            adam.step()?;
            adam.zero_grad()?;
            assert_eq!(category(Category::Temporary), 0, "step {step}");
        }
        caching
            .check_consistency()
            .map_err(|message| strata_core::Error::Autograd { message })
    })
}
