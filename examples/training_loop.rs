//! A training loop whose memory is flat from the second step on: gradients are dropped
//! (`zero_grad(set_to_none)`), the loss is kept as a number, and the graph is freed by
//! backward. The leak watch confirms it.
//!
//! Run with `cargo run --release --example training_loop`.

use strata::core::nn::functional::{cross_entropy, Reduction};
use strata::core::{memory, DType, Device, Tensor};
use strata::nn::module::shared;
use strata::nn::optim::{Adam, Optimizer};
use strata::nn::{Linear, Module, ReLU, Sequential};
use strata::profile::LeakWatch;

fn main() -> strata::Result<()> {
    let model = Sequential::new();
    model.push(shared(Linear::new(64, 256, true)?))?;
    model.push(shared(ReLU::new()))?;
    model.push(shared(Linear::new(256, 10, true)?))?;
    let mut opt = Optimizer::adam(model.parameters(), Adam::default())?;
    let x = Tensor::randn(&[128, 64], DType::F32)?;
    let y = Tensor::from_vec((0..128).map(|i| i % 10).collect::<Vec<i64>>(), &[128])?;
    let mut watch = LeakWatch::new(Device::Cpu);
    let (mut losses, mut after) = (Vec::new(), Vec::new());
    for _ in 0..12 {
        let loss = cross_entropy(&model.call(&x)?, &y, Reduction::Mean)?;
        loss.backward()?;
        opt.step()?;
        opt.zero_grad(true)?;
        losses.push(loss.item::<f32>()?); // a number, not the tensor and its graph
        drop(loss);
        after.push(memory::memory_allocated(Device::Cpu)?);
        assert!(watch.step()?.is_empty());
    }
    println!("loss {:.3} -> {:.3}", losses[0], losses[11]);
    assert!(losses[11] < losses[0]);
    // The first step creates Adam's state; after it, every step ends where the last did.
    assert!(after[1..].iter().all(|&b| b == after[1]), "{after:?}");
    Ok(())
}

/// `cargo test` runs the example (`test = true` in Cargo.toml): it holds when `main` does.
#[test]
fn holds() -> strata::Result<()> {
    main()
}
