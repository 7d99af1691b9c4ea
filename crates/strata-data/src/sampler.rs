//! Samplers: the order in which an epoch visits a dataset's indices, and the batches they
//! are grouped into.

use std::sync::Arc;

use strata_core::Generator;

use crate::dataset::mix;
use crate::error::{DataError, Result};

/// An order of indices for each epoch.
pub trait Sampler: Send + Sync {
    /// The indices of epoch `epoch` (counted from 0), in order.
    fn indices(&self, epoch: u64) -> Vec<usize>;
    /// How many indices an epoch has.
    fn len(&self) -> usize;
    /// Whether an epoch has none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `0, 1, …, len - 1` every epoch (PyTorch's `SequentialSampler`).
#[derive(Debug, Clone)]
pub struct SequentialSampler {
    len: usize,
}

impl SequentialSampler {
    /// The sampler of a dataset of `len` samples.
    pub fn new(len: usize) -> Self {
        SequentialSampler { len }
    }
}

impl Sampler for SequentialSampler {
    fn indices(&self, _: u64) -> Vec<usize> {
        (0..self.len).collect()
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// A new permutation every epoch, drawn from a generator seeded by (seed, epoch): the same
/// seed gives the same epochs, in any process (PyTorch's `RandomSampler` with a seeded
/// generator).
#[derive(Debug, Clone)]
pub struct RandomSampler {
    len: usize,
    seed: u64,
}

impl RandomSampler {
    /// Permutations of `0..len` seeded with `seed`.
    pub fn new(len: usize, seed: u64) -> Self {
        RandomSampler { len, seed }
    }
}

impl Sampler for RandomSampler {
    fn indices(&self, epoch: u64) -> Vec<usize> {
        permutation(self.len, &mut Generator::new(mix(self.seed) ^ epoch))
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// A uniform random permutation of `0..n` (Fisher–Yates) drawn from `g`.
pub(crate) fn permutation(n: usize, g: &mut Generator) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let wide = (u64::from(g.next_u32()) << 32) | u64::from(g.next_u32());
        let j = (wide % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// Groups a sampler's indices into batches of `batch_size`, the last one shorter unless
/// `drop_last` (PyTorch's `BatchSampler`).
#[derive(Clone)]
pub struct BatchSampler {
    sampler: Arc<dyn Sampler>,
    batch_size: usize,
    drop_last: bool,
}

impl BatchSampler {
    /// Batches of `batch_size` (at least 1) from `sampler`.
    pub fn new(sampler: Arc<dyn Sampler>, batch_size: usize, drop_last: bool) -> Result<Self> {
        if batch_size == 0 {
            return Err(DataError::argument(
                "BatchSampler::new",
                "batch_size must be at least 1",
            ));
        }
        Ok(BatchSampler {
            sampler,
            batch_size,
            drop_last,
        })
    }

    /// The batches of epoch `epoch`.
    pub fn batches(&self, epoch: u64) -> Vec<Vec<usize>> {
        let indices = self.sampler.indices(epoch);
        let mut out: Vec<Vec<usize>> = indices
            .chunks(self.batch_size)
            .map(<[usize]>::to_vec)
            .collect();
        if self.drop_last && out.last().is_some_and(|b| b.len() < self.batch_size) {
            out.pop();
        }
        out
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        let n = self.sampler.len();
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_epochs_are_permutations_fixed_by_seed_and_epoch() {
        let s = RandomSampler::new(100, 3);
        let e0 = s.indices(0);
        let mut sorted = e0.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_eq!(e0, RandomSampler::new(100, 3).indices(0));
        assert_ne!(e0, s.indices(1));
        assert_ne!(e0, RandomSampler::new(100, 4).indices(0));
    }

    #[test]
    fn batches_keep_order_and_drop_or_keep_the_last() {
        let seq: Arc<dyn Sampler> = Arc::new(SequentialSampler::new(10));
        let keep = BatchSampler::new(seq.clone(), 4, false).unwrap();
        assert_eq!(
            keep.batches(0),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
        );
        assert_eq!(keep.len(), 3);
        let drop = BatchSampler::new(seq.clone(), 4, true).unwrap();
        assert_eq!(drop.batches(0).len(), 2);
        assert_eq!(drop.len(), 2);
        assert!(BatchSampler::new(seq, 0, false).is_err());
    }
}
