//! The layers of `torch.nn`, with PyTorch's parameter names and default initialisation.

mod activation;
mod conv;
mod defaults;
mod embedding;
mod flatten;
mod layer_norm;
mod linear;
mod pool;

pub use activation::{LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh, GELU};
pub use conv::{Conv2d, Conv2dConfig};
pub use embedding::Embedding;
pub use flatten::{Dropout, Flatten};
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use pool::MaxPool2d;

#[cfg(test)]
mod tests;
