//! The share of each epoch one rank of a data-parallel job visits (PyTorch's
//! `DistributedSampler`).

use strata_core::Generator;

use crate::dataset::mix;
use crate::error::{DataError, Result};
use crate::sampler::{permutation, Sampler};

/// Rank `rank` of `num_replicas`' indices of each epoch, with PyTorch's semantics: the epoch's
/// order (a permutation seeded by seed and epoch when shuffling, else `0..len`) is padded by
/// repeating it from its start up to a multiple of `num_replicas` (or cut down to one with
/// `drop_last`), and rank r takes `order[r::num_replicas]`. Every rank then has the same
/// number of indices, so the ranks run the same number of steps.
///
/// There is no `set_epoch`: a [`Sampler`] is asked for each epoch's indices by number, so
/// every epoch is shuffled differently and the same on every rank. With one replica and
/// shuffling it visits exactly what [`RandomSampler`](crate::RandomSampler) with the same
/// seed does.
///
/// ```
/// use strata_data::{DistributedSampler, Sampler};
/// let r0 = DistributedSampler::new(5, 2, 0, false, 0, false)?;
/// let r1 = DistributedSampler::new(5, 2, 1, false, 0, false)?;
/// assert_eq!(r0.indices(0), vec![0, 2, 4]);
/// assert_eq!(r1.indices(0), vec![1, 3, 0]); // padded with the first index
/// # Ok::<(), strata_data::DataError>(())
/// ```
#[derive(Debug, Clone)]
pub struct DistributedSampler {
    len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
}

impl DistributedSampler {
    /// The sampler of rank `rank` (of `num_replicas`) over a dataset of `len` samples.
    ///
    /// # Errors
    ///
    /// [`DataError::Argument`] when `num_replicas` is 0 or `rank` is not below it.
    pub fn new(
        len: usize,
        num_replicas: usize,
        rank: usize,
        shuffle: bool,
        seed: u64,
        drop_last: bool,
    ) -> Result<Self> {
        if num_replicas == 0 {
            return Err(DataError::argument(
                "DistributedSampler::new",
                "num_replicas must be at least 1 (the world size)",
            ));
        }
        if rank >= num_replicas {
            return Err(DataError::argument(
                "DistributedSampler::new",
                format!("rank {rank} is not below num_replicas {num_replicas}"),
            ));
        }
        Ok(DistributedSampler {
            len,
            num_replicas,
            rank,
            shuffle,
            seed,
            drop_last,
        })
    }

    /// Indices all ranks together visit per epoch (`len()` × `num_replicas`).
    pub fn total_size(&self) -> usize {
        self.len() * self.num_replicas
    }
}

impl Sampler for DistributedSampler {
    fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut order = if self.shuffle {
            permutation(self.len, &mut Generator::new(mix(self.seed) ^ epoch))
        } else {
            (0..self.len).collect()
        };
        let total = self.total_size();
        if order.is_empty() {
            return Vec::new();
        }
        if self.drop_last {
            order.truncate(total);
        } else {
            let original = order.len();
            let mut k = 0;
            while order.len() < total {
                order.push(order[k % original]);
                k += 1;
            }
        }
        order
            .into_iter()
            .skip(self.rank)
            .step_by(self.num_replicas)
            .collect()
    }

    fn len(&self) -> usize {
        if self.drop_last {
            self.len / self.num_replicas
        } else {
            self.len.div_ceil(self.num_replicas)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RandomSampler;

    fn ranks(len: usize, world: usize, shuffle: bool, drop_last: bool) -> Vec<Vec<usize>> {
        (0..world)
            .map(|r| {
                DistributedSampler::new(len, world, r, shuffle, 7, drop_last)
                    .unwrap()
                    .indices(3)
            })
            .collect()
    }

    #[test]
    fn pads_from_the_start_to_a_multiple_of_the_world_size() {
        // PyTorch: DistributedSampler(range(10), num_replicas=4, rank=r, shuffle=False)
        assert_eq!(
            ranks(10, 4, false, false),
            vec![vec![0, 4, 8], vec![1, 5, 9], vec![2, 6, 0], vec![3, 7, 1]]
        );
        // More padding than the dataset holds repeats it again: range(2) over 5 ranks.
        assert_eq!(
            ranks(2, 5, false, false),
            vec![vec![0], vec![1], vec![0], vec![1], vec![0]]
        );
    }

    #[test]
    fn drop_last_cuts_the_tail_so_every_rank_has_as_many() {
        assert_eq!(
            ranks(10, 4, false, true),
            vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
        let s = DistributedSampler::new(10, 4, 0, false, 0, true).unwrap();
        assert_eq!((s.len(), s.total_size()), (2, 8));
    }

    #[test]
    fn shuffled_ranks_split_one_permutation_and_one_replica_is_the_random_sampler() {
        let parts = ranks(11, 3, true, false);
        assert!(parts.iter().all(|p| p.len() == 4));
        let mut seen: Vec<usize> = parts.concat();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, (0..11).collect::<Vec<_>>(), "every sample is visited");
        let one = DistributedSampler::new(11, 1, 0, true, 7, false).unwrap();
        assert_eq!(one.indices(3), RandomSampler::new(11, 7).indices(3));
        assert_ne!(
            one.indices(3),
            one.indices(4),
            "each epoch is shuffled anew"
        );
    }

    #[test]
    fn a_rank_outside_the_world_is_an_error() {
        assert!(DistributedSampler::new(10, 2, 2, false, 0, false).is_err());
        assert!(DistributedSampler::new(10, 0, 0, false, 0, false).is_err());
    }
}
