//! Double-buffered loading: while the step works on one batch, the next is already staged
//! (here: copied into pinned memory, what a device copy would start from). At most
//! `depth` batches wait staged, and they come in order.
//!
//! Run with `cargo run --release --example double_buffered`.

use std::sync::Arc;

use strata::core::{DType, Tensor};
use strata::data::{Batch, DataLoader, LoaderOptions, Prefetch, TensorDataset};

fn main() -> strata::Result<()> {
    let x = Tensor::randn(&[1024, 64], DType::F32)?;
    let y = Tensor::arange(1024, DType::I64)?;
    let data = Arc::new(TensorDataset::new(vec![x, y])?);
    let mut loader = DataLoader::new(
        data,
        LoaderOptions {
            batch_size: 64,
            num_workers: 2,
            prefetch_factor: Some(2),
            ..LoaderOptions::default()
        },
    )?;
    let stage = |mut b: Batch| -> strata::data::Result<Batch> {
        b.tensors = b
            .tensors
            .iter()
            .map(|t| t.pin_memory())
            .collect::<strata::Result<_>>()?;
        Ok(b)
    };
    let mut batches = Prefetch::new(loader.epoch()?, 1, stage)?;
    let mut seen = Vec::new();
    while let Some(batch) = batches.next() {
        let batch = batch?;
        // The next batch is staged while this one is used (depth 1: double buffering).
        assert!(batches.staged() <= 1);
        assert!(batch.tensors[0].is_pinned());
        let first_label = batch.tensors[1].narrow(0, 0, 1)?.item::<i64>()?;
        assert_eq!(first_label as usize, batch.index * 64);
        seen.push(batch.index);
    }
    assert_eq!(seen, (0..16).collect::<Vec<_>>());
    Ok(())
}

/// `cargo test` runs the example (`test = true` in Cargo.toml): it holds when `main` does.
#[test]
fn holds() -> strata::Result<()> {
    main()
}
