//! No dispose scopes: a tensor's memory goes back to the allocator the moment its last
//! handle drops, at the end of its Rust scope or at an explicit `drop`. A view is a handle
//! too: the storage stays until the view drops.
//!
//! Run with `cargo run --release --example drop_order`.

use strata::core::{memory, DType, Device, Tensor};

fn main() -> strata::Result<()> {
    let mib = 1 << 20;
    let base = memory::memory_allocated(Device::Cpu)?;
    let now = || -> strata::Result<usize> { Ok(memory::memory_allocated(Device::Cpu)? - base) };
    let mut seen = Vec::new();
    {
        let a = Tensor::zeros(&[mib / 4], DType::F32)?; // 1 MiB
        let b = Tensor::zeros(&[2 * mib / 4], DType::F32)?; // 2 MiB
        seen.push(now()?);
        assert_eq!(seen[0], 3 * mib);
        drop(a); // freed here, not at the end of the block
        seen.push(now()?);
        assert_eq!(seen[1], 2 * mib);
        let head = b.narrow(0, 0, 16)?; // a view: shares b's storage
        drop(b);
        seen.push(now()?);
        assert_eq!(seen[2], 2 * mib, "the view keeps the storage");
        drop(head);
        seen.push(now()?);
        assert_eq!(seen[3], 0);
        let c = Tensor::zeros(&[mib / 4], DType::F32)?;
        let _c2 = c.clone(); // another handle to the same tensor, not a copy
        seen.push(now()?);
        assert_eq!(seen[4], mib);
    } // c and _c2 drop here, in reverse order of declaration
    seen.push(now()?);
    assert_eq!(seen[5], 0);
    Ok(())
}

/// `cargo test` runs the example (`test = true` in Cargo.toml): it holds when `main` does.
#[test]
fn holds() -> strata::Result<()> {
    main()
}
