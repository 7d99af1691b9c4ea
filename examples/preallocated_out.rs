//! A hot loop with no allocation at all: every intermediate has a preallocated buffer
//! written with an `out=` op or in place, so the allocator is never called once the loop
//! runs (its allocation counter does not move).
//!
//! Run with `cargo run --release --example preallocated_out`.

use strata::core::{memory, DType, Device, Tensor};

fn main() -> strata::Result<()> {
    let a = Tensor::randn(&[256, 256], DType::F32)?;
    let b = Tensor::randn(&[256, 256], DType::F32)?;
    let count = || -> strata::Result<i64> {
        Ok(memory::memory_stats(Device::Cpu)?.allocation.all.allocated)
    };

    // Fresh results: three allocations an iteration.
    let before = count()?;
    for _ in 0..100 {
        let p = a.matmul(&b)?;
        let q = p.add(&a)?;
        let _r = q.mul(0.5)?;
    }
    let fresh = count()? - before;

    // Preallocated: the same arithmetic into buffers made once.
    let p = Tensor::empty(&[256, 256], DType::F32)?;
    let q = Tensor::empty(&[256, 256], DType::F32)?;
    let before = count()?;
    for _ in 0..100 {
        a.matmul_out(&b, &p)?;
        p.add_out(&a, 1.0, &q)?;
        q.mul_(0.5)?;
    }
    let preallocated = count()? - before;
    println!("allocations in 100 iterations: {fresh} fresh, {preallocated} preallocated");
    assert_eq!(fresh, 300);
    assert_eq!(preallocated, 0);
    Ok(())
}

/// `cargo test` runs the example (`test = true` in Cargo.toml): it holds when `main` does.
#[test]
fn holds() -> strata::Result<()> {
    main()
}
