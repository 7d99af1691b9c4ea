//! Where a run's batches come from: Fashion-MNIST images or the gpt's text windows through
//! the data loader on the CPU, or, on the meta device, batches of the same shapes, dtypes
//! and count that hold no data.

use std::sync::Arc;

use strata::core::{Category, DType, Device, Tensor};
use strata::data::transform::Normalize;
use strata::data::{
    DataLoader, Dataset, Epoch, FashionMnist, LoaderOptions, Sampler, Split, Subset,
};

use super::text::{Text, BLOCK};
use super::{Result, TrainOptions};

/// Images in Fashion-MNIST's training split.
pub const TRAIN_IMAGES: usize = 60_000;
/// Images in Fashion-MNIST's test split.
pub const TEST_IMAGES: usize = 10_000;

/// The split `split` of the dataset in `o.data_dir`, normalised, cut to `limit` images.
pub(crate) fn dataset(
    o: &TrainOptions,
    split: Split,
    limit: Option<usize>,
) -> Result<Arc<dyn Dataset>> {
    let full: Arc<dyn Dataset> =
        Arc::new(FashionMnist::load_from(&o.data_dir, split)?.normalized(Normalize::FASHION_MNIST));
    Ok(match limit {
        Some(n) if n < full.len() => Arc::new(Subset::new(full, (0..n).collect())?),
        _ => full,
    })
}

/// The test set `o` names: Fashion-MNIST's test split, or the gpt's validation windows.
pub fn test_set(o: &TrainOptions) -> Result<Arc<dyn Dataset>> {
    if let Some(text) = o.text()? {
        return text.validation();
    }
    dataset(o, Split::Test, o.test_samples)
}

/// `all` samples, or the first `limit` of them when fewer (`--train-samples`,
/// `--test-samples`).
pub(crate) fn capped(limit: Option<usize>, all: usize) -> usize {
    limit.map_or(all, |n| n.min(all))
}

/// The loader settings `o` asks for.
fn loader_options(o: &TrainOptions, shuffle: bool) -> LoaderOptions {
    LoaderOptions {
        batch_size: o.batch_size,
        shuffle,
        num_workers: o.workers,
        prefetch_factor: if o.workers > 0 { o.prefetch } else { None },
        seed: o.seed,
        ..LoaderOptions::default()
    }
}

/// What one sample of a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sample {
    /// A `[1, 28, 28]` f32 image and its i64 label.
    Image,
    /// A window of [`BLOCK`] i64 tokens and the next token of each.
    Window,
}

/// A source of batches for one split: the loader, or meta batches.
pub(crate) enum Data {
    /// The real samples, through the loader.
    Real(DataLoader),
    /// `images` samples in batches of `batch_size`, as meta tensors, with `in_flight`
    /// batches made ahead as the loader's workers would.
    Meta {
        images: usize,
        batch_size: usize,
        in_flight: usize,
        sample: Sample,
    },
}

impl Data {
    /// The training split (`shuffle`) or the test split, as `o` asks; for the gpt, `text`'s
    /// random training windows (`steps × batch size`, one epoch) or its validation windows.
    pub(crate) fn new(o: &TrainOptions, split: Split, text: Option<&Text>) -> Result<Data> {
        let (limit, full) = match (split, text) {
            (Split::Train, Some(_)) => (None, o.steps_or_default() * o.batch_size),
            (Split::Test, Some(t)) => (None, t.validation()?.len()),
            (Split::Train, None) => (o.train_samples, TRAIN_IMAGES),
            (Split::Test, None) => (o.test_samples, TEST_IMAGES),
        };
        if o.device == Device::Meta {
            let sample = if text.is_some() {
                Sample::Window
            } else {
                Sample::Image
            };
            return Ok(Data::meta(o, capped(limit, full), sample));
        }
        match text {
            // Random windows need no shuffling: each draws its own start.
            Some(t) if split == Split::Train => Data::from_dataset(t.training(full)?, o, false),
            Some(t) => Data::from_dataset(t.validation()?, o, false),
            None => Data::from_dataset(dataset(o, split, limit)?, o, split == Split::Train),
        }
    }

    /// `samples` samples in meta batches as `o`'s loader would make them: its batch size, and
    /// its bound of batches made ahead (each worker keeps `prefetch` batches ready).
    pub(crate) fn meta(o: &TrainOptions, samples: usize, sample: Sample) -> Data {
        let in_flight = if o.workers > 0 {
            o.workers * o.prefetch.unwrap_or(2)
        } else {
            0
        };
        Data::Meta {
            images: samples,
            batch_size: o.batch_size,
            in_flight,
            sample,
        }
    }

    /// Batches of `data` through a loader configured as `o` says.
    pub(crate) fn from_dataset(
        data: Arc<dyn Dataset>,
        o: &TrainOptions,
        shuffle: bool,
    ) -> Result<Data> {
        Ok(Data::Real(DataLoader::new(
            data,
            loader_options(o, shuffle),
        )?))
    }

    /// Batches of `data` in `sampler`'s order through a loader configured as `o` says.
    pub(crate) fn with_sampler(
        data: Arc<dyn Dataset>,
        sampler: Arc<dyn Sampler>,
        o: &TrainOptions,
    ) -> Result<Data> {
        Ok(Data::Real(DataLoader::with_sampler(
            data,
            sampler,
            loader_options(o, false),
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

    /// The dataset behind the batches (`None` on meta).
    pub(crate) fn dataset(&self) -> Option<&Arc<dyn Dataset>> {
        match self {
            Data::Real(l) => Some(l.dataset()),
            Data::Meta { .. } => None,
        }
    }

    /// Makes the next pass epoch `epoch` (its order and draws), as a resumed run needs.
    pub(crate) fn set_epoch(&mut self, epoch: u64) {
        if let Data::Real(l) = self {
            l.set_epoch(epoch);
        }
    }

    /// One pass over the split.
    pub(crate) fn epoch(&mut self) -> Result<Batches<'_>> {
        self.epoch_from(0)
    }

    /// One pass over the split from its batch `start` (a resumed run's first epoch).
    pub(crate) fn epoch_from(&mut self, start: usize) -> Result<Batches<'_>> {
        if start > 0 && matches!(self, Data::Meta { .. }) {
            return Err(super::TrainError::Options(
                "meta batches cannot start in the middle of an epoch".into(),
            ));
        }
        Ok(match self {
            Data::Real(l) => Batches::Real(l.epoch_from(start)?),
            Data::Meta {
                images,
                batch_size,
                in_flight,
                sample,
            } => Batches::Meta {
                left: *images,
                batch_size: *batch_size,
                in_flight: *in_flight,
                sample: *sample,
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
        sample: Sample,
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
                sample,
                ready,
            } => {
                // Keep the batch handed out plus `in_flight` made ahead, as a prefetching
                // loader holds them.
                while *left > 0 && ready.len() <= *in_flight {
                    let b = (*batch_size).min(*left);
                    *left -= b;
                    match meta_batch(b, *sample) {
                        Ok(batch) => ready.push_back(batch),
                        Err(e) => return Some(Err(e)),
                    }
                }
                ready.pop_front().map(Ok)
            }
        }
    }
}

/// A batch of `b` samples on the meta device, shaped and typed as the loader's.
fn meta_batch(b: usize, sample: Sample) -> Result<(Tensor, Tensor)> {
    let on = Tensor::on(Device::Meta);
    let (x, y) = match sample {
        Sample::Image => (
            on.zeros(&[b, 1, 28, 28], DType::F32)?,
            on.zeros(&[b], DType::I64)?,
        ),
        Sample::Window => (
            on.zeros(&[b, BLOCK], DType::I64)?,
            on.zeros(&[b, BLOCK], DType::I64)?,
        ),
    };
    x.mark_category(Category::Input);
    y.mark_category(Category::Input);
    Ok((x, y))
}
