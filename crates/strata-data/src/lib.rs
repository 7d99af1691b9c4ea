//! strata's data pipeline, after `torch.utils.data`: map-style datasets whose samples are
//! written straight into their batch's buffer, samplers, and a [`DataLoader`] whose worker
//! threads build batches ahead of the training step with a bounded number in flight, in
//! sampler order whatever the worker count; the IDX format with the Fashion-MNIST and
//! MNIST datasets; and character-level text (the Shakespeare corpus, its vocabulary, and
//! the windows a language model trains and is evaluated on).
//!
//! Every batch tensor is counted by the allocator as an input (`Category::Input`), and
//! workers allocate where the thread that started the epoch would (its allocator routing
//! and scope), or on the allocator given to [`DataLoader::allocator`].

mod dataset;
mod datasets;
mod distributed_sampler;
mod error;
pub mod idx;
mod loader;
mod mnist;
mod sampler;
mod text;
mod text_windows;
pub mod transform;

pub use dataset::{Dataset, Field, SampleContext};
pub use datasets::{random_split, ConcatDataset, Subset, TensorDataset};
pub use distributed_sampler::DistributedSampler;
pub use error::{DataError, Result};
#[cfg(feature = "cuda")]
pub use loader::DeviceCopy;
pub use loader::{
    Batch, Collate, DataLoader, Epoch, IntoBatch, IterableDataset, IterableEpoch, IterableLoader,
    LoaderOptions, Prefetch, Stage, Stream,
};
pub use mnist::{FashionMnist, Mnist, Split};
pub use sampler::{BatchSampler, RandomSampler, Sampler, SequentialSampler};
pub use text::CharCorpus;
pub use text_windows::{EvalWindows, RandomWindows};
