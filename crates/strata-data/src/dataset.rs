//! The map-style dataset: a length, the fields of every sample, and a way to write sample `i`
//! into tensors it is given (a slot of a batch), so that a batch is never stacked from
//! per-sample tensors.

use strata_core::{DType, Generator, Tensor};

use crate::error::Result;

/// One field of every sample: its name, shape (without the batch dimension) and dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// What the field holds (`"image"`, `"label"`).
    pub name: String,
    /// The shape of one sample's field.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: DType,
}

impl Field {
    /// A field named `name` of `shape` and `dtype`.
    pub fn new(name: &str, shape: &[usize], dtype: DType) -> Field {
        Field {
            name: name.to_owned(),
            shape: shape.to_vec(),
            dtype,
        }
    }
}

/// What building one sample may draw its randomness from. The generator is seeded by
/// (seed, epoch, index) alone, so a sample gets the same draws whichever worker builds it
/// and however many workers there are.
pub struct SampleContext {
    /// The sample's index in the dataset.
    pub index: usize,
    /// The epoch, counted from 0.
    pub epoch: u64,
    /// The sample's own generator.
    pub generator: Generator,
}

impl SampleContext {
    /// The context of sample `index` in `epoch` under the loader's `seed`.
    pub fn new(seed: u64, epoch: u64, index: usize) -> SampleContext {
        let key = mix(mix(mix(seed) ^ epoch) ^ index as u64);
        SampleContext {
            index,
            epoch,
            generator: Generator::new(key),
        }
    }
}

/// SplitMix64's finaliser: a bijection that spreads nearby keys far apart.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A map-style dataset (PyTorch's `Dataset` with `__len__` and `__getitem__`). Datasets are
/// shared by the loader's worker threads, so they are `Send + Sync`.
pub trait Dataset: Send + Sync {
    /// How many samples it has.
    fn len(&self) -> usize;

    /// Whether it has none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fields every sample has, in order.
    fn fields(&self) -> Vec<Field>;

    /// Writes sample `index` (below [`Dataset::len`]) into `out`: one tensor per field, of
    /// the field's shape and dtype (usually a view of the sample's slot in a batch).
    fn write(&self, index: usize, out: &[Tensor], ctx: &mut SampleContext) -> Result<()>;

    /// Sample `index` as tensors of its own (one per field), with the context of `seed` 0,
    /// epoch 0.
    fn get(&self, index: usize) -> Result<Vec<Tensor>> {
        let out = self
            .fields()
            .iter()
            .map(|f| Tensor::empty(&f.shape, f.dtype))
            .collect::<strata_core::Result<Vec<_>>>()?;
        self.write(index, &out, &mut SampleContext::new(0, 0, index))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_depend_on_seed_epoch_and_index_alone() {
        let draw = |s, e, i| SampleContext::new(s, e, i).generator.next_u32();
        assert_eq!(draw(7, 1, 42), draw(7, 1, 42));
        assert_ne!(draw(7, 1, 42), draw(7, 1, 43));
        assert_ne!(draw(7, 1, 42), draw(7, 2, 42));
        assert_ne!(draw(7, 1, 42), draw(8, 1, 42));
    }
}
