//! Collecting a model's features over many batches. Appending outputs computed with grad
//! mode on keeps every batch's graph (and its activations) alive; under `no_grad`, written
//! into one preallocated buffer, the loop holds the features and nothing else.
//!
//! Run with `cargo run --release --example accumulate_features`.

use strata::core::autograd::{live_graph, no_grad};
use strata::core::{memory, DType, Device, Tensor};
use strata::nn::module::shared;
use strata::nn::{Linear, Module, ReLU, Sequential};

fn main() -> strata::Result<()> {
    let model = Sequential::new();
    model.push(shared(Linear::new(256, 512, true)?))?;
    model.push(shared(ReLU::new()))?;
    model.push(shared(Linear::new(512, 32, true)?))?;
    let batches: Vec<Tensor> = (0..8)
        .map(|_| Tensor::randn(&[256, 256], DType::F32))
        .collect::<strata::Result<_>>()?;
    let features_bytes = 8 * 256 * 32 * 4;

    // The pitfall: each output holds its graph, and the graph holds the hidden activations.
    let base = memory::memory_allocated(Device::Cpu)?;
    let kept: Vec<Tensor> = batches
        .iter()
        .map(|b| model.call(b))
        .collect::<strata::Result<_>>()?;
    let with_graphs = memory::memory_allocated(Device::Cpu)? - base;
    assert!(live_graph().iter().map(|g| g.nodes).sum::<usize>() >= 8 * 3);
    drop(kept);

    // The fix: no graph, and one buffer written in place.
    let base = memory::memory_allocated(Device::Cpu)?;
    let features = Tensor::zeros(&[8 * 256, 32], DType::F32)?;
    no_grad(|| -> strata::Result<()> {
        for (i, b) in batches.iter().enumerate() {
            let out = model.call(b)?;
            features.narrow(0, (i * 256) as i64, 256)?.copy_(&out)?;
        }
        Ok(())
    })?;
    let buffered = memory::memory_allocated(Device::Cpu)? - base;
    println!("kept with graphs: {with_graphs} bytes; preallocated: {buffered} bytes");
    assert_eq!(buffered, features_bytes);
    assert!(with_graphs > 4 * buffered);
    Ok(())
}

/// `cargo test` runs the example (`test = true` in Cargo.toml): it holds when `main` does.
#[test]
fn holds() -> strata::Result<()> {
    main()
}
