//! The layers of `torch.nn`, with PyTorch's parameter names and default initialisation.

mod activation;
mod attention;
mod batch_norm;
mod conv;
mod defaults;
mod embedding;
mod flatten;
mod layer_norm;
mod linear;
mod pool;
mod rnn;

pub use activation::{GeluApproximate, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh, GELU};
pub use attention::{AttendOptions, MultiheadAttention, MultiheadAttentionOptions};
pub use batch_norm::{BatchNorm, BatchNorm1d, BatchNorm2d};
pub use conv::{Conv2d, Conv2dConfig};
pub use embedding::Embedding;
pub use flatten::{Dropout, Flatten};
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use rnn::{RnnConfig, GRU, LSTM, RNN};

#[cfg(test)]
mod tests;
