//! Where a run's batches come from: Fashion-MNIST through the data loader on the CPU, or,
//! on the meta device, batches of the same shapes, dtypes and count that hold no data.

use std::sync::Arc;

use strata::core::{Category, DType, Device, Tensor};
use strata::data::transform::Normalize;
use strata::data::{DataLoader, Dataset, Epoch, FashionMnist, LoaderOptions, Split, Subset};

use super::{Result, TrainOptions};

/// Images in Fashion-MNIST's training split.
pub const TRAIN_IMAGES: usize = 60_000;
/// Images in Fashion-MNIST's test split.
pub const TEST_IMAGES: usize = 10_000;

/// The split `split` of the dataset in `o.data_dir`, normalised, cut to `limit` images.
fn dataset(o: &TrainOptions, split: Split, limit: Option<usize>) -> Result<Arc<dyn Dataset>> {
    let full: Arc<dyn Dataset> =
        Arc::new(FashionMnist::load_from(&o.data_dir, split)?.normalized(Normalize::FASHION_MNIST));
    Ok(match limit {
        Some(n) if n < full.len() => Arc::new(Subset::new(full, (0..n).collect())?),
        _ => full,
    })
}

/// The test set `o` names.
pub fn test_set(o: &TrainOptions) -> Result<Arc<dyn Dataset>> {
    dataset(o, Split::Test, o.test_samples)
}

/// A source of batches for one split: the loader, or meta batches.
pub(crate) enum Data {
    /// The real images, through the loader.
    Real(DataLoader),
    /// `images` images in batches of `batch_size`, as meta tensors, with `in_flight`
    /// batches made ahead as the loader's workers would.
    Meta {
        images: usize,
        batch_size: usize,
        in_flight: usize,
    },
}

impl Data {
    /// The training split (`shuffle`) or the test split, as `o` asks.
    pub(crate) fn new(o: &TrainOptions, split: Split) -> Result<Data> {
        let (limit, full) = match split {
            Split::Train => (o.train_samples, TRAIN_IMAGES),
            Split::Test => (o.test_samples, TEST_IMAGES),
        };
        if o.device == Device::Meta {
            // The loader's bound: each worker keeps `prefetch` batches ready.
            let in_flight = if o.workers > 0 {
                o.workers * o.prefetch.unwrap_or(2)
            } else {
                0
            };
            return Ok(Data::Meta {
                images: limit.map_or(full, |n| n.min(full)),
                batch_size: o.batch_size,
                in_flight,
            });
        }
        Data::from_dataset(dataset(o, split, limit)?, o, split == Split::Train)
    }

    /// Batches of `data` through a loader configured as `o` says.
    pub(crate) fn from_dataset(
        data: Arc<dyn Dataset>,
        o: &TrainOptions,
        shuffle: bool,
    ) -> Result<Data> {
        Ok(Data::Real(DataLoader::new(
            data,
            LoaderOptions {
                batch_size: o.batch_size,
                shuffle,
                num_workers: o.workers,
                prefetch_factor: if o.workers > 0 { o.prefetch } else { None },
                seed: o.seed,
                ..LoaderOptions::default()
            },
        )?))
    }

    /// Batches per epoch (the last one may be partial).
    pub(crate) fn len(&self) -> usize {
        match self {
            Data::Real(l) => l.len(),
            Data::Meta {
                images, batch_size, ..
            } => images.div_ceil(*batch_size),
        }
    }

    /// One pass over the split.
    pub(crate) fn epoch(&mut self) -> Result<Batches<'_>> {
        Ok(match self {
            Data::Real(l) => Batches::Real(l.epoch()?),
            Data::Meta {
                images,
                batch_size,
                in_flight,
            } => Batches::Meta {
                left: *images,
                batch_size: *batch_size,
                in_flight: *in_flight,
                ready: std::collections::VecDeque::new(),
            },
        })
    }
}

/// One epoch's batches: `(images, labels)`.
pub(crate) enum Batches<'a> {
    Real(Epoch<'a>),
    Meta {
        left: usize,
        batch_size: usize,
        in_flight: usize,
        ready: std::collections::VecDeque<(Tensor, Tensor)>,
    },
}

impl Iterator for Batches<'_> {
    type Item = Result<(Tensor, Tensor)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Batches::Real(epoch) => {
                let batch = match epoch.next()? {
                    Ok(b) => b,
                    Err(e) => return Some(Err(e.into())),
                };
                let mut t = batch.tensors.into_iter();
                match (t.next(), t.next()) {
                    (Some(x), Some(y)) => Some(Ok((x, y))),
                    _ => Some(Err(super::TrainError::Options(
                        "a batch without images and labels".into(),
                    ))),
                }
            }
            Batches::Meta {
                left,
                batch_size,
                in_flight,
                ready,
            } => {
                // Keep the batch handed out plus `in_flight` made ahead, as a prefetching
                // loader holds them.
                while *left > 0 && ready.len() <= *in_flight {
                    let b = (*batch_size).min(*left);
                    *left -= b;
                    match meta_batch(b) {
                        Ok(batch) => ready.push_back(batch),
                        Err(e) => return Some(Err(e)),
                    }
                }
                ready.pop_front().map(Ok)
            }
        }
    }
}

/// A batch of `b` images and labels on the meta device, shaped and typed as the loader's.
fn meta_batch(b: usize) -> Result<(Tensor, Tensor)> {
    let on = Tensor::on(Device::Meta);
    let x = on.zeros(&[b, 1, 28, 28], DType::F32)?;
    let y = on.zeros(&[b], DType::I64)?;
    x.mark_category(Category::Input);
    y.mark_category(Category::Input);
    Ok((x, y))
}
