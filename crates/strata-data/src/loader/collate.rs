//! Building one batch: the default collate allocates one tensor per field with the batch
//! dimension in front and has each sample write itself into its slot.

use std::panic::{catch_unwind, AssertUnwindSafe};

use strata_core::{allocating_as, Category, Tensor};

use super::stop::stop_requested;
use crate::dataset::{Dataset, SampleContext};
use crate::error::{DataError, Result};

/// Builds a batch from samples (PyTorch's `collate_fn`): supply your own to a loader with
/// [`crate::DataLoader::collate`].
pub trait Collate: Send + Sync {
    /// The batch of the samples of `dataset` at `indices`, in epoch `epoch` of a loader
    /// seeded with `seed` (samples draw from [`SampleContext::new`]`(seed, epoch, index)`).
    fn collate(
        &self,
        dataset: &dyn Dataset,
        indices: &[usize],
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<Tensor>>;
}

/// The default collate: one `[batch, field…]` tensor per field, marked as an input, each
/// sample written straight into its row; nothing is stacked afterwards.
#[derive(Debug, Clone, Copy, Default)]
pub struct IntoBatch;

impl Collate for IntoBatch {
    fn collate(
        &self,
        dataset: &dyn Dataset,
        indices: &[usize],
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<Tensor>> {
        let batch = dataset
            .fields()
            .iter()
            .map(|f| {
                let mut shape = Vec::with_capacity(f.shape.len() + 1);
                shape.push(indices.len());
                shape.extend_from_slice(&f.shape);
                // Counted as an input from its first byte: the training thread may read
                // the statistics at any moment of this worker's.
                Ok(allocating_as(Category::Input, || {
                    Tensor::empty(&shape, f.dtype)
                })?)
            })
            .collect::<Result<Vec<_>>>()?;
        for (row, &index) in indices.iter().enumerate() {
            if stop_requested() {
                return Err(DataError::argument(
                    "DataLoader",
                    "the epoch was left; this batch was abandoned",
                ));
            }
            let slots = batch
                .iter()
                .map(|b| b.select(0, row as i64))
                .collect::<strata_core::Result<Vec<_>>>()?;
            let mut ctx = SampleContext::new(seed, epoch, index);
            sample(index, || dataset.write(index, &slots, &mut ctx))?;
        }
        Ok(batch)
    }
}

/// Runs `f`, which builds sample `index`, turning its error or panic into an error that
/// names the sample.
pub(crate) fn sample(index: usize, f: impl FnOnce() -> Result<()>) -> Result<()> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e @ DataError::Sample { .. })) => Err(e),
        Ok(Err(e)) => Err(DataError::Sample {
            index,
            message: e.to_string(),
        }),
        Err(panic) => Err(DataError::Sample {
            index,
            message: format!("panicked: {}", panic_message(&*panic)),
        }),
    }
}

/// The text of a panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
