//! A product too large to hold whole, computed in chunks of rows into one reused output
//! buffer with an `out=` op: the peak is one chunk's result, and after the first chunk no
//! chunk allocates.
//!
//! Run with `cargo run --release --example chunked_out`.

use strata::core::{memory, DType, Device, Tensor};

fn main() -> strata::Result<()> {
    let x = Tensor::randn(&[4096, 256], DType::F32)?;
    let w = Tensor::randn(&[256, 1024], DType::F32)?;
    let rows = 512;
    let whole_bytes = 4096 * 1024 * 4;

    memory::reset_peak_memory_stats(Device::Cpu)?;
    let base = memory::memory_allocated(Device::Cpu)?;
    let whole_sum = x.matmul(&w)?.sum(None, false)?.item::<f32>()?;
    let whole_peak = memory::max_memory_allocated(Device::Cpu)? - base;

    memory::reset_peak_memory_stats(Device::Cpu)?;
    let base = memory::memory_allocated(Device::Cpu)?;
    let out = Tensor::empty(&[rows, 1024], DType::F32)?;
    let mut total = 0f64;
    let mut allocations = Vec::new();
    for start in (0..4096).step_by(rows) {
        let before = memory::memory_stats(Device::Cpu)?.allocation.all.allocated;
        x.narrow(0, start as i64, rows)?.matmul_out(&w, &out)?;
        allocations.push(memory::memory_stats(Device::Cpu)?.allocation.all.allocated - before);
        total += f64::from(out.sum(None, false)?.item::<f32>()?);
    }
    let chunked_peak = memory::max_memory_allocated(Device::Cpu)? - base;
    println!("whole: peak {whole_peak} bytes; chunked: peak {chunked_peak} bytes");
    assert!(whole_peak >= whole_bytes);
    assert!(chunked_peak < whole_bytes / 4);
    // Each chunk's sum allocates its one-element result; the product itself never does.
    assert!(allocations.iter().all(|&n| n == 0), "{allocations:?}");
    assert!((total - f64::from(whole_sum)).abs() <= 1e-3 * f64::from(whole_sum).abs().max(1.0));
    Ok(())
}

/// `cargo test` runs the example (`test = true` in Cargo.toml): it holds when `main` does.
#[test]
fn holds() -> strata::Result<()> {
    main()
}
