//! Evaluation: with grad mode on, every activation is saved for a backward that never
//! comes; under `no_grad` or `inference_mode` each activation is freed as soon as the next
//! layer has read it. The two modes peak at the same bytes: inference mode saves only
//! version-counter bookkeeping, not memory.
//!
//! Run with `cargo run --release --example eval_loop`.

use strata::core::autograd::{inference_mode, no_grad};
use strata::core::{DType, Device, Tensor};
use strata::nn::module::shared;
use strata::nn::{Linear, Module, ReLU, Sequential};
use strata::profile::MemoryTracker;

fn main() -> strata::Result<()> {
    let model = Sequential::new();
    for i in 0..4 {
        model.push(shared(Linear::new(
            if i == 0 { 784 } else { 1024 },
            1024,
            true,
        )?))?;
        model.push(shared(ReLU::new()))?;
    }
    model.eval();
    let x = Tensor::randn(&[512, 784], DType::F32)?;
    let tracker = MemoryTracker::new(Device::Cpu);
    let with_grad = tracker.measure("grad mode", || model.call(&x))??;
    drop(with_grad); // the graph (and every saved activation) goes with the output
    let plain = tracker.measure("no_grad", || no_grad(|| model.call(&x)))??;
    drop(plain);
    let inference = tracker.measure("inference_mode", || inference_mode(|| model.call(&x)))??;
    drop(inference);
    print!("{}", tracker.report());
    let peak: Vec<usize> = tracker.phases().iter().map(|p| p.peak - p.start).collect();
    let layer_out = 512 * 1024 * 4; // 2 MiB
                                    // With grad: each ReLU's output is saved (by the ReLU, and by the next Linear as its
                                    // input), so all four are alive at the end of the forward, beside the one in flight.
    assert!(peak[0] >= 5 * layer_out);
    // Without: one layer's input and output at a time.
    assert!(peak[1] <= 2 * layer_out);
    assert_eq!(peak[1], peak[2]);
    Ok(())
}

/// `cargo test` runs the example (`test = true` in Cargo.toml): it holds when `main` does.
#[test]
fn holds() -> strata::Result<()> {
    main()
}
