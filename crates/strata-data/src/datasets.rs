//! Datasets made of other things: tensors sliced along their first dimension, a subset of
//! another dataset, several datasets end to end, and a seeded random split.

use std::sync::Arc;

use strata_core::{Generator, Tensor};

use crate::dataset::{Dataset, Field, SampleContext};
use crate::error::{DataError, Result};
use crate::sampler::permutation;

/// Tensors that share their first dimension: sample `i` is row `i` of each (PyTorch's
/// `TensorDataset`).
pub struct TensorDataset {
    tensors: Vec<Tensor>,
    len: usize,
}

impl TensorDataset {
    /// The dataset of `tensors`, which must all have the same first dimension.
    pub fn new(tensors: Vec<Tensor>) -> Result<TensorDataset> {
        let Some(first) = tensors.first() else {
            return Err(DataError::argument(
                "TensorDataset::new",
                "needs at least one tensor",
            ));
        };
        if first.dim() == 0 {
            return Err(DataError::argument(
                "TensorDataset::new",
                "tensor 0 is 0-d; each tensor needs a first dimension to index samples by",
            ));
        }
        let len = first.shape()[0];
        for (i, t) in tensors.iter().enumerate() {
            if t.dim() == 0 || t.shape()[0] != len {
                return Err(DataError::argument(
                    "TensorDataset::new",
                    format!(
                        "tensor {i} has shape {:?} where tensor 0 has {len} rows; every tensor \
                         needs the same first dimension",
                        t.shape()
                    ),
                ));
            }
        }
        Ok(TensorDataset { tensors, len })
    }
}

impl Dataset for TensorDataset {
    fn len(&self) -> usize {
        self.len
    }

    fn fields(&self) -> Vec<Field> {
        self.tensors
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(&format!("tensor{i}"), &t.shape()[1..], t.dtype()))
            .collect()
    }

    fn write(&self, index: usize, out: &[Tensor], _: &mut SampleContext) -> Result<()> {
        check_index("TensorDataset", index, self.len)?;
        for (t, o) in self.tensors.iter().zip(out) {
            o.copy_(&t.select(0, index as i64)?)?;
        }
        Ok(())
    }
}

/// `index` below `len`, or an error naming `what`.
pub(crate) fn check_index(what: &str, index: usize, len: usize) -> Result<()> {
    if index >= len {
        return Err(DataError::Sample {
            index,
            message: format!("{what} has {len} samples"),
        });
    }
    Ok(())
}

/// The samples of another dataset at the given indices, in that order (PyTorch's `Subset`).
pub struct Subset {
    dataset: Arc<dyn Dataset>,
    indices: Vec<usize>,
}

impl Subset {
    /// The samples of `dataset` at `indices` (each below its length).
    pub fn new(dataset: Arc<dyn Dataset>, indices: Vec<usize>) -> Result<Subset> {
        let len = dataset.len();
        if let Some(&bad) = indices.iter().find(|&&i| i >= len) {
            return Err(DataError::argument(
                "Subset::new",
                format!("index {bad} is out of range for a dataset of {len} samples"),
            ));
        }
        Ok(Subset { dataset, indices })
    }

    /// The indices into the underlying dataset.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

impl Dataset for Subset {
    fn len(&self) -> usize {
        self.indices.len()
    }

    fn fields(&self) -> Vec<Field> {
        self.dataset.fields()
    }

    fn write(&self, index: usize, out: &[Tensor], ctx: &mut SampleContext) -> Result<()> {
        check_index("Subset", index, self.indices.len())?;
        self.dataset.write(self.indices[index], out, ctx)
    }
}

/// Datasets one after the other (PyTorch's `ConcatDataset`); they must have the same fields.
pub struct ConcatDataset {
    datasets: Vec<Arc<dyn Dataset>>,
    /// Cumulative lengths: dataset `d` holds samples `ends[d-1] .. ends[d]`.
    ends: Vec<usize>,
}

impl ConcatDataset {
    /// `datasets` end to end.
    pub fn new(datasets: Vec<Arc<dyn Dataset>>) -> Result<ConcatDataset> {
        let Some(first) = datasets.first() else {
            return Err(DataError::argument(
                "ConcatDataset::new",
                "needs at least one dataset",
            ));
        };
        let fields = first.fields();
        let mut ends = Vec::with_capacity(datasets.len());
        let mut total = 0usize;
        for (i, d) in datasets.iter().enumerate() {
            if d.fields() != fields {
                return Err(DataError::argument(
                    "ConcatDataset::new",
                    format!(
                        "dataset {i} has fields {:?} where dataset 0 has {fields:?}",
                        d.fields()
                    ),
                ));
            }
            total += d.len();
            ends.push(total);
        }
        Ok(ConcatDataset { datasets, ends })
    }
}

impl Dataset for ConcatDataset {
    fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    fn fields(&self) -> Vec<Field> {
        self.datasets[0].fields()
    }

    fn write(&self, index: usize, out: &[Tensor], ctx: &mut SampleContext) -> Result<()> {
        check_index("ConcatDataset", index, self.len())?;
        let d = self.ends.partition_point(|&end| end <= index);
        let start = if d == 0 { 0 } else { self.ends[d - 1] };
        self.datasets[d].write(index - start, out, ctx)
    }
}

/// Splits `dataset` into non-overlapping subsets of the given lengths (which must add up to
/// its length), drawn by a permutation seeded with `seed` (PyTorch's `random_split` with a
/// seeded generator).
pub fn random_split(
    dataset: Arc<dyn Dataset>,
    lengths: &[usize],
    seed: u64,
) -> Result<Vec<Subset>> {
    let total: usize = lengths.iter().sum();
    if total != dataset.len() {
        return Err(DataError::argument(
            "random_split",
            format!(
                "the lengths add up to {total}, the dataset has {} samples",
                dataset.len()
            ),
        ));
    }
    let order = permutation(total, &mut Generator::new(seed));
    let mut start = 0;
    lengths
        .iter()
        .map(|&n| {
            let part = order[start..start + n].to_vec();
            start += n;
            Subset::new(dataset.clone(), part)
        })
        .collect()
}
